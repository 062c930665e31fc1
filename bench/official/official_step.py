"""Our training step against official Graphormer's, with the same weights and the same batches, on the CPU.

    python bench/official/official_step.py                                   # ZINC and PCQM4Mv2 sizes, one thread
    python bench/official/official_step.py --settings zinc --modes eager compiled --batch-size 64
    python bench/official/official_step.py --official-batches same                # official on our batches only

The official model is transformers' port of it (``GraphormerForGraphClassification``, 4.57.6, the test extra), the
reference our import is tested against (tests/convert/test_huggingface.py); it is built at the setting's config
(``configs/zinc_subset.yaml``: 12 layers, 80 wide, 8 heads, pre-LayerNorm, every dropout 0.1;
``configs/pcqm4mv2.yaml``: 6 layers, 512 wide, 32 heads, attention dropout 0.1) with random weights, saved, and
imported into ours (``graphormer_urpe.convert huggingface``): RPE with the same weights, and URPE with them and C = 1.
Before timing, both predict the first batch in evaluation mode and must agree to float32 rounding.

Molecules are molecule-shaped random graphs of the setting's sizes with PCQM4Mv2's featurisation
(``bench/speed/train_throughput.py``), the epoch's ``--epoch-batches`` size-aware global batches collated by each side
the way it is: ``collate_graphs`` for ours, official's ``preprocess_item`` and collator for it (done before timing, as
official's data pipeline is not the step). Official also runs on its own batches of the same molecules
(``--official-batches own``): a random permutation cut into batches of the batch size, as official Graphormer's
``EpochShuffleDataset`` and fairseq's batching by count draw them, each padded to its largest molecule.

A step is forward, an L1 loss, backward, gradient clipping at 5 and AdamW: official's with ``torch.optim.AdamW`` as a
user builds it (its default implementation on the CPU: a loop over the parameters), ours as our task builds it
(fused). Each side runs every distinct batch shape ``--warm`` times, then ``--rounds`` epochs, sides alternating; the
time is process CPU time, the median epoch counts. Printed: graphs per CPU-second of each, and its speed as a multiple
of each official side's.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import yaml
from transformers.models.deprecated.graphormer import GraphormerConfig as TransformersConfig
from transformers.models.deprecated.graphormer import GraphormerForGraphClassification

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import random_molecule_record
from bench.speed.train_throughput import MODES, SETTINGS, edges_per_node
from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.convert.huggingface import import_huggingface
from graphormer_urpe.data.batch import BatchShape, GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.data.loaders import GlobalBatchSampler
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.tasks.optimiser import adamw
from graphormer_urpe.testing.official_reference import transformers_batch
from graphormer_urpe.testing.tolerance import rounding_tolerance

CLIP = 5.0


def official_model(config: dict, seed: int = 0) -> GraphormerForGraphClassification:
    """transformers' model at the config's sizes and dropouts, official v1.0's pre-LayerNorm, random weights."""
    encoder = config["model"]["init_args"]["encoder"]
    settings = TransformersConfig(
        num_hidden_layers=encoder["num_layers"],
        embedding_dim=encoder["hidden_dim"],
        ffn_embedding_dim=encoder["ffn_dim"],
        num_attention_heads=encoder["num_heads"],
        num_classes=1,
        pre_layernorm=True,
        dropout=encoder["dropout"],
        attention_dropout=encoder["attention_dropout"],
        activation_dropout=encoder["activation_dropout"],
        multi_hop_max_dist=encoder["multi_hop_max_dist"],
    )
    torch.manual_seed(seed)
    return GraphormerForGraphClassification(settings)


def our_tasks(official: GraphormerForGraphClassification, directory: Path) -> dict[str, GraphRegression]:
    """Ours with official's weights: RPE as imported, and URPE with C = 1."""
    official.save_pretrained(directory / "official")
    import_huggingface(directory / "official", directory / "ours.ckpt", spatial_pos_max=1024)
    rpe = GraphRegression.from_checkpoint(directory / "ours.ckpt")
    urpe = GraphRegression(dataclasses.replace(rpe.model.config, attention="urpe"))
    missing, unexpected = urpe.load_state_dict(rpe.state_dict(), strict=False)
    assert missing == ["model.relative_scale.weight"] and not unexpected, (missing, unexpected)
    return {"rpe": rpe, "urpe": urpe}


class Side:
    """One side's step on its own batches: forward, L1 loss, backward, clipping, its AdamW.

    Args:
        name: what the figures are printed under.
        model: the module trained.
        loss: the L1 loss of a batch.
        optimizer: the update.
        batches: the epoch's batches as this side reads them.
        shape_of: a batch's shape (the node tensor's).
    """

    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        loss: Callable[[object], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        batches: list,
        shape_of: Callable[[object], tuple],
    ) -> None:
        self.name = name
        self.shape_of = shape_of
        self.model = model.train()
        self.loss = loss
        self.optimizer = optimizer
        self.batches = batches
        self.rounds: list[float] = []

    def step(self, batch: object) -> None:
        self.loss(batch).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def warm_up(self, times: int) -> None:
        """Every distinct batch shape ``times`` times (caches, compilation)."""
        shapes: dict[tuple, object] = {}
        for batch in self.batches:
            shapes.setdefault(self.shape_of(batch), batch)
        for batch in shapes.values():
            for _ in range(times):
                self.step(batch)

    def run_epoch(self) -> float:
        """CPU seconds of one epoch."""
        started = time.process_time()
        for batch in self.batches:
            self.step(batch)
        return time.process_time() - started


def molecules(setting_name: str, count: int) -> list[GraphRecord]:
    """``count`` molecule-shaped graphs of the setting's sizes, featurised like PCQM4Mv2 (what official reads), each
    bond once (official reads bonds from an adjacency matrix: a repeated random ring closure would hold two edge
    types), their shortest paths chosen as official's Floyd-Warshall does (``path_order="official"``: where paths
    tie, the edges encoded differ otherwise)."""
    rng = np.random.default_rng(0)
    atoms = SETTINGS[setting_name].atoms
    records = []
    while len(records) < count:
        record = random_molecule_record(rng, atoms(rng), len(records), ATOM_VOCAB, BOND_VOCAB)
        pairs = {tuple(pair) for pair in record.edge_index.T.tolist()}
        if len(pairs) < record.edge_index.shape[1]:
            continue  # a ring closure on an existing bond
        structure = graph_structure(len(record.x), record.edge_index, path_order="official")
        records.append(record._replace(spd=structure.spd, first_edge=structure.first_edge))
    return records


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=["zinc", "pcqm"], choices=["zinc", "pcqm"])
    parser.add_argument("--modes", nargs="+", default=["eager"], choices=["eager", "compiled"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epoch-batches", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=1)
    parser.add_argument("--pad-nodes-to", type=int, default=8, help="node multiple of the compiled mode's batches")
    parser.add_argument(
        "--official-batches",
        nargs="+",
        default=["same", "own"],
        choices=["same", "own"],
        help="official on our size-aware batches (same), and/or on its own: the same molecules in "
        "batches of a random permutation, as its EpochShuffleDataset draws them (own)",
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, CPU, {args.threads} thread(s); global batch {args.batch_size}, "
        f"{args.epoch_batches} size-aware batches an epoch, {args.rounds} epochs per side",
        flush=True,
    )
    for setting_name in args.settings:
        config = yaml.safe_load((CONFIG_DIR / f"{SETTINGS[setting_name].config}.yaml").read_text())
        records = molecules(setting_name, args.batch_size * args.epoch_batches)
        sizes = np.array([len(r.x) for r in records])
        orders = batch_orders(records, args.batch_size)
        order = orders["same"]
        official = official_model(config)
        with tempfile.TemporaryDirectory() as scratch:
            ours = our_tasks(official, Path(scratch))
        first = [records[i] for i in order[0]]
        check_same_predictions(official, ours["rpe"], official_inputs(first), collate_graphs(first))
        names = {"same": "official, same batches", "own": "official, its own batches"}
        sides = []
        for batching in args.official_batches:
            name, batches_of = names[batching], orders[batching]
            model = copy.deepcopy(official)  # each side its own weights and optimiser, from the same start
            batches = [
                (
                    official_inputs([records[i] for i in batch]),
                    torch.from_numpy(np.stack([records[i].y for i in batch])),
                )
                for batch in batches_of
            ]
            sides.append(
                Side(
                    name,
                    model,
                    functools.partial(official_loss, model),
                    torch.optim.AdamW(model.parameters(), lr=1e-4),
                    batches,
                    lambda batch: tuple(batch[0]["input_nodes"].shape),
                )
            )
        officials = len(sides)
        for mode in args.modes:
            shape = None if mode == "eager" else BatchShape(args.pad_nodes_to, args.batch_size, edges_per_node(records))
            batches = [collate_graphs([records[i] for i in batch], shape) for batch in order]
            for attention, imported in ours.items():
                task = copy.deepcopy(imported)  # every side starts from official's weights
                task.compile_mode = MODES[mode]
                task.compile_training_step()
                sides.append(
                    Side(
                        f"ours {mode} {attention}",
                        task,
                        lambda b, task=task: task.training_losses(b)["loss"],
                        adamw(task, task.optim),
                        batches,
                        lambda batch: tuple(batch.x.shape),
                    )
                )
        for side in sides:
            side.warm_up(args.warm)
        for round_index in range(args.rounds):
            for side in sides if round_index % 2 == 0 else sides[::-1]:
                side.rounds.append(side.run_epoch())
        count = args.batch_size * args.epoch_batches
        print(f"\n{setting_name} ({SETTINGS[setting_name].config}), molecules of {sizes.min()}-{sizes.max()} atoms:")
        for side in sides:
            median = statistics.median(side.rounds)
            ratios = "  ".join(
                f"{statistics.median(official_side.rounds) / median:.2f}x {official_side.name}"
                for official_side in sides[:officials]
                if official_side is not side
            )
            print(
                f"  {side.name:26} {count / median:8.1f} graphs/CPU-s  [{count / max(side.rounds):.1f}, "
                f"{count / min(side.rounds):.1f}]  {ratios}",
                flush=True,
            )


def batch_orders(records: list[GraphRecord], batch_size: int) -> dict[str, list]:
    """An epoch's batches as lists of positions in ``records``: ``same``, ours (size-aware, a window of 100 batches),
    which official also runs on; ``own``, official's own (a random permutation cut into batches)."""
    sizes = np.array([len(r.x) for r in records])
    same = GlobalBatchSampler(range(len(records)), batch_size, sizes=sizes, bucket_window=100).epoch_batches(0)
    own = np.random.default_rng(0).permutation(len(records)).reshape(-1, batch_size)
    return {"same": list(same), "own": [list(batch) for batch in own]}


def official_inputs(molecules: list[GraphRecord]) -> dict:
    """Official's collated inputs of these molecules (its ``preprocess_item`` and collator)."""
    return transformers_batch([(m.x, m.edge_index, m.edge_attr) for m in molecules], spatial_pos_max=1024)


def official_loss(official: GraphormerForGraphClassification, batch: tuple[dict, torch.Tensor]) -> torch.Tensor:
    """The L1 loss of official's predictions of a batch (its collated inputs, its targets)."""
    inputs, targets = batch
    return (official(**inputs).logits - targets).abs().mean()


def check_same_predictions(
    official: GraphormerForGraphClassification, ours: GraphRegression, official_batch: dict, our_batch: GraphBatch
) -> None:
    """Both predict the same values in evaluation mode (the same weights read the same way), else stop."""
    with torch.no_grad():
        theirs = official.eval()(**official_batch).logits
        mine = ours.eval()(our_batch)
    torch.testing.assert_close(mine, theirs, **rounding_tolerance(mine, theirs, ulps=4096))


if __name__ == "__main__":
    main()
