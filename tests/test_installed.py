"""The package as a user installs it: a wheel built from this tree, installed (not editable) into a fresh virtual
environment, run from empty directories through the ``graphormer-urpe`` command alone: a few steps of
``train --config qm9_gap``, the small-data recipe on a small CSV (a sweep of two seeds saved as an ensemble with
trees), and ``predict`` with that ensemble moved elsewhere.

No network: the wheel is built with the build backend of this environment (``pip wheel --no-build-isolation
--no-deps --no-index``), installed with ``--no-deps --no-index``, and the fresh environment reaches this one's
dependencies through a ``.pth`` file listing its site-packages folders: Python adds those folders to ``sys.path``
but does not run the ``.pth`` files inside them, so this environment's editable install of the package stays
invisible there (checked: the command imports the package from the wheel). This works whether the tests run in a
virtual environment, a conda environment or a system Python, where ``--system-site-packages`` would reach the base
interpreter's packages only."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from graphormer_urpe.run.cli import RUN_DIR_ENV
from graphormer_urpe.run.provenance import NO_CHECKOUT
from graphormer_urpe.testing import REPO_DIR

#: What the wheel is built from: the package, and the files its metadata names.
SOURCES = ("pyproject.toml", "README.md", "graphormer_urpe")


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh virtual environment holding the wheel of this tree; returns its ``bin`` folder and the environment
    variables to run it with."""
    base = tmp_path_factory.mktemp("installed")
    source = base / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO_DIR / name).is_dir():
            shutil.copytree(REPO_DIR / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO_DIR / name, source / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", RUN_DIR_ENV, "VIRTUAL_ENV")}
    env |= {"WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1", "PIP_NO_INPUT": "1"}
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(base / "dist"),
            str(source),
        ],
        base,
        env,
    )
    wheel = next((base / "dist").glob("graphormer_urpe-*.whl"))
    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env)
    python = venv / "bin" / "python"
    own = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base, env).strip())
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()])
    (own / "_dependencies.pth").write_text("".join(f"{path}\n" for path in ours if Path(path).is_dir()))
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        base,
        env,
    )
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv / "bin", env


@pytest.mark.slow
def test_the_installed_command_trains_ensembles_and_predicts_from_empty_directories(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    command = str(bin_dir / "graphormer-urpe")
    where = run(
        [str(bin_dir / "python"), "-c", "import graphormer_urpe; print(graphormer_urpe.__file__)"], tmp_path, env
    )
    assert where.strip().startswith(str(bin_dir.parent)), where  # the wheel's copy, not this checkout's
    assert "predict" in run([command, "--help"], tmp_path, env)

    # a few steps of the default config, the embedded QM9 data; provenance says there is no checkout
    work = tmp_path / "work"
    work.mkdir()
    run(
        [
            command,
            "train",
            "--config",
            "qm9_gap",
            "--data.source.max_molecules",
            "60",
            "--data.batch_size",
            "8",
            "--trainer.max_steps",
            "3",
            "--trainer.val_check_interval",
            "3",
            "--model.encoder.num_layers",
            "1",
            "--model.encoder.hidden_dim",
            "16",
            "--model.encoder.ffn_dim",
            "16",
            "--model.encoder.num_heads",
            "2",
            "--data.num_workers",
            "0",
            "--trainer.enable_progress_bar",
            "false",
            "--run_name",
            "gap",
        ],
        work,
        env,
    )
    record = json.loads((work / "runs" / "gap" / "run.json").read_text())
    assert record["command"].startswith("graphormer-urpe train --config qm9_gap ")  # the command that was run
    assert (
        record["git_commit"] == NO_CHECKOUT
        and json.loads((work / "runs" / "gap" / "metrics.json").read_text())["global_step"] == 3
    )

    # the recipe on a small CSV of one's own: two seeds, their ensemble with trees, new molecules predicted
    lines = (REPO_DIR / "examples" / "qm9_sample.csv").read_text().splitlines(keepends=True)
    (work / "my.csv").write_text("".join(lines[:61]))
    new = pd.DataFrame({"id": ["a", "b", "c"], "smiles": ["CCO", "c1ccccc1O", "not a molecule"]})
    new.to_csv(work / "new.csv", index=False)
    sweep = [
        "sweep",
        "--config",
        "small_molecules",
        "--seeds",
        "0",
        "1",
        "--ensemble",
        "--trees",
        "--predict",
        "new.csv",
        "--data.source.path",
        "my.csv",
        "--data.source.targets",
        "[gap_ev]",
        "--trainer.max_epochs",
        "2",
        "--data.batch_size",
        "16",
        "--trainer.enable_progress_bar",
        "false",
    ]
    said = run([command, *sweep], work, env)
    assert "of the blend of the ensemble with trees" in said
    assert said.count("too few to choose them reliably") == 1  # 6 validation rows: said once
    made = json.loads((work / "runs" / "small_molecules-ensemble-trees" / "ensemble.json").read_text())["made"]
    assert made["command"] == shlex.join(["graphormer-urpe", *sweep])
    swept = pd.read_csv(work / "runs" / "small_molecules-ensemble-trees-predict-new.csv")

    # the ensemble moved elsewhere predicts from yet another empty directory, without the training table
    shutil.move(work / "runs" / "small_molecules-ensemble-trees", tmp_path / "model")
    shutil.rmtree(work)
    other = tmp_path / "other"
    other.mkdir()
    new.to_csv(other / "new.csv", index=False)
    run([command, "predict", "--model", str(tmp_path / "model"), "new.csv", "--out", "preds.csv"], other, env)
    predicted = pd.read_csv(other / "preds.csv")
    assert predicted["id"].tolist() == ["a", "b", "c"] and predicted["error"].isna().tolist() == [True, True, False]
    pd.testing.assert_frame_equal(predicted, swept)  # the same model, the same rows: the same file
