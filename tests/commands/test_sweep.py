"""One command over several seeds: mean and standard deviation per metric, JSON and Markdown; a seed's run is
identified by its config (as the run records it, ``--init_from``'s architecture included), so a sweep reuses and
resumes its own seeds and never reuses or aggregates runs of another config."""

from __future__ import annotations

import fcntl
import json
import math
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

from graphormer_urpe.commands import sweep as seeds
from graphormer_urpe.errors import Refused
from graphormer_urpe.run.ledger import RunDirectory
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.directories import files_of
from graphormer_urpe.testing.runs import SignalDuringStep, small_run_args, tiny_run_args, train_in_process


@pytest.fixture
def seeds_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each seed's ``train`` runs in this process: for tests of what the sweep does with its seeds' runs. A seed as
    a process of its own (signals passed on, exit codes) is what the end-to-end and SIGTERM tests run; here it
    would add a process start (some 10 s of imports) per seed."""
    monkeypatch.setattr(seeds, "run_seed", lambda command: train_in_process(list(command[len(seeds.TRAIN):])))


def test_aggregate_gives_mean_sample_std_and_values() -> None:
    summary = seeds.aggregate({0: {"val/mae": 1.0, "test/mae": 2.0}, 1: {"val/mae": 3.0}, 2: {"val/mae": 5.0}})
    assert summary["val/mae"]["mean"] == 3.0
    assert summary["val/mae"]["std"] == pytest.approx(2.0)  # sqrt(((1-3)^2 + 0 + (5-3)^2) / (3 - 1))
    assert summary["val/mae"]["n"] == 3 and summary["val/mae"]["values"] == {0: 1.0, 1: 3.0, 2: 5.0}
    assert summary["test/mae"] == {"mean": 2.0, "std": 0.0, "n": 1, "values": {0: 2.0}}


def test_runs_without_labelled_test_split_report_validation_only() -> None:
    metrics = {"validation": {"val/mae": 0.1}, "test": None, "global_step": 5}  # PCQM4Mv2: test hidden
    assert seeds.final_metrics(metrics) == {"val/mae": 0.1, "global_step": 5.0}


def test_markdown_table_has_a_row_per_metric_and_a_column_per_seed() -> None:
    summary = seeds.aggregate({0: {"val/mae": 0.125}, 3: {"val/mae": 0.25}})
    table = seeds.markdown_table("zinc", summary, [0, 3]).splitlines()
    assert table[2] == "| metric | mean ± std | n | seed 0 | seed 3 |"
    assert table[4] == f"| val/mae | 0.1875 ± {math.sqrt(2 * 0.0625**2):.2g} | 2 | 0.125 | 0.25 |"


def test_seed_command_sets_seed_run_name_and_wandb_group() -> None:
    options, rest = seeds.parse_args(["--config", "qm9_gap", "--seeds", "4", "--trainer.max_steps", "9"])
    command = seeds.seed_command(options, 4, rest)
    assert command == [*seeds.TRAIN, "--config", "qm9_gap", "--trainer.max_steps", "9", "--seed_everything",
                           "4", "--run_root", "runs", "--run_name", "qm9_gap-seed4", "--ckpt_path", "auto",
                           "--wandb.group", "qm9_gap"]


@pytest.mark.slow
def test_two_seeds_end_to_end_then_collect(qm9_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The sweep's library call (each seed a ``train.py`` process; the script itself runs in the SIGTERM test)."""
    args = tiny_run_args(qm9_root, tmp_path, "--trainer.max_steps", "2")
    returned = seeds.main(["--seeds", "0", "1", "--name", "tiny", *args])
    summary = json.loads((tmp_path / "tiny-seeds.json").read_text())
    assert summary == json.loads(json.dumps(returned))
    assert summary["seeds"] == [0, 1] and summary["missing_seeds"] == []
    for seed in (0, 1):
        metrics = json.loads((tmp_path / f"tiny-seed{seed}" / "metrics.json").read_text())
        assert summary["metrics"]["val/mae"]["values"][str(seed)] == metrics["validation"]["val/mae"]
        assert json.loads((tmp_path / f"tiny-seed{seed}" / "run.json").read_text())["seed"] == seed
    values = summary["metrics"]["test/mae"]["values"]
    assert values["0"] != values["1"]  # the seed changed the run
    assert "| test/mae |" in (tmp_path / "tiny-seeds.md").read_text()
    collected = seeds.main(["--collect", "--name", "tiny", "--seeds", "0", "1", "--run_root", str(tmp_path)])
    assert collected["metrics"]["val/mae"]["mean"] == pytest.approx(summary["metrics"]["val/mae"]["mean"])

    # the same sweep again: both seeds reused, one line each, their runs untouched
    runs = {seed: files_of(tmp_path / f"tiny-seed{seed}") for seed in (0, 1)}
    capsys.readouterr()
    seeds.main(["--seeds", "0", "1", "--name", "tiny", *args])
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("[seeds] tiny: seed")] == [
        f"[seeds] tiny: seed {seed} reused: {tmp_path / f'tiny-seed{seed}'} finished with the same config"
        for seed in (0, 1)]
    assert {seed: files_of(tmp_path / f"tiny-seed{seed}") for seed in (0, 1)} == runs
    # issue 20: the same name with RPE must not report the URPE runs as RPE
    summaries = {p.name: p.read_bytes() for p in tmp_path.glob("tiny-seeds.*")}
    with pytest.raises(Refused) as refused:
        seeds.main(["--seeds", "0", "1", "--name", "tiny", *args, "--model.encoder.attention", "rpe"])
    assert refused.value.code == 2
    config = tmp_path / "tiny-seed0" / "config.yaml"
    assert capsys.readouterr().err.splitlines() == [
        f"error: seed 0 of 'tiny' ({config.parent}) is a run of another configuration: "
        f"model.init_args.encoder.attention: 'urpe' ({config}) vs 'rpe' (now); run this one under another --name"]
    assert {seed: files_of(tmp_path / f"tiny-seed{seed}") for seed in (0, 1)} == runs
    assert {p.name: p.read_bytes() for p in tmp_path.glob("tiny-seeds.*")} == summaries


@pytest.mark.slow
@pytest.mark.usefixtures("seeds_in_this_process")
def test_a_sweep_whose_checkpoint_decides_the_architecture_resumes_and_reuses_its_seeds(
        small_run: Path, small_table: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 38: ``--init_from`` writes the checkpoint's architecture into a seed's ``config.yaml``, and the sweep
    compared it with the config before that replacement, so the recipe's sweep refused its own seeds (interrupted or
    finished) as "a run of another configuration". Here the checkpoint (1 layer of width 8) overrides the command's 2
    layers: the interrupted seed resumes, the finished ones are reused, another dropout is still refused."""
    source = json.loads((small_run / "metrics.json").read_text())["best_checkpoint"]
    args = small_run_args(small_table, tmp_path / "data", tmp_path, "--trainer.max_steps", "4",
                          "--trainer.val_check_interval", "2", "--init_from", source, "--model.encoder.num_layers", "2")
    sweep = ["--seeds", "0", "1", "--name", "ft", *args]
    options, train_args = seeds.parse_args(sweep)
    seed0 = tmp_path / "ft-seed0"
    # seed 0 as a sweep stopped during its step 3 leaves it: last.ckpt, no metrics.json
    assert train_in_process(seeds.seed_command(options, 0, train_args)[len(seeds.TRAIN):], SignalDuringStep(3)) == 143
    assert yaml.safe_load((seed0 / "config.yaml").read_text())["model"]["init_args"]["encoder"]["num_layers"] == 1

    first = seeds.main(sweep)
    assert first["seeds"] == [0, 1] and first["missing_seeds"] == []
    assert [s["start_step"] for s in json.loads((seed0 / "run.json").read_text())["segments"]] == [0, 3]
    runs = {seed: files_of(tmp_path / f"ft-seed{seed}") for seed in (0, 1)}
    capsys.readouterr()
    assert json.loads(json.dumps(seeds.main(sweep))) == json.loads(json.dumps(first))  # the same command again
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("[seeds] ft: seed")] == [
        f"[seeds] ft: seed {seed} reused: {tmp_path / f'ft-seed{seed}'} finished with the same config"
        for seed in (0, 1)]
    assert {seed: files_of(tmp_path / f"ft-seed{seed}") for seed in (0, 1)} == runs

    with pytest.raises(Refused):
        seeds.main([*sweep, "--model.encoder.dropout", "0.3"])
    config = seed0 / "config.yaml"
    assert capsys.readouterr().err.splitlines() == [
        f"error: seed 0 of 'ft' ({seed0}) is a run of another configuration: model.init_args.encoder.dropout: 0.0 "
        f"({config}) vs 0.3 (now); run this one under another --name"]
    assert {seed: files_of(tmp_path / f"ft-seed{seed}") for seed in (0, 1)} == runs


def test_an_option_train_refuses_stops_the_sweep_before_any_seed(qm9_root: Path, tmp_path: Path,
                                                                 package_log: pytest.LogCaptureFixture) -> None:
    """A bad option used to be found by the first seed's train, which failed; the sweep went on to the next seed."""
    args = tiny_run_args(qm9_root, tmp_path, "--model.encoder.num_layers", "abc")
    with pytest.raises(SystemExit) as stop:
        seeds.main(["--seeds", "0", "1", "--name", "bad", *args])
    assert stop.value.code == 2
    assert [r.getMessage() for r in package_log.records if r.levelname == "ERROR"] == [
        "model.encoder.num_layers: Expected a <class 'int'>. Got value: abc"]
    assert not list(tmp_path.glob("bad-seed*"))  # no seed ran


def test_collect_refuses_seeds_of_different_configs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for seed, attention in ((0, "urpe"), (1, "rpe")):
        run_dir = tmp_path / f"mix-seed{seed}"
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text(yaml.safe_dump({"seed_everything": seed, "run_name": run_dir.name,
                                                             "model": {"encoder": {"attention": attention}}}))
        (run_dir / "metrics.json").write_text(json.dumps({"validation": {"val/mae": 0.5}, "test": None,
                                                          "global_step": 2}))
    with pytest.raises(SystemExit) as stop:
        seeds.main(["--collect", "--name", "mix", "--seeds", "0", "1", "--run_root", str(tmp_path)])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (f"error: the seeds of 'mix' under {tmp_path} are runs of different "
                                       "configurations: model.encoder.attention: 'urpe' (seed 0) vs 'rpe' (seed 1)\n")
    assert not (tmp_path / "mix-seeds.json").exists()


def test_collect_without_runs_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no finished run of nothing"):
        seeds.main(["--collect", "--name", "nothing", "--run_root", str(tmp_path)])


@pytest.mark.slow
def test_sigterm_to_seeds_py_stops_the_running_seed_at_a_checkpoint_and_the_sweep_resumes(qm9_root: Path,
                                                                                           tmp_path: Path) -> None:
    """``kill <seeds.py>`` used to leave the seed's train.py running on its own (and Ctrl-C killed it 0.25 s
    later without a checkpoint): the signal is passed on, the seed saves its step, the sweep stops."""
    to_seeds_py = {"class_path": "graphormer_urpe.testing.runs.SignalDuringStep",
                   "init_args": {"step": 3, "signum": int(signal.SIGTERM), "to_parent": True}}
    command = [sys.executable, str(REPO_DIR / "seeds.py"), "--seeds", "0", "1", "--name", "cut",
               *tiny_run_args(qm9_root, tmp_path, "--checkpoint.every_n_steps", "0"),
               f"--trainer.callbacks+={json.dumps(to_seeds_py)}"]
    first = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 128 + signal.SIGTERM, first.stderr[-3000:]
    assert ("[seeds] seed 0 stopped by a signal (exit code 143) after writing its last.ckpt; the same command resumes "
            "the sweep") in first.stderr
    seed0 = tmp_path / "cut-seed0"
    assert torch.load(seed0 / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    assert not (tmp_path / "cut-seed1").exists()  # the sweep stopped with its seed
    free = RunDirectory(seed0)  # the seed's train.py has ended: nothing holds its directory
    free.plan("auto")
    free.take(writer=True)
    free.release()
    second = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=600, check=False)
    assert second.returncode == 128 + signal.SIGTERM  # seed 1 meets the same signal at its step 3
    assert [s["start_step"] for s in json.loads((seed0 / "run.json").read_text())["segments"]] == [0, 3]
    assert json.loads((seed0 / "metrics.json").read_text())["global_step"] == 6


@pytest.mark.parametrize("on_sigterm", [
    "",  # a seed past its metrics.json: it no longer catches the signal and dies of it
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))",  # a seed that finishes anyway
])
def test_a_seed_ending_as_sigterm_arrives_still_stops_the_sweep(tmp_path: Path, on_sigterm: str) -> None:
    """A SIGTERM that reached the seed's train.py after its metrics.json was written ended the seed with -15 (or
    0), which the sweep counted as a failed (or finished) seed and went on to the next one, to exit 1 at the end."""
    ready = tmp_path / "ready"
    child = "\n".join(["import pathlib, signal, sys, time", on_sigterm, f"pathlib.Path({str(ready)!r}).touch()",
                       "time.sleep(60)"])

    def terminate_this_process_once_the_child_runs() -> None:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=terminate_this_process_once_the_child_runs)
    sender.start()
    try:
        assert seeds.run_seed([sys.executable, "-c", child]) == 128 + signal.SIGTERM
    finally:
        sender.join()
    assert ready.exists()


def test_a_seed_another_process_runs_is_waited_for_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    """Two sweeps of seeds 5 and 6 at once: this one finds seed 5 locked by the other, waits, and reuses it."""
    config = {"seed_everything": 0, "model": {"lr": 1e-3}}

    def finish(run_dir: Path, seed: int) -> None:
        (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "seed_everything": seed}))
        (run_dir / "metrics.json").write_text(json.dumps({"validation": {"val/mae": seed / 10}, "global_step": 4}))

    ran = []

    def run_seed(command: list[str]) -> int:  # this sweep's train.py, as fast as can be
        seed = int(command[command.index("--seed_everything") + 1])
        ran.append(seed)
        (tmp_path / f"exp-seed{seed}").mkdir()
        finish(tmp_path / f"exp-seed{seed}", seed)
        return 0

    other = tmp_path / "exp-seed5"
    other.mkdir()
    lock = open(other / ".lock", "a")  # the other sweep's train.py of seed 5
    fcntl.flock(lock, fcntl.LOCK_EX)

    def the_other_sweep_finishes() -> None:
        time.sleep(0.5)
        finish(other, 5)
        lock.close()

    monkeypatch.setattr(seeds, "run_seed", run_seed)
    monkeypatch.setattr(seeds, "resolved_config", lambda command: config)  # what train would record for exp.yaml
    monkeypatch.setattr(seeds, "POLL_SECONDS", 0.05)
    threading.Thread(target=the_other_sweep_finishes).start()
    result = seeds.main(["--config", "exp.yaml", "--seeds", "5", "6", "--run_root", str(tmp_path)])
    assert ran == [6] and result["seeds"] == [5, 6] and result["missing_seeds"] == []
    out = capsys.readouterr().out
    assert f"[seeds] exp: seed 5: another process runs it ({other / '.lock'} is held): waiting for it to finish" in out
    assert f"[seeds] exp: seed 5 reused: {other} finished with the same config" in out


@pytest.mark.slow
@pytest.mark.usefixtures("seeds_in_this_process")
def test_ensemble_saves_the_seeds_best_checkpoints_as_one_ensemble(small_table: Path, tmp_path: Path) -> None:
    from graphormer_urpe.evaluation.ensemble import SavedEnsemble, sha256_file
    from graphormer_urpe.testing.runs import small_run_args

    args = small_run_args(small_table, tmp_path / "data", tmp_path, "--trainer.max_steps", "4",
                          "--trainer.val_check_interval", "2")
    result = seeds.main(["--seeds", "0", "1", "--name", "ens", "--ensemble", *args])
    record = SavedEnsemble(tmp_path / "ens-ensemble").record
    assert result["ensemble"]["sources"] == [{"path": s.path, "sha256": s.sha256} for s in record.sources]
    for seed, source in zip((0, 1), record.sources):
        best = json.loads((tmp_path / f"ens-seed{seed}" / "metrics.json").read_text())["best_checkpoint"]
        assert source.path == best and source.sha256 == sha256_file(Path(best))
    assert len(pd.read_csv(tmp_path / "ens-ensemble" / "test.csv")) == 6  # the 6 test molecules
    assert record.trees is None and "test/mae" in record.scores["test"]["ensemble"]


@pytest.mark.parametrize("flags", [["--trees"], ["--predict", "new.csv"]])
def test_trees_and_new_molecules_need_the_ensemble(flags: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        seeds.parse_args(["--config", "small_molecules", *flags])
    assert stop.value.code == 2


@pytest.mark.slow
def test_a_missing_table_to_predict_stops_before_any_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stop:
        seeds.main(["--config", "small_molecules", "--seeds", "0", "--ensemble", "--predict", str(tmp_path / "no.csv"),
                    "--run_root", str(tmp_path / "runs")])
    assert stop.value.code == 2
    assert str(stop.value) == f"the table to predict, {tmp_path / 'no.csv'}, does not exist"
    assert not (tmp_path / "runs").exists()


def recipe_refusal(tmp_path: Path, capsys: pytest.CaptureFixture, *flags: str) -> str:
    """The one line with which a recipe sweep of the small table refuses ``flags``; nothing ran, nothing was written."""
    from graphormer_urpe.testing.runs import small_run_args

    table = tmp_path / "small.csv"
    table.write_text("".join((REPO_DIR / "examples" / "qm9_sample.csv").read_text().splitlines(True)[:61]))
    args = small_run_args(table, tmp_path / "data", tmp_path / "runs", "--trainer.max_steps", "4")
    with pytest.raises(SystemExit) as stop:
        seeds.main(["--seeds", "0", "1", "--name", "ens", "--ensemble", *flags, *args])
    assert stop.value.code == 2 and not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()
    assert "\n" not in str(stop.value)  # logged in one line
    return str(stop.value)


@pytest.mark.slow
def test_every_refusal_of_a_recipe_sweep_comes_before_the_first_seed(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """Issue 38.3: the trees without descriptors, a table to predict without the SMILES column or without rows."""
    assert "--trees reads the RDKit descriptors and this config has none" in recipe_refusal(
        tmp_path, capsys, "--trees", "--data.source.descriptors", "null")
    (tmp_path / "no_smiles.csv").write_text("id,name\n1,ethanol\n")
    assert "no_smiles.csv" in recipe_refusal(tmp_path, capsys, "--predict", str(tmp_path / "no_smiles.csv"))
    (tmp_path / "empty.csv").write_text("smiles\n")
    assert "empty.csv: the file has a header but no data rows" in recipe_refusal(
        tmp_path, capsys, "--predict", str(tmp_path / "empty.csv"))


@pytest.mark.slow
@pytest.mark.usefixtures("seeds_in_this_process")
def test_ensemble_with_trees_writes_its_own_files(small_table: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    from graphormer_urpe.evaluation.ensemble import SavedEnsemble
    from graphormer_urpe.testing.runs import small_run_args

    args = small_run_args(small_table, tmp_path / "data", tmp_path, "--trainer.max_steps", "4",
                          "--trainer.val_check_interval", "2", "--data.source.descriptors", "rdkit2d")
    new = tmp_path / "new.csv"
    new.write_text("id,smiles\na,CCO\nb,c1ccccc1O\nc,not a molecule\n")
    command = ["--seeds", "0", "1", "--name", "ens", "--ensemble", "--trees", "--predict", str(new), *args]
    result = seeds.main(command)
    record = SavedEnsemble(tmp_path / "ens-ensemble-trees").record
    assert set(record.tree_weights) == {"gap_ev", "mu_debye"} and result["ensemble"]["tree_weights"] == \
        record.tree_weights
    blend_mae = record.scores["test"]["blend"]["test/mae"]
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("[seeds] ensemble of seeds [0, 1]: test MAE ") and \
        f"test MAE {blend_mae:.4g} of the blend with the descriptor trees" in last  # issue 38.5: named as the blend's
    assert not (tmp_path / "ens-ensemble").exists()  # the plain ensemble's name is not taken
    written = tmp_path / "ens-ensemble-trees-predict-new.csv"
    predicted = pd.read_csv(written, keep_default_na=False, na_values=[""])
    assert predicted["id"].tolist() == ["a", "b", "c"]  # issue 38.5: the table's other columns are kept
    assert predicted["smiles"].tolist() == ["CCO", "c1ccccc1O", "not a molecule"]
    assert predicted[["gap_ev", "mu_debye", "gap_ev_trees", "gap_ev_std"]].iloc[:2].notna().all(axis=None)
    assert predicted[["gap_ev", "gap_ev_member0"]].iloc[2].isna().all() and predicted["error"].iloc[2] != ""
    earlier = written.read_bytes()
    with pytest.raises(SystemExit) as stop:  # the same command again: the earlier prediction is kept
        seeds.main(command)
    assert stop.value.code == 2 and written.read_bytes() == earlier
    written.rename(tmp_path / "kept.csv")  # moved away: the same command reuses the seeds and the ensemble
    capsys.readouterr()
    seeds.main(command)
    assert f"[seeds] ensemble reused: {tmp_path / 'ens-ensemble-trees'} holds these seeds' runs" in \
        capsys.readouterr().out
    assert written.read_bytes() == (tmp_path / "kept.csv").read_bytes()
