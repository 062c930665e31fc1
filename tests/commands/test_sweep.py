"""``graphormer-urpe sweep``: one command over several seeds, mean and standard deviation per metric, JSON and
Markdown; a seed's run is identified by its config (as the run records it, ``--init_from``'s architecture included),
so a sweep reuses and resumes its own seeds and never reuses or aggregates runs of another config. Every refusal comes
before the first seed; two sweeps of one name share its seeds and its ensemble; a signal stops it, saying so, and the
same command resumes it."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from graphormer_urpe.commands import sweep
from graphormer_urpe.commands.exits import FAILED_SEEDS
from graphormer_urpe.evaluation import ensemble
from graphormer_urpe.evaluation import kernel as kernel_module
from graphormer_urpe.evaluation.ensemble import SavedEnsemble, sha256_file
from graphormer_urpe.run import sweep as seeds
from graphormer_urpe.run.ledger import RunDirectory
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.directories import files_of, read_only_directory
from graphormer_urpe.testing.runs import (
    SMALL_TABLE_LINES,
    SignalDuringStep,
    small_run_args,
    tiny_run_args,
    train_in_process,
)


@pytest.fixture
def seeds_in_this_process(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each seed's ``train`` runs in this process: for tests of what the sweep does with its seeds' runs. A seed as
    a process of its own (signals passed on, exit codes) is what the end-to-end and SIGTERM tests run; here it
    would add a process start (some 10 s of imports) per seed. Returns the seeds run, in order."""
    ran = []

    def run_seed(command: list[str]) -> seeds.SeedExit:
        ran.append(int(command[command.index("--seed_everything") + 1]))
        return seeds.SeedExit(train_in_process(list(command[len(seeds.TRAIN) :])), "")

    monkeypatch.setattr(seeds, "run_seed", run_seed)
    return ran


@pytest.fixture
def logged(package_log: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The package's log records, from INFO up."""
    package_log.set_level(logging.INFO, logger="graphormer_urpe")
    return package_log


def messages(log: pytest.LogCaptureFixture, level: str = "INFO", starting: str = "") -> list[str]:
    return [r.getMessage() for r in log.records if r.levelname == level and r.getMessage().startswith(starting)]


def refusal(log: pytest.LogCaptureFixture, *args: str) -> str:
    """The one error line with which the sweep ``args`` stops, exit code 2."""
    log.clear()
    with pytest.raises(SystemExit) as stop:
        sweep.main(list(args))
    assert stop.value.code == 2
    errors = messages(log, "ERROR")
    assert len(errors) == 1 and "\n" not in errors[0], errors
    return errors[0]


@pytest.mark.slow
def test_two_seeds_end_to_end_then_collect(qm9_root: Path, tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    """Each seed a ``train`` process (the root script runs in the SIGTERM test)."""
    args = tiny_run_args(qm9_root, tmp_path, "--trainer.max_steps", "2")
    returned = sweep.main(["--seeds", "0", "1", "--name", "tiny", *args])
    summary = json.loads((tmp_path / "tiny-seeds.json").read_text())
    assert summary == json.loads(json.dumps(returned.summary()))
    assert summary["seeds"] == [0, 1] and summary["missing_seeds"] == []
    for seed in (0, 1):
        metrics = json.loads((tmp_path / f"tiny-seed{seed}" / "metrics.json").read_text())
        assert summary["metrics"]["val/mae"]["values"][str(seed)] == metrics["validation"]["val/mae"]
        assert json.loads((tmp_path / f"tiny-seed{seed}" / "run.json").read_text())["seed"] == seed
    values = summary["metrics"]["test/mae"]["values"]
    assert values["0"] != values["1"]  # the seed changed the run
    assert "| test/mae |" in (tmp_path / "tiny-seeds.md").read_text()
    collected = sweep.main(["--collect", "--name", "tiny", "--seeds", "0", "1", "--run_root", str(tmp_path)])
    assert collected.metrics["val/mae"].mean == pytest.approx(summary["metrics"]["val/mae"]["mean"])

    # the same sweep again: both seeds reused, one line each, their runs untouched
    runs = {seed: files_of(tmp_path / f"tiny-seed{seed}") for seed in (0, 1)}
    logged.clear()
    sweep.main(["--seeds", "0", "1", "--name", "tiny", *args])
    assert messages(logged, starting="tiny: seed") == [
        f"tiny: seed {seed} reused: {tmp_path / f'tiny-seed{seed}'} finished with the same config" for seed in (0, 1)
    ]
    assert {seed: files_of(tmp_path / f"tiny-seed{seed}") for seed in (0, 1)} == runs
    # issue 20: the same name with RPE must not report the URPE runs as RPE
    summaries = {p.name: p.read_bytes() for p in tmp_path.glob("tiny-seeds.*")}
    config = tmp_path / "tiny-seed0" / "config.yaml"
    assert refusal(logged, "--seeds", "0", "1", "--name", "tiny", *args, "--model.encoder.attention", "rpe") == (
        f"seed 0 of 'tiny' ({config.parent}) is a run of another configuration: "
        f"model.init_args.encoder.attention: 'urpe' ({config}) vs 'rpe' (now); run this one under another --name"
    )
    assert {seed: files_of(tmp_path / f"tiny-seed{seed}") for seed in (0, 1)} == runs
    assert {p.name: p.read_bytes() for p in tmp_path.glob("tiny-seeds.*")} == summaries


@pytest.mark.slow
def test_a_sweep_whose_checkpoint_decides_the_architecture_resumes_and_reuses_its_seeds(
    small_run: Path,
    small_table: Path,
    tmp_path: Path,
    logged: pytest.LogCaptureFixture,
    seeds_in_this_process: list[int],
) -> None:
    """Issue 38: ``--init_from`` writes the checkpoint's architecture into a seed's ``config.yaml``, and the sweep
    compared it with the config before that replacement, so the recipe's sweep refused its own seeds (interrupted or
    finished) as "a run of another configuration". Here the checkpoint (1 layer of width 8) overrides the command's 2
    layers: the interrupted seed resumes, the finished ones are reused, another dropout is still refused."""
    source = json.loads((small_run / "metrics.json").read_text())["best_checkpoint"]
    args = small_run_args(
        small_table,
        tmp_path / "data",
        tmp_path,
        "--trainer.max_steps",
        "4",
        "--trainer.val_check_interval",
        "2",
        "--init_from",
        source,
        "--model.encoder.num_layers",
        "2",
    )
    command = ["--seeds", "0", "1", "--name", "ft", *args]
    seed0 = tmp_path / "ft-seed0"
    # seed 0 as a sweep stopped during its step 3 leaves it: last.ckpt, no metrics.json
    runs = sweep.Sweep().plan(sweep.Sweep().parse(command)).runs
    assert train_in_process(runs.command(0)[len(seeds.TRAIN) :], SignalDuringStep(3)) == 143
    assert yaml.safe_load((seed0 / "config.yaml").read_text())["model"]["init_args"]["encoder"]["num_layers"] == 1

    first = sweep.main(command)
    assert first.seeds == [0, 1] and first.missing_seeds == []
    assert [s["start_step"] for s in json.loads((seed0 / "run.json").read_text())["segments"]] == [0, 3]
    kept = {seed: files_of(tmp_path / f"ft-seed{seed}") for seed in (0, 1)}
    logged.clear()
    assert sweep.main(command).summary() == first.summary()  # the same command again
    assert messages(logged, starting="ft: seed") == [
        f"ft: seed {seed} reused: {tmp_path / f'ft-seed{seed}'} finished with the same config" for seed in (0, 1)
    ]
    assert {seed: files_of(tmp_path / f"ft-seed{seed}") for seed in (0, 1)} == kept

    assert refusal(logged, *command, "--model.encoder.dropout", "0.3") == (
        f"seed 0 of 'ft' ({seed0}) is a run of another configuration: model.init_args.encoder.dropout: 0.0 "
        f"({seed0 / 'config.yaml'}) vs 0.3 (now); run this one under another --name"
    )
    assert {seed: files_of(tmp_path / f"ft-seed{seed}") for seed in (0, 1)} == kept


def test_an_option_train_refuses_stops_the_sweep_before_any_seed(
    qm9_root: Path, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """A bad option used to be found by the first seed's train, which failed; the sweep went on to the next seed."""
    args = tiny_run_args(qm9_root, tmp_path, "--model.encoder.num_layers", "abc")
    assert refusal(logged, "--seeds", "0", "1", "--name", "bad", *args) == (
        "model.encoder.num_layers: Expected a <class 'int'>. Got value: abc"
    )
    assert not list(tmp_path.glob("*bad-seed*"))  # no seed ran


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        (["--seeds", "-1"], "--seeds=-1: must be an integer from 0 to 4294967295 (train's --seed_everything)"),
        (["--seeds", str(2**32)], "--seeds=4294967296: must be an integer from 0 to 4294967295"),
        (["--seeds", "0", "0"], "--seeds 0 0: a seed is given twice"),
        (["--name", "a/b"], "--name 'a/b': an experiment's name is one file name"),
        (["--name", ".."], "--name '..': an experiment's name is one file name"),
        (["--trees"], "--trees works on the seeds' ensemble: add --ensemble"),
        (["--kernel"], "--kernel works on the seeds' ensemble: add --ensemble"),
        (["--predict", "new.csv"], "--predict works on the seeds' ensemble: add --ensemble"),
        (["--collect", "--ensemble"], "--config is required to run seeds or make their ensemble"),
    ],
)
def test_a_bad_option_of_the_sweep_stops_it_before_any_seed(
    qm9_root: Path,
    tmp_path: Path,
    options: list[str],
    refused: str,
    logged: pytest.LogCaptureFixture,
    seeds_in_this_process: list[int],
) -> None:
    """Issue 44.10: seed -1 and ``--name a/b`` were refused only when that seed started."""
    args = tiny_run_args(qm9_root, tmp_path / "runs")
    if "--collect" in options:
        args = ["--run_root", str(tmp_path / "runs")]
    assert refusal(logged, "--seeds", "0", *args, *options).startswith(refused)
    assert seeds_in_this_process == [] and not (tmp_path / "runs").exists()


def test_an_unwritable_run_root_stops_the_sweep_before_any_seed(
    qm9_root: Path, tmp_path: Path, logged: pytest.LogCaptureFixture, seeds_in_this_process: list[int]
) -> None:
    read_only = read_only_directory(tmp_path)
    args = tiny_run_args(qm9_root, read_only / "runs")
    refused = refusal(logged, "--seeds", "0", "1", *args)
    assert refused == f"--run_root {read_only / 'runs'}: {read_only} is not writable"
    assert seeds_in_this_process == []


def test_collect_refuses_seeds_of_different_configs(tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    for seed, attention in ((0, "urpe"), (1, "rpe")):
        run_dir = tmp_path / f"mix-seed{seed}"
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text(
            yaml.safe_dump(
                {"seed_everything": seed, "run_name": run_dir.name, "model": {"encoder": {"attention": attention}}}
            )
        )
        (run_dir / "metrics.json").write_text(
            json.dumps({"validation": {"val/mae": 0.5}, "test": None, "global_step": 2})
        )
    assert refusal(logged, "--collect", "--name", "mix", "--seeds", "0", "1", "--run_root", str(tmp_path)) == (
        f"the seeds of 'mix' under {tmp_path} are runs of different configurations: model.encoder.attention: 'urpe' "
        "(seed 0) vs 'rpe' (seed 1)"
    )
    assert not (tmp_path / "mix-seeds.json").exists()


def test_collect_without_runs_fails_clearly(tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
    assert refusal(logged, "--collect", "--name", "nothing", "--run_root", str(tmp_path)).startswith(
        "no finished run of nothing"
    )


def test_a_seed_that_fails_is_named_with_its_cause_in_the_last_line(
    qm9_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    """Issue 44.10: when a seed's train refused, the last line was "no finished run of ...", its cause two lines up."""
    refusing = (
        "import sys; print('[00:00:01 ERROR] data.batch_size=8: is the global batch and must divide by the 3 "
        "processes', file=sys.stderr); sys.exit(2)"
    )
    run_seed = seeds.run_seed
    monkeypatch.setattr(seeds, "run_seed", lambda command: run_seed([sys.executable, "-c", refusing]))
    with pytest.raises(SystemExit) as stop:
        sweep.main(["--seeds", "0", "1", "--name", "fails", *tiny_run_args(qm9_root, tmp_path)])
    assert stop.value.code == FAILED_SEEDS
    cause = "exit code 2, data.batch_size=8: is the global batch and must divide by the 3 processes"
    assert logged.records[-1].getMessage() == (
        f"fails: seeds [0, 1] did not finish (seed 0: {cause}; seed 1: {cause}); nothing was aggregated"
    )


def test_a_seed_another_process_runs_is_waited_for_then_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    """Two sweeps of seeds 5 and 6 at once: this one finds seed 5 locked by the other's train, waits, and reuses it."""
    config = {"seed_everything": 0, "model": {"lr": 1e-3}}

    def finish(run_dir: Path, seed: int) -> None:
        (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "seed_everything": seed}))
        (run_dir / "metrics.json").write_text(json.dumps({"validation": {"val/mae": seed / 10}, "global_step": 4}))

    ran = []

    def run_seed(command: list[str]) -> seeds.SeedExit:  # this sweep's train, as fast as can be
        seed = int(command[command.index("--seed_everything") + 1])
        ran.append(seed)
        (tmp_path / f"exp-seed{seed}").mkdir()
        finish(tmp_path / f"exp-seed{seed}", seed)
        return seeds.SeedExit(0, "")

    other = tmp_path / "exp-seed5"
    other.mkdir()
    lock = open(other / ".lock", "a")  # the other sweep's train of seed 5
    fcntl.flock(lock, fcntl.LOCK_EX)

    def the_other_sweep_finishes() -> None:
        time.sleep(0.5)
        finish(other, 5)
        lock.close()

    monkeypatch.setattr(seeds, "run_seed", run_seed)
    monkeypatch.setattr(sweep, "resolved_config", lambda command: config)  # what train would record for exp.yaml
    monkeypatch.setattr(seeds, "POLL_SECONDS", 0.05)
    threading.Thread(target=the_other_sweep_finishes).start()
    result = sweep.main(["--config", "exp.yaml", "--seeds", "5", "6", "--run_root", str(tmp_path)])
    assert ran == [6] and result.seeds == [5, 6] and result.missing_seeds == []
    assert f"exp: seed 5: another process runs it ({other / '.lock'} is held): waiting for it to finish" in messages(
        logged
    )
    assert f"exp: seed 5 reused: {other} finished with the same config" in messages(logged)


def test_a_seed_another_sweep_started_is_waited_for_before_its_train_holds_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    """Issue 44.3: a second sweep of one name started 1.5 s after the first found seed 0's run not yet locked (the
    first sweep's train was still starting), ran it too, was refused "in use by another process", and ended with
    "seeds [0] did not finish". A sweep holds the seed from before its train starts: the second waits for it."""
    config = {"seed_everything": 0, "model": {"lr": 1e-3}}
    ran = []

    def run_seed(command: list[str]) -> seeds.SeedExit:
        seed = int(command[command.index("--seed_everything") + 1])
        ran.append(seed)
        run_dir = tmp_path / f"dual-seed{seed}"
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "seed_everything": seed}))
        (run_dir / "metrics.json").write_text(json.dumps({"validation": {"val/mae": 0.5}, "global_step": 4}))
        return seeds.SeedExit(0, "")

    runs = seeds.SeedRuns("dual", tmp_path, (0,), "exp.yaml", ())
    first_sweep = open(runs.lock(0), "a")  # the first sweep holds seed 0; its train has not made the run yet
    fcntl.flock(first_sweep, fcntl.LOCK_EX)

    def the_first_sweep_finishes_seed_0() -> None:
        time.sleep(0.5)
        run_seed(runs.command(0))
        first_sweep.close()

    monkeypatch.setattr(sweep, "resolved_config", lambda command: config)
    threading.Thread(target=the_first_sweep_finishes_seed_0).start()
    monkeypatch.setattr(seeds, "run_seed", run_seed)
    result = sweep.main(["--config", "exp.yaml", "--name", "dual", "--seeds", "0", "--run_root", str(tmp_path)])
    assert ran == [0] and result.seeds == [0] and result.missing_seeds == []  # seed 0 ran once: the first sweep's
    assert f"dual: seed 0: another sweep works on it ({runs.lock(0)} is held): waiting for it to finish" in messages(
        logged
    )
    assert f"dual: seed 0 reused: {tmp_path / 'dual-seed0'} finished with the same config" in messages(logged)


@pytest.mark.slow
def test_sigterm_to_seeds_py_stops_the_running_seed_at_a_checkpoint_and_the_sweep_resumes(
    qm9_root: Path, tmp_path: Path
) -> None:
    """``kill <seeds.py>`` used to leave the seed's train running on its own (and Ctrl-C killed it 0.25 s later
    without a checkpoint): the signal is passed on, the seed saves its step, the sweep stops, saying so."""
    to_seeds_py = {
        "class_path": "graphormer_urpe.testing.runs.SignalDuringStep",
        "init_args": {"step": 3, "signum": int(signal.SIGTERM), "to_parent": True},
    }
    command = [
        sys.executable,
        str(REPO_DIR / "seeds.py"),
        "--seeds",
        "0",
        "1",
        "--name",
        "cut",
        *tiny_run_args(qm9_root, tmp_path, "--checkpoint.every_n_steps", "0"),
        f"--trainer.callbacks+={json.dumps(to_seeds_py)}",
    ]
    first = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 128 + signal.SIGTERM, first.stderr[-3000:]
    assert (
        first.stderr.rstrip()
        .splitlines()[-1]
        .endswith(
            "SIGTERM received: seed 0 stopped (exit code 143) after writing its last.ckpt; the same command resumes "
            "the sweep"
        )
    )
    seed0 = tmp_path / "cut-seed0"
    assert torch.load(seed0 / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    assert not (tmp_path / "cut-seed1").exists()  # the sweep stopped with its seed
    free = RunDirectory(seed0)  # the seed's train has ended: nothing holds its directory
    free.plan("auto")
    free.take(writer=True)
    free.release()
    second = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=600, check=False)
    assert second.returncode == 128 + signal.SIGTERM  # seed 1 meets the same signal at its step 3
    assert [s["start_step"] for s in json.loads((seed0 / "run.json").read_text())["segments"]] == [0, 3]
    assert json.loads((seed0 / "metrics.json").read_text())["global_step"] == 6


@pytest.mark.slow
@pytest.mark.usefixtures("seeds_in_this_process")
def test_ensemble_saves_the_seeds_best_checkpoints_as_one_ensemble(small_table: Path, tmp_path: Path) -> None:
    args = small_run_args(
        small_table, tmp_path / "data", tmp_path, "--trainer.max_steps", "4", "--trainer.val_check_interval", "2"
    )
    result = sweep.main(["--seeds", "0", "1", "--name", "ens", "--ensemble", *args])
    record = SavedEnsemble(tmp_path / "ens-ensemble").record
    assert result.ensemble == record
    for seed, source in zip((0, 1), record.sources):
        best = json.loads((tmp_path / f"ens-seed{seed}" / "metrics.json").read_text())["best_checkpoint"]
        assert source.path == best and source.sha256 == sha256_file(Path(best))
    assert len(pd.read_csv(tmp_path / "ens-ensemble" / "test.csv")) == 6  # the 6 test molecules
    assert record.trees is None and "test/mae" in record.scores["test"]["ensemble"]


def recipe_refusal(
    tmp_path: Path,
    log: pytest.LogCaptureFixture,
    *flags: str,
    table: Path | None = None,
    config: str = "smiles_csv_example",
) -> str:
    """The one line with which a recipe sweep of the small table (or ``table``) refuses ``flags``; nothing ran,
    nothing was written."""
    if table is None:
        table = tmp_path / "small.csv"
        table.write_text("".join((REPO_DIR / "examples" / "qm9_sample.csv").read_text().splitlines(True)[:61]))
    args = small_run_args(table, tmp_path / "data", tmp_path / "runs", "--trainer.max_steps", "4", "--config", config)
    refused = refusal(log, "--seeds", "0", "1", "--name", "ens", "--ensemble", *flags, *args)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()
    return refused


@pytest.mark.slow
def test_every_refusal_of_a_recipe_sweep_comes_before_the_first_seed(
    tmp_path: Path, logged: pytest.LogCaptureFixture, seeds_in_this_process: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38.3: the trees without descriptors, a table to predict without the SMILES column or without rows;
    issue 44.8: a config without a SMILES table; 44.10: a label with one class among the training rows (for the trees
    and for the kernel); issue 45.2: a kernel on more training rows than it takes."""
    assert "--trees reads the runs' RDKit descriptors or fingerprints, and these runs have neither" in recipe_refusal(
        tmp_path, logged, "--trees", "--data.source.descriptors", "null"
    )
    (tmp_path / "no_smiles.csv").write_text("id,name\n1,ethanol\n")
    assert "no_smiles.csv" in recipe_refusal(tmp_path, logged, "--predict", str(tmp_path / "no_smiles.csv"))
    (tmp_path / "empty.csv").write_text("smiles\n")
    assert "empty.csv: the file has a header but no data rows" in recipe_refusal(
        tmp_path, logged, "--predict", str(tmp_path / "empty.csv")
    )
    assert recipe_refusal(tmp_path, logged, "--predict", str(tmp_path / "no.csv")) == (
        f"the table to predict, {tmp_path / 'no.csv'}, does not exist"
    )
    assert recipe_refusal(tmp_path, logged, "--predict", str(tmp_path)) == (
        f"the table to predict, {tmp_path}, is a directory, not a table (a CSV or Parquet file)"
    )
    one_class = tmp_path / "one_class.csv"
    table = pd.read_csv(REPO_DIR / "examples" / "qm9_sample.csv").head(SMALL_TABLE_LINES - 1)
    table.assign(polar=1).to_csv(one_class, index=False)
    assert recipe_refusal(
        tmp_path,
        logged,
        "--trees",
        "--data.source.descriptors",
        "rdkit2d",
        table=one_class,
        config="smiles_csv_classification",
    ) == (
        "the descriptor trees need both classes of label 'polar' among the training rows, which hold one; ensemble "
        "without --trees"
    )
    assert recipe_refusal(tmp_path, logged, "--kernel", table=one_class, config="smiles_csv_classification") == (
        "the fingerprint kernel's processes need both classes of label 'polar' among the training rows, which hold "
        "one; ensemble without --kernel"
    )
    monkeypatch.setattr(kernel_module, "MAX_TRAINING_ROWS", 2)  # the small table trains on more rows
    assert "target 'gap_ev': the fingerprint kernel would be fitted on " in recipe_refusal(tmp_path, logged, "--kernel")
    assert seeds_in_this_process == []


def test_an_ensemble_of_data_without_a_smiles_table_is_refused_in_one_line(
    tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """Issue 44.8: ``data.source.class_path='': cannot be imported (Empty module name)`` for the synthetic graphs."""
    assert refusal(
        logged, "--config", "synthetic_graph", "--seeds", "0", "--ensemble", "--run_root", str(tmp_path / "runs")
    ) == ("--ensemble saves the runs of a SMILES table (data.source SmilesTable), not of SyntheticGraphDataModule")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.usefixtures("seeds_in_this_process")
def test_ensemble_with_trees_writes_its_own_files(
    small_table: Path, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    args = small_run_args(
        small_table,
        tmp_path / "data",
        tmp_path,
        "--trainer.max_steps",
        "4",
        "--trainer.val_check_interval",
        "2",
        "--data.source.descriptors",
        "rdkit2d",
    )
    new = tmp_path / "new.csv"
    new.write_text("id,smiles\na,CCO\nb,c1ccccc1O\nc,not a molecule\n")
    command = ["--seeds", "0", "1", "--name", "ens", "--ensemble", "--trees", "--kernel", "--predict", str(new), *args]
    result = sweep.main(command)
    record = SavedEnsemble(tmp_path / "ens-ensemble-trees-kernel").record
    assert set(record.blend_weights) == {"gap_ev", "mu_debye"} and result.ensemble.blend_weights == record.blend_weights
    assert record.cheap_parts == ["trees", "kernel"]
    blend_mae = record.scores["test"]["blend"]["test/mae"]
    last = logged.records[-1].getMessage()
    assert (
        last.startswith("ens: ensemble of seeds [0, 1]: test MAE ")
        and f"test MAE {blend_mae:.4g} of the blend of the ensemble with trees and kernel" in last
    )  # named as the blend's
    assert not (tmp_path / "ens-ensemble").exists() and not (tmp_path / "ens-ensemble-trees").exists()
    written = tmp_path / "ens-ensemble-trees-kernel-predict-new.csv"
    assert result.predictions is not None and result.predictions.out == written
    predicted = pd.read_csv(written, keep_default_na=False, na_values=[""])
    assert predicted["id"].tolist() == ["a", "b", "c"]  # issue 38.5: the table's other columns are kept
    assert predicted["smiles"].tolist() == ["CCO", "c1ccccc1O", "not a molecule"]
    assert predicted[["gap_ev", "mu_debye", "gap_ev_trees", "gap_ev_kernel", "gap_ev_std"]].iloc[:2].notna().all(None)
    assert predicted[["gap_ev", "gap_ev_member0"]].iloc[2].isna().all() and predicted["error"].iloc[2] != ""
    earlier = written.read_bytes()
    logged.clear()
    sweep.main(command)  # the same command again: the seeds, the ensemble and its prediction are reused
    assert f"ensemble reused: {tmp_path / 'ens-ensemble-trees-kernel'} holds these runs' ensemble" in messages(logged)
    assert f"kept {written}: this ensemble's prediction of {new}, written before" in messages(logged)
    assert written.read_bytes() == earlier
    written.write_text(earlier.decode().replace("a,CCO", "a,CCC"))  # another prediction: never overwritten
    assert refusal(logged, *command) == (
        f"--predict: {written} exists and is not this ensemble's prediction of "
        f"{new} (an earlier prediction is never overwritten): move it away first"
    )


@pytest.mark.slow
@pytest.mark.usefixtures("seeds_in_this_process")
def test_sigterm_in_the_ensemble_phase_stops_the_sweep_saying_so_and_the_same_command_finishes_it(
    small_table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    """Issue 44.7: a SIGTERM in the ensemble phase was swallowed (the sweep wrote everything, printed its success line
    and exited 143, or 0, without a word); the same command was then refused, its prediction existing."""
    args = small_run_args(
        small_table, tmp_path / "data", tmp_path, "--trainer.max_steps", "4", "--trainer.val_check_interval", "2"
    )
    new = tmp_path / "new.csv"
    new.write_text("id,smiles\na,CCO\nb,c1ccccc1O\n")
    command = ["--seeds", "0", "--name", "cut", "--ensemble", "--predict", str(new), *args]
    build, predict_into = ensemble.build_ensemble, SavedEnsemble.predict_into
    written = tmp_path / "cut-ensemble-predict-new.csv"

    def stopped(where: str) -> None:
        with pytest.raises(SystemExit) as stop:
            sweep.main(command)
        assert stop.value.code == 128 + signal.SIGTERM
        assert logged.records[-1].getMessage() == (
            f"SIGTERM received: the sweep stopped {where}; the same command resumes it (the finished seeds and a "
            "written ensemble are reused)"
        )

    def sigterm_then(work, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        os.kill(os.getpid(), signal.SIGTERM)
        return work(*args, **kwargs)

    # while the ensemble is made: nothing of it written
    monkeypatch.setattr(ensemble, "build_ensemble", lambda *a: sigterm_then(build, *a))
    stopped("in its ensemble phase")
    assert not (tmp_path / "cut-ensemble").exists() and not written.exists()
    assert not list(tmp_path.glob(".cut-ensemble.partial-*"))
    monkeypatch.setattr(ensemble, "build_ensemble", build)
    # as the prediction is written: it is written whole, then the sweep stops
    monkeypatch.setattr(SavedEnsemble, "predict_into", lambda self, *a: sigterm_then(predict_into, self, *a))
    stopped("in its ensemble phase")
    monkeypatch.setattr(SavedEnsemble, "predict_into", predict_into)
    assert pd.read_csv(written)["id"].tolist() == ["a", "b"]
    logged.clear()
    result = sweep.main(command)  # the same command: everything was done, and is reused
    assert result.predictions is not None and result.predictions.out == written
    assert f"kept {written}: this ensemble's prediction of {new}, written before" in messages(logged)


@pytest.mark.slow
@pytest.mark.usefixtures("seeds_in_this_process")
def test_a_sweep_planned_before_another_wrote_the_ensemble_reuses_it_and_its_prediction(
    small_table: Path, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """Issues 44.2 and 44.3: two sweeps of one name; the second planned when neither the ensemble nor its prediction
    existed, and its ensemble's write crashed (``OSError: Directory not empty``) once the first had written it. It
    waits for the first (the ensemble's lock), then reuses both."""
    args = small_run_args(
        small_table, tmp_path / "data", tmp_path, "--trainer.max_steps", "4", "--trainer.val_check_interval", "2"
    )
    new = tmp_path / "new.csv"
    new.write_text("id,smiles\na,CCO\n")
    command = ["--seeds", "0", "--name", "dual", "--ensemble", "--predict", str(new), *args]
    second = sweep.Sweep()
    sweep.main(command)  # the first sweep: seed 0, the ensemble, the prediction
    record = SavedEnsemble(tmp_path / "dual-ensemble").record
    plan = second.plan(second.parse(command))
    stale = dataclasses.replace(plan, ensemble=dataclasses.replace(plan.ensemble, reused=None))  # planned before
    logged.clear()
    result = second.run(stale)
    assert result.ensemble == record
    assert f"kept {plan.ensemble.predictions}: this ensemble's prediction of {new}, written before" in messages(logged)
