"""Cost of the run-operation machinery per training step, side by side in one run.

    python bench/speed/run_operations.py [--molecules 2000] [--steps 75] [--repeats 3]

Compares, on the same model and data (QM9 subset, the qm9_gap model):

* ``plain``: a shuffled DataLoader with persistent workers and no extra callbacks;
* ``run-ops``: what ``train.py`` uses, i.e. the resumable global-batch loader (workers restarted
  and re-seeded every epoch) plus the RNG-state, preemption, non-finite-loss and last-checkpoint
  callbacks (last.ckpt every 25 steps).

Variants alternate, ``--repeats`` times. Each run gives its median time per optimiser step after
a warm-up epoch; the fastest run of each variant is reported (other jobs on a shared machine only
ever make runs slower) with the ratio run-ops / plain.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
from torch.utils.data import DataLoader

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import QM9
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.run.callbacks import LastCheckpoint, NonFiniteLossGuard, PreemptionCheckpoint, RNGState
from graphormer_urpe.tasks import GraphRegression, OptimConfig


class PlainDataModule(GraphDataModule):
    """The same data through an ordinary shuffled DataLoader with persistent workers."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.datasets["train"],
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.num_workers,
            collate_fn=collate_graphs,
            persistent_workers=True,
        )


class StepTimer(pl.Callback):
    """Wall time of every optimiser step after ``skip`` steps."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.times: list[float] = []
        self.last: float | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        now = time.perf_counter()
        if self.last is not None and trainer.global_step > self.skip:
            self.times.append(now - self.last)
        self.last = now


def run(variant: str, root: str, molecules: int, steps: int, batch: int, workers: int) -> float:
    """Median seconds per step of one training run."""
    data_class = PlainDataModule if variant == "plain" else GraphDataModule
    data = data_class(
        QM9(max_molecules=molecules), root=root, batch_size=batch, num_workers=workers, preprocess_workers=0
    )
    config = GraphormerConfig(
        node_vocab=list(ATOM_VOCAB),
        edge_vocab=list(BOND_VOCAB),
        num_layers=4,
        hidden_dim=64,
        ffn_dim=64,
        num_heads=8,
        dropout=0.0,
        attention_dropout=0.0,
    )
    steps_per_epoch = -(-int(molecules * 0.8) // batch)
    timer = StepTimer(skip=steps_per_epoch)
    callbacks: list[pl.Callback] = [timer]
    with tempfile.TemporaryDirectory() as tmp:
        if variant == "run-ops":
            callbacks += [
                RNGState(),
                PreemptionCheckpoint(Path(tmp)),
                NonFiniteLossGuard(),
                LastCheckpoint(Path(tmp), every_n_train_steps=25),
            ]
        trainer = pl.Trainer(
            max_steps=steps,
            accelerator="cpu",
            devices=1,
            logger=False,
            callbacks=callbacks,
            enable_checkpointing=variant == "run-ops",
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            default_root_dir=tmp,
        )
        pl.seed_everything(0, verbose=False)
        trainer.fit(GraphRegression(config, OptimConfig(lr=1e-4, warmup_steps=10)), data)
    return statistics.median(timer.times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--molecules", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=75)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--root", default="data")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"plain": [], "run-ops": []}
    for _ in range(args.repeats):
        for variant in results:
            results[variant].append(run(variant, args.root, args.molecules, args.steps, args.batch, args.workers))
    plain, ops = (min(results[v]) for v in results)
    print(
        f"\nQM9 {args.molecules} molecules, batch {args.batch}, {args.workers} worker(s), {args.steps} steps; "
        f"fastest of {args.repeats} runs of the median step time (first epoch excluded)"
    )
    print(f"{'variant':<10}{'ms/step':>10}{'ratio':>8}")
    print(f"{'plain':<10}{plain * 1e3:>10.1f}{1.0:>8.2f}")
    print(f"{'run-ops':<10}{ops * 1e3:>10.1f}{ops / plain:>8.2f}")


if __name__ == "__main__":
    main()
