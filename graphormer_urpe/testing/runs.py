"""Training runs for tests, seconds long: tiny runs' arguments, a start (:mod:`graphormer_urpe.run.start`) in this
process, ``train.py`` (run from the source tree, :data:`~graphormer_urpe.testing.REPO_DIR`) in a fresh one, and
callbacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytorch_lightning as pl
import torch

from graphormer_urpe.commands.exits import exit_codes
from graphormer_urpe.data.spec import DataSpec, SequenceSpec
from graphormer_urpe.run.cli import RUN_DIR_ENV, TrainingCLI
from graphormer_urpe.run.finetune import initialise, plan_initialisation, read_source
from graphormer_urpe.run.ledger import read_metrics
from graphormer_urpe.run.start import RunMetrics, finish_start, plan_start, run_start
from graphormer_urpe.tasks.base import GraphormerTask
from graphormer_urpe.testing import REPO_DIR

#: Molecules of the tiny QM9 runs: an 80/10/10 split gives 40 train, 5 valid and 5 test graphs.
TINY_MOLECULES = 50

#: The first 60 molecules of the example table, as issue 20's
#: probes use it (``head -61``): 48 train, 6 valid, 6 test.
SMALL_TABLE_LINES = 61

#: Arguments shared by the 2-process DDP run and its 1-process twin: global batch 4 (2 per process),
#: so the 5 validation graphs form shards of 3 and 2 graphs, i.e. 2 and 1 batches.
DDP_TWIN_ARGS = (
    "--data.batch_size",
    "4",
    "--checkpoint.every_n_steps",
    "6",
    "--wandb.plot_every_n_validations",
    "1",
)
_QUIET = ("--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false")


def tiny_run_args(data_root: Path, run_root: Path, *extra: str) -> list[str]:
    """``train.py`` arguments of a seconds-long QM9 run: 2 layers of width 16, no progress bars."""
    return [
        "--config",
        "qm9_gap",
        "--data.source.max_molecules",
        str(TINY_MOLECULES),
        "--data.root",
        str(data_root),
        "--data.batch_size",
        "8",
        "--data.num_workers",
        "0",
        "--data.preprocess_workers",
        "0",
        "--run_root",
        str(run_root),
        "--model.encoder.num_layers",
        "2",
        "--model.encoder.hidden_dim",
        "16",
        "--model.encoder.ffn_dim",
        "16",
        "--model.encoder.num_heads",
        "4",
        "--model.optim.warmup_steps",
        "3",
        "--trainer.max_steps",
        "6",
        "--trainer.val_check_interval",
        "3",
        "--trainer.log_every_n_steps",
        "1",
        *_QUIET,
        *extra,
    ]


def small_run_args(table: Path, data_root: Path, run_root: Path, *extra: str) -> list[str]:
    """``train.py`` arguments of issue 20's probe runs on ``table``: the CSV example config with batches of
    8, validation every 50 steps and 200 steps, shrunk to a model of 1 layer, width 8 (seconds)."""
    return [
        "--config",
        "smiles_csv_example",
        "--data.source.path",
        str(table),
        "--data.batch_size",
        "8",
        "--data.root",
        str(data_root),
        "--data.num_workers",
        "0",
        "--data.preprocess_workers",
        "0",
        "--run_root",
        str(run_root),
        "--model.encoder.num_layers",
        "1",
        "--model.encoder.hidden_dim",
        "8",
        "--model.encoder.ffn_dim",
        "8",
        "--model.encoder.num_heads",
        "2",
        "--trainer.val_check_interval",
        "50",
        "--trainer.max_steps",
        "200",
        *_QUIET,
        *extra,
    ]


_TINY_SEQUENCES = (
    "--data.length",
    "8",
    "--data.val_size",
    "16",
    "--data.test_size",
    "16",
    "--data.batch_size",
    "8",
)
#: Arguments that shrink each synthetic config to a run of seconds.
TINY_SYNTHETIC_ARGS = {
    "synthetic_pi": _TINY_SEQUENCES,
    "synthetic_etp": _TINY_SEQUENCES,
    "synthetic_graph": (
        "--data.train_graphs",
        "8",
        "--data.val_graphs",
        "4",
        "--data.test_graphs",
        "4",
        "--data.batch_size",
        "4",
    ),
}


def train(args: list[str], *callbacks: pl.Callback) -> RunMetrics:
    """What ``train.py ARGS`` does, in this process, with extra callbacks: plan and run one start; returns its
    metrics, or exits (``SystemExit``) with ``train.py``'s exit code."""
    with exit_codes():
        cli = TrainingCLI(args)
    cli.trainer.callbacks.extend(callbacks)
    with exit_codes(finish=partial(finish_start, cli)):
        return run_start(cli, plan_start(cli))


def synthetic_run(run_root: Path, name: str, config: str, *extra: str) -> tuple[dict, Path]:
    """A two-step training run ``run_root/name`` of a synthetic config (one of :data:`TINY_SYNTHETIC_ARGS`);
    returns its ``metrics.json`` and its run directory."""
    train(
        [
            "--config",
            config,
            "--trainer.max_steps",
            "2",
            "--trainer.val_check_interval",
            "1",
            *_QUIET,
            "--run_root",
            str(run_root),
            "--run_name",
            name,
            *TINY_SYNTHETIC_ARGS[config],
            *extra,
        ]
    )
    return json.loads((run_root / name / "metrics.json").read_text()), run_root / name


def train_in_process(args: list[str], *callbacks: pl.Callback) -> int:
    """:func:`train` of ``args`` with extra callbacks; returns its exit code."""
    try:
        train(args, *callbacks)
    except SystemExit as stop:
        return int(stop.code)
    return 0


def learning_curve(run_dir: Path) -> list[dict[str, float]]:
    """The joined log of a run (:func:`~graphormer_urpe.run.ledger.read_metrics`) without segment numbers, which
    differ between an interrupted run and an uninterrupted one."""
    return [{k: v for k, v in row.items() if k != "segment"} for row in read_metrics(run_dir)]


def same_run(resumed: tuple[FinalState, Path], uninterrupted: tuple[FinalState, Path]) -> list[str]:
    """How a resumed run (its final state and directory) differs from the uninterrupted one: weights, learning curve
    (every logged value, validations included), best checkpoint, final metrics; empty when it ends where that one
    did."""
    (state, run_dir), (expected_state, expected_dir) = resumed, uninterrupted
    problems = [
        f"weights {k} differ" for k, v in expected_state.weights.items() if not torch.equal(v, state.weights[k])
    ]
    if (state.step, state.device.type) != (expected_state.step, expected_state.device.type):
        problems.append(
            f"ends at step {state.step} on {state.device}, not {expected_state.step} on {expected_state.device}"
        )
    if learning_curve(run_dir) != learning_curve(expected_dir):
        problems.append("the learning curves differ")
    metrics, expected = (json.loads((d / "metrics.json").read_text()) for d in (run_dir, expected_dir))
    for found in (metrics, expected):  # the best checkpoint by name: the run directories differ
        found["best_checkpoint"] = Path(found["best_checkpoint"]).name if found["best_checkpoint"] else None
    if metrics != expected:
        problems.append(f"metrics.json {metrics} vs {expected}")
    return problems


def start_from(task: GraphormerTask, path: Path, spec: DataSpec | SequenceSpec) -> dict:
    """``train.py --init_from path`` for ``task`` (built with the checkpoint's architecture) on data
    declared by ``spec`` (named ``Data``), without a run: read, plan, load; returns the record of the initialisation."""
    plan = plan_initialisation(read_source(str(path), type(task)), task, spec, "Data", None, overridden={})
    initialise(task, plan)
    return plan.record


def run_train_subprocess(args: list[str], timeout: float = 300.0) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` in a fresh process, W&B offline, killed after ``timeout`` seconds."""
    env = {k: v for k, v in os.environ.items() if k != RUN_DIR_ENV} | {
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.run(
        [sys.executable, str(REPO_DIR / "train.py"), *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class SignalDuringStep(pl.Callback):
    """Sends ``signum`` ``times`` times to this process (or its parent, e.g. ``seeds.py``) during optimiser step
    ``step``; a subprocess gets it by
    ``--trainer.callbacks+='{"class_path": "graphormer_urpe.testing.runs.SignalDuringStep", "init_args": {...}}'``.
    ``with_workers``: as a scheduler signals a job, from another process (``kill``), to this process and each of its
    children (its DataLoader workers), the workers first."""

    def __init__(
        self,
        step: int,
        signum: int = signal.SIGTERM,
        times: int = 1,
        to_parent: bool = False,
        with_workers: bool = False,
    ) -> None:
        self.step, self.signum, self.times, self.to_parent, self.sent = step, signum, times, to_parent, False
        self.with_workers = with_workers
        self.workers_signalled: list[int] = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step == self.step - 1 and not self.sent:
            self.sent = True
            if self.with_workers:
                this = os.getpid()
                self.workers_signalled = [
                    int(p) for p in Path(f"/proc/{this}/task/{this}/children").read_text().split()
                ]
                pids = [*map(str, self.workers_signalled), str(this)]
                for _ in range(self.times):
                    subprocess.run(["kill", f"-{signal.Signals(self.signum).name[3:]}", *pids], check=True)
                return
            for _ in range(self.times):
                os.kill(os.getppid() if self.to_parent else os.getpid(), self.signum)


class FailAtStep(pl.Callback):
    """Raises a ``RuntimeError`` at the start of optimiser step ``step``, as a crash would (or AdamW did with a
    learning rate of 1e300)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step == self.step - 1:
            raise RuntimeError(f"failed in step {self.step}")


class FinalState(pl.Callback):
    """Keeps the weights, the step and the device at the end of training."""

    weights: dict[str, torch.Tensor]
    step: int
    device: torch.device

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.step = trainer.global_step
        self.device = pl_module.device


def seed_runs(table: Path, base: Path, *extra: str, seeds: tuple[int, ...] = (0, 1)) -> list[Path]:
    """The best checkpoints of 4-step runs (one per seed) of ``table`` (runs under ``base/runs``, their cache under
    ``base/data``), ``extra`` options added: the members of a small saved ensemble."""
    checkpoints = []
    for seed in seeds:
        train(
            small_run_args(
                table,
                base / "data",
                base / "runs",
                "--run_name",
                f"s{seed}",
                "--seed_everything",
                str(seed),
                "--trainer.max_steps",
                "4",
                "--trainer.val_check_interval",
                "2",
                *extra,
            )
        )
        checkpoints.append(sorted((base / "runs" / f"s{seed}" / "checkpoints").glob("best-*.ckpt"))[-1])
    return checkpoints
