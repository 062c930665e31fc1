"""Shared test helpers: small random graphs in the cache's record format."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from graphormer_urpe.data.batch import GraphRecord
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.run.ledger import LOCK_FILE
from graphormer_urpe.testing.device import exactness_device


def random_edges(rng: np.random.Generator, n: int, extra: int = 2, connected: bool = True) -> np.ndarray:
    """(2, e) undirected edge list (both directions) of a random tree plus ``extra`` chords.

    With ``connected=False`` the last third of the nodes forms a separate component.
    """
    split = n - n // 3 if not connected and n >= 3 else n
    pairs = [(k, int(rng.integers(0, k))) for k in range(1, split)]
    pairs += [(k, int(rng.integers(split, k))) for k in range(split + 1, n)]
    for _ in range(extra):
        a, b = (int(v) for v in rng.integers(0, split, 2))
        if a != b and (a, b) not in pairs and (b, a) not in pairs:
            pairs.append((a, b))
    if not pairs:
        return np.zeros((2, 0), dtype=np.int64)
    half = np.array(pairs, dtype=np.int64).T
    return np.concatenate([half, half[::-1]], axis=1)


def make_record(rng: np.random.Generator, n: int, index: int = 0, node_vocab=(28,), edge_vocab=(4,),
                connected: bool = True, edges: np.ndarray | None = None) -> GraphRecord:
    """A preprocessed random graph with n nodes, as the cache would return it."""
    edge_index = random_edges(rng, n, connected=connected) if edges is None else edges
    structure = graph_structure(n, edge_index)
    return GraphRecord(
        x=np.stack([rng.integers(0, v, n) for v in node_vocab], axis=1),
        edge_index=edge_index,
        edge_attr=np.stack([rng.integers(0, v, edge_index.shape[1]) for v in edge_vocab], axis=1),
        spd=structure.spd,
        first_edge=structure.first_edge,
        in_degree=structure.in_degree,
        out_degree=structure.out_degree,
        y=rng.normal(size=1).astype(np.float32),
        index=index,
    )


def start_from(task: torch.nn.Module, path: Path, spec: object) -> dict:
    """``train.py --init_from path`` for ``task`` (built with the checkpoint's architecture) on data
    declared by ``spec``, without a run: read, plan, load; returns the record of the initialisation."""
    from graphormer_urpe.run.finetune import initialise, plan_initialisation, read_source

    class Data:  # the datamodule, as far as the plan reads it
        pass

    data = Data()
    data.spec = spec
    plan = plan_initialisation(read_source(str(path), type(task)), task, data, overridden={})
    initialise(task, plan)
    return plan.record


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def device() -> torch.device:
    """Where the exactness tests (marker ``device``) run: the GPU if there is one, else the CPU."""
    return exactness_device()


@pytest.fixture(autouse=True)
def restore_deterministic_algorithms() -> Iterator[None]:
    """A run with ``--trainer.deterministic true`` switches torch's deterministic mode on for the
    whole process; the tests after it see the mode they started with."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.fixture(autouse=True)
def fresh_run_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's CLI picks its own run directory (the variable is process-wide)."""
    from graphormer_urpe.run.cli import RUN_DIR_ENV

    monkeypatch.delenv(RUN_DIR_ENV, raising=False)


@pytest.fixture(scope="session")
def synthetic_mag(tmp_path_factory: pytest.TempPathFactory):
    """Root of a small synthetic MAG240M (3,000 papers, 8 classes) with its derived files built."""
    from graphormer_urpe.data.mag240m.derived import prepare_derived
    from graphormer_urpe.data.mag240m.release import MAG240MRaw
    from graphormer_urpe.testing.mag240m_release import SyntheticMAG, write_synthetic_mag240m

    root = tmp_path_factory.mktemp("mag240m")
    write_synthetic_mag240m(root, SyntheticMAG(num_papers=3000, num_classes=8, labelled_fraction=0.6, seed=1),
                            chunk_size=1000)
    raw = MAG240MRaw(root)
    raw.check()
    prepare_derived(raw, raw.directory / "graphormer", chunk_edges=7000, feature_block_rows=500)
    return root


# ----------------------------------------------------------------------------- tiny training runs

#: Molecules of the tiny QM9 runs: an 80/10/10 split gives 40 train, 5 valid and 5 test graphs.
TINY_MOLECULES = 50


@pytest.fixture(scope="session")
def qm9_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root holding the cache of the first 50 QM9 molecules, built once per test session."""
    from graphormer_urpe.data.datamodule import GraphDataModule
    from graphormer_urpe.data.sources import QM9

    root = tmp_path_factory.mktemp("qm9_root")
    GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(root), preprocess_workers=0).prepare_data()
    return root


def tiny_run_args(data_root: Path, run_root: Path, *extra: str) -> list[str]:
    """``train.py`` arguments of a seconds-long QM9 run: 2 layers of width 16, no progress bars."""
    return [
        "--config", "qm9_gap",
        "--data.source.max_molecules", str(TINY_MOLECULES), "--data.root", str(data_root),
        "--data.batch_size", "8", "--data.num_workers", "0", "--data.preprocess_workers", "0",
        "--run_root", str(run_root),
        "--model.encoder.num_layers", "2", "--model.encoder.hidden_dim", "16", "--model.encoder.ffn_dim", "16",
        "--model.encoder.num_heads", "4", "--model.optim.warmup_steps", "3",
        "--trainer.max_steps", "6", "--trainer.val_check_interval", "3", "--trainer.log_every_n_steps", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        *extra,
    ]


#: The first 60 molecules of the example table, as issue 20's probes use it (``head -61``): 48 train, 6 valid, 6 test.
SMALL_TABLE_LINES = 61


@pytest.fixture(scope="session")
def small_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``head -61 examples/qm9_sample.csv``: a 60-molecule table with two targets."""
    path = tmp_path_factory.mktemp("small_table") / "small.csv"
    lines = (REPO / "examples" / "qm9_sample.csv").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:SMALL_TABLE_LINES]))
    return path


def small_run_args(table: Path, data_root: Path, run_root: Path, *extra: str) -> list[str]:
    """``train.py`` arguments of issue 20's probe runs on ``table``: the CSV example config with batches of
    8, validation every 50 steps and 200 steps, shrunk to a model of 1 layer, width 8 (seconds)."""
    return [
        "--config", "smiles_csv_example", "--data.source.path", str(table), "--data.batch_size", "8",
        "--data.root", str(data_root), "--data.num_workers", "0", "--data.preprocess_workers", "0",
        "--run_root", str(run_root),
        "--model.encoder.num_layers", "1", "--model.encoder.hidden_dim", "8", "--model.encoder.ffn_dim", "8",
        "--model.encoder.num_heads", "2",
        "--trainer.val_check_interval", "50", "--trainer.max_steps", "200",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        *extra,
    ]


@pytest.fixture(scope="session")
def small_run(small_table: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of one finished 200-step probe run, ``<runs>/t2`` (its data root is ``<runs>/../data``).
    Tests copy it before changing anything."""
    import train
    from graphormer_urpe.run.cli import RUN_DIR_ENV

    base = tmp_path_factory.mktemp("small_run")
    train.main(small_run_args(small_table, base / "data", base / "runs", "--run_name", "t2"))
    os.environ.pop(RUN_DIR_ENV, None)
    return base / "runs" / "t2"


class SignalDuringStep(pl.Callback):
    """Sends ``signum`` to this process (or to its parent, e.g. ``seeds.py``) ``times`` times, one after the
    other, while optimiser step ``step`` is being computed; a subprocess gets it with
    ``--trainer.callbacks+='{"class_path": "tests.conftest.SignalDuringStep", "init_args": {...}}'``."""

    def __init__(self, step: int, signum: int = signal.SIGTERM, times: int = 1, to_parent: bool = False) -> None:
        self.step, self.signum, self.times, self.to_parent, self.sent = step, signum, times, to_parent, False

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object,
                             batch_idx: int) -> None:
        if trainer.global_step == self.step - 1 and not self.sent:
            self.sent = True
            for _ in range(self.times):
                os.kill(os.getppid() if self.to_parent else os.getpid(), self.signum)


class FinalState(pl.Callback):
    """Keeps the weights and step at the end of training."""

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.step = trainer.global_step
        self.device = pl_module.device


def train_in_process(args: list[str], *callbacks: pl.Callback) -> int:
    """``train.py ARGS`` in this process with extra callbacks; returns its exit code."""
    import train
    from graphormer_urpe.run.cli import GraphormerCLI

    cli = GraphormerCLI(args)
    cli.trainer.callbacks.extend(callbacks)
    try:
        train.fit_and_evaluate(cli)
    except SystemExit as stop:
        return int(stop.code)
    return 0


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` but run directories' lock, whose text names the process that held the
    directory last (relative path -> bytes): what a refused start must leave byte for byte."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


def read_only_directory(tmp_path: Path) -> Path:
    """A directory this process cannot write into: made read-only for a normal user; as root, who
    writes anywhere permissions allow, ``/proc`` (a file system nobody can create files in)."""
    if os.geteuid() == 0:
        return Path("/proc")
    directory = tmp_path / "read_only"
    directory.mkdir()
    directory.chmod(0o555)
    return directory


@pytest.fixture
def package_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """``caplog`` that also sees the package's own logger (which does not propagate to the root)."""
    import logging

    logger = logging.getLogger("graphormer_urpe")
    propagate, logger.propagate = logger.propagate, False  # each record once, whether or not the CLI ran
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.propagate = propagate


#: Arguments shared by the 2-process DDP run and its 1-process twin: global batch 4 (2 per process),
#: so the 5 validation graphs form shards of 3 and 2 graphs, i.e. 2 and 1 batches.
DDP_TWIN_ARGS = ("--data.batch_size", "4", "--checkpoint.every_n_steps", "6", "--wandb.plot_every_n_validations", "1")
REPO = Path(__file__).resolve().parent.parent


def run_train_subprocess(args: list[str], timeout: float = 300.0) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` in a fresh process, W&B offline, killed after ``timeout`` seconds."""
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    env.pop("GRAPHORMER_RUN_DIR", None)
    return subprocess.run([sys.executable, str(REPO / "train.py"), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One 2-process DDP training run on CPU (gloo), logging to W&B offline, on a fresh data root.

    Returns the run directory and the combined log of both processes.
    """
    base = tmp_path_factory.mktemp("ddp")
    args = tiny_run_args(base / "data", base / "runs", *DDP_TWIN_ARGS, "--run_name", "ddp", "--logger", "wandb",
                         "--wandb.mode", "offline", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                         "--trainer.accelerator", "cpu")
    result = run_train_subprocess(args)
    assert result.returncode == 0, result.stderr[-5000:]
    return base / "runs" / "ddp", result.stderr


def _init_and_run(rank: int, world: int, port: int, fn: Callable[..., None], args: tuple) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # the parent's OpenMP thread pool does not survive fork()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def run_on_processes(fn: Callable[..., None], world: int, *args: object, timeout: float = 120.0) -> None:
    """Run ``fn(rank, world, *args)`` on ``world`` forked processes joined by a gloo process group.

    Fails (and kills the processes) if one raises or if they do not finish within ``timeout`` seconds.
    """
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.start_processes(_init_and_run, args=(world, port, fn, args), nprocs=world, join=False,
                                 start_method="fork")
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{world} processes did not finish within {timeout} s (hang)")
