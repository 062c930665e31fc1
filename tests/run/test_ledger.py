"""Run directories as ledgers (issue 20): created atomically and uniquely, never taken over by a new run, used
by one process at a time; every resume, requeue, kill -9 restart and extension appends a segment to
``run.json`` and ``metrics.csv``, and the joined log is the run's one learning curve; a refused start leaves
every file of the run byte for byte; Ctrl-C exits 130; a run that would never validate says so.

The probes run issue 20's tiny runs on ``head -61 examples/qm9_sample.csv`` (``small_run_args``)."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml

from graphormer_urpe.run import ledger
from graphormer_urpe.run.ledger import (
    LOCK_FILE,
    MetricsLog,
    RunDirectory,
    RunDirError,
    RunStart,
    create_timestamped_dir,
    is_locked,
    read_metrics,
    start_segment,
)
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.directories import files_of
from graphormer_urpe.testing.runs import (
    FailAtStep,
    SignalDuringStep,
    learning_curve,
    run_train_subprocess,
    small_run_args,
    train_in_process,
)

#: What one validation and one training log step write (besides segment, step and epoch).
VALIDATION = ("val/mae", "val/mae/gap_ev", "val/mae/mu_debye")
TEST = ("test/mae", "test/mae/gap_ev", "test/mae/mu_debye")


def curve(run_dir: Path) -> list[tuple[int, tuple[str, ...]]]:
    """The joined log as (step, metrics logged) pairs."""
    return [
        (row["step"], tuple(sorted(k for k in row if k not in ("segment", "step", "epoch"))))
        for row in read_metrics(run_dir)
    ]


def expected_curve(last_step: int) -> list[tuple[int, tuple[str, ...]]]:
    """Validation every 50 steps and a log line every 50 steps up to ``last_step``, then the final evaluation."""
    rows = []
    for step in range(49, last_step, 50):
        rows += [(step, ("lr-AdamW",)), (step, ("train/loss",)), (step, VALIDATION)]
    return [*rows, (last_step, VALIDATION), (last_step, TEST)]


@pytest.fixture
def data_root(small_run: Path) -> Path:
    return small_run.parent.parent / "data"


def copy_run(small_run: Path, tmp_path: Path, name: str = "t2") -> Path:
    """A copy of the finished 200-step probe run at ``tmp_path/runs/<name>``."""
    run_dir = tmp_path / "runs" / name
    shutil.copytree(small_run, run_dir)
    return run_dir


def signal_at(step: int, signum: int, times: int = 1) -> str:
    """The ``train.py`` argument that makes a subprocess send itself ``signum`` (``times`` times) during
    optimiser step ``step``."""
    callback = {
        "class_path": "graphormer_urpe.testing.runs.SignalDuringStep",
        "init_args": {"step": step, "signum": int(signum), "times": times},
    }
    return f"--trainer.callbacks+={json.dumps(callback)}"


def error_lines(log: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in log.records if record.levelname == "ERROR"]


# ----------------------------------------------------------------------------- naming and holding


def opened(directory: RunDirectory, ckpt_path: str | None, writer: bool, launch: str | None = None) -> RunStart:
    """How a start plans to use ``directory``, then holds it (what ``plan_start`` does around its checks)."""
    start = directory.plan(ckpt_path)
    directory.take(writer, launch)
    return start


def test_runs_started_in_the_same_second_get_directories_of_their_own(tmp_path: Path) -> None:
    now = datetime.datetime(2026, 11, 25, 9, 30, 5)
    made = [create_timestamped_dir(tmp_path, "cfg", now).path for _ in range(3)]
    assert [p.name for p in made] == ["cfg-20261125-093005", "cfg-20261125-093005-2", "cfg-20261125-093005-3"]
    assert all(p.is_dir() for p in made)
    (tmp_path / "cfg-20261125-093005-4").write_text("a file is not taken over either")
    assert create_timestamped_dir(tmp_path, "cfg", now).path.name == "cfg-20261125-093005-5"


def test_a_run_directory_is_held_by_one_process_at_a_time(tmp_path: Path) -> None:
    holder = RunDirectory(tmp_path / "run")
    assert opened(holder, None, writer=True).checkpoint is None and (tmp_path / "run" / LOCK_FILE).is_file()
    (tmp_path / "run" / "run.json").write_text("{}")  # the run has started
    other = RunDirectory(tmp_path / "run")
    with pytest.raises(
        RunDirError,
        match=rf"^{tmp_path / 'run'} is in use by another process \(it holds "
        rf"{tmp_path / 'run' / LOCK_FILE}\): wait until that run stops, or stop "
        "it first$",
    ):
        opened(other, "auto", writer=True)
    holder.release()
    assert opened(other, "auto", writer=True).earlier_segments  # free again: the next start takes it
    other.release()
    assert (tmp_path / "run" / "run.json").is_file()  # a used directory stays


def test_a_directory_created_for_a_start_that_never_began_is_removed(tmp_path: Path) -> None:
    unused = RunDirectory(tmp_path / "new")
    opened(unused, None, writer=True)
    unused.release()
    assert not (tmp_path / "new").exists()
    stamped = create_timestamped_dir(tmp_path / "new_root" / "runs", "cfg")  # the run root is made for it too
    with pytest.raises(RunDirError, match="without --run_name every start gets a new directory"):
        opened(stamped, "last", writer=True)
    stamped.release()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "runs" / "other").mkdir(parents=True)
    create_timestamped_dir(tmp_path / "runs", "cfg").release()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["other"]  # what was there stays


def test_a_start_that_failed_before_its_first_checkpoint_leaves_its_name_free(tmp_path: Path) -> None:
    """What a failed start wrote in a directory it made goes with it; a directory that existed before it, or
    one that holds a checkpoint, stays as it is."""
    failed = RunDirectory(tmp_path / "runs" / "new")
    opened(failed, None, writer=True)
    for name in ("config.yaml", "run.json", "metrics.csv"):
        (failed.path / name).write_text("written by the failed start")
    (failed.path / "checkpoints").mkdir()
    failed.discard()
    assert not (tmp_path / "runs").exists()  # the run root made for it too
    assert opened(RunDirectory(tmp_path / "runs" / "new"), None, writer=True) == RunStart(None, False)  # free
    kept = RunDirectory(tmp_path / "kept")
    opened(kept, None, writer=True)
    (kept.path / "checkpoints").mkdir()
    (kept.path / "checkpoints" / "last.ckpt").write_bytes(b"step 1")
    kept.discard()
    assert (kept.path / "checkpoints" / "last.ckpt").read_bytes() == b"step 1"
    earlier = tmp_path / "earlier"  # a run stopped before its first checkpoint, restarted by this start
    earlier.mkdir()
    (earlier / "config.yaml").write_text("seed_everything: 0\n")
    before = files_of(earlier)
    restart = RunDirectory(earlier)
    assert opened(restart, "auto", writer=True) == RunStart(None, True)
    restart.discard()
    assert files_of(earlier) == before


def test_a_start_that_loses_the_race_for_a_name_leaves_the_winner_alone(tmp_path: Path) -> None:
    """Two new runs of one --run_name: both see no directory, the other one creates it first."""
    late = RunDirectory(tmp_path / "root" / "run")
    (tmp_path / "root" / "run").mkdir(parents=True)  # the winner, between the loser's look and its mkdir
    (tmp_path / "root" / "run" / LOCK_FILE).write_text("")
    with pytest.raises(RunDirError, match="was created by another process a moment ago"):
        late._create()
    late.release()
    assert (tmp_path / "root" / "run" / LOCK_FILE).is_file()


def test_every_process_of_a_start_decides_alike_from_the_runs_files(tmp_path: Path) -> None:
    """Rank 0 may be creating the directory and its lock while the others look: those never count, the
    files a run writes once it trains do, so every rank refuses or goes on alike (none waits for a rank 0
    that stopped)."""
    run = tmp_path / "run"

    def each_rank(ckpt_path: str | None) -> list[RunStart | str]:
        outcomes: list[RunStart | str] = []
        for writer in (True, False):
            directory = RunDirectory(run)
            try:
                outcomes.append(opened(directory, ckpt_path, writer=writer))
            except RunDirError as error:
                outcomes.append(str(error))
            directory.release()
        return outcomes

    run.mkdir()
    (run / LOCK_FILE).write_text("slurm7.0")  # all that rank 0 makes before the processes join
    assert each_rank(None) == each_rank("auto") == [RunStart(None, earlier_segments=False)] * 2
    (run / "config.yaml").write_text("seed_everything: 0\n")  # a run stopped before its first checkpoint
    assert (
        each_rank(None)
        == [
            f"{run} already exists and a new run never writes into an earlier run's directory: "
            "extend or resume that run with --ckpt_path last, or give this one another "
            "--run_name"
        ]
        * 2
    )
    assert each_rank("auto") == [RunStart(None, earlier_segments=True)] * 2  # both compare the configs
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert each_rank("auto") == each_rank("last") == [RunStart(str(run / "checkpoints" / "last.ckpt"), True)] * 2
    foreign = str(tmp_path / "other" / "checkpoints" / "last.ckpt")
    assert (
        each_rank(foreign)
        == [
            f"{run} holds another run: resuming {foreign} in it would mix two runs; give the "
            "run continued from that checkpoint a new --run_name"
        ]
        * 2
    )


def test_the_other_processes_of_a_launch_wait_for_rank_0_and_stop_as_it_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under SLURM or torchrun each process starts by itself: they go on once rank 0 holds the directory
    (its lock names their launch), and stop when another launch holds it, as rank 0 does."""
    run = tmp_path / "run"
    rank_0 = RunDirectory(run)
    opened(rank_0, None, writer=True, launch="slurm7.0")
    assert (run / LOCK_FILE).read_text() == "slurm7.0"
    assert opened(RunDirectory(run), None, writer=False, launch="slurm7.0").checkpoint is None  # at once
    monkeypatch.setattr(ledger, "FOREIGN_HOLDER_GRACE", 0.2)
    in_use = (
        f"{run} is in use by another process (it holds {run / LOCK_FILE}): wait until that run stops, or stop it first"
    )
    with pytest.raises(RunDirError) as refused:  # rank 1 of another job of the same --run_name
        opened(RunDirectory(run), None, writer=False, launch="slurm8.0")
    assert str(refused.value) == in_use
    with pytest.raises(RunDirError) as refused:  # and its rank 0
        opened(RunDirectory(run), None, writer=True, launch="slurm8.0")
    assert str(refused.value) == in_use
    rank_0.release()
    # an ended launch's record, no lock held: the others wait for their rank 0, and not forever
    with pytest.raises(
        RunDirError,
        match=rf"^{run}: the process of global rank 0 did not take the run directory "
        r"within 0 s; see its log$",
    ):
        RunDirectory(run)._wait_for_writer("slurm8.0", timeout=0.3)


# ----------------------------------------------------------------------------- the metrics log


def test_the_metrics_log_only_appends_and_keeps_earlier_rows_text(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path)
    with pytest.raises(RuntimeError, match="before the run's segment was opened"):
        log.log_metrics({"train/loss": 1.0}, step=0)
    log.open(0)
    log.log_metrics({"train/loss": torch.tensor(0.5), "epoch": 0}, step=3)
    assert (tmp_path / "metrics.csv").read_text() == "segment,step,epoch,train/loss\n0,3,0,0.5\n"
    log.log_metrics({"val/mae": 0.25, "epoch": 0}, step=3)  # a new column: the header grows, rows keep their text
    assert (tmp_path / "metrics.csv").read_text() == "segment,step,epoch,train/loss,val/mae\n0,3,0,0.5,\n0,3,0,,0.25\n"
    with open(tmp_path / "metrics.csv", "a") as handle:
        handle.write("0,4,0,0.")  # a process killed while writing its row
    restarted = MetricsLog(tmp_path)
    restarted.open(1)
    restarted.log_metrics({"train/loss": 0.125}, step=4)
    assert (tmp_path / "metrics.csv").read_text().splitlines()[-2:] == ["0,4,0,0.", "1,4,,0.125,"]


def test_the_joined_log_drops_what_later_segments_logged_again(tmp_path: Path) -> None:
    """Segment 0 trains to step 149 with a checkpoint at 100 (written before the validation of step 100,
    logged at 99) and is killed; segment 1 resumes at 100, validates step 100 again and is killed at 120
    before its next checkpoint; segment 2 resumes at 100 again and finishes at 200."""
    for number, start in enumerate([0, 100, 100]):
        start_segment(tmp_path, {"config": "cfg"}, {"command": f"start {number}", "start_step": start}, "seed: 0\n")
    (tmp_path / "metrics.csv").write_text(
        "segment,step,loss,val\n"
        + "".join(f"0,{s},{s},\n0,{s},,{s}\n" for s in (49, 99, 149))
        + "1,99,,1099\n1,109,1109,\n1,119,1119,\n"
        + "2,99,,2099\n"
        + "".join(f"2,{s},{2000 + s},\n" for s in (149, 199, 200))
    )
    assert read_metrics(tmp_path) == [
        {"segment": 0, "step": 49, "loss": 49.0},
        {"segment": 0, "step": 49, "val": 49.0},
        {"segment": 0, "step": 99, "loss": 99.0},
        {"segment": 2, "step": 99, "val": 2099.0},
        {"segment": 2, "step": 149, "loss": 2149.0},
        {"segment": 2, "step": 199, "loss": 2199.0},
        {"segment": 2, "step": 200, "loss": 2200.0},
    ]
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["segments"] == [
        {"segment": k, "command": f"start {k}", "start_step": s} for k, s in enumerate([0, 100, 100])
    ]
    assert (tmp_path / "config.yaml").read_text() == "seed: 0\n"


# ----------------------------------------------------------------------------- probes through train.py


def test_a_new_run_never_takes_over_an_existing_directory(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    run_dir = copy_run(small_run, tmp_path)
    before = files_of(run_dir)
    assert train_in_process(small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "t2")) == 2
    assert error_lines(package_log) == [
        f"{run_dir} already exists and a new run never writes into an earlier run's directory: extend or resume "
        "that run with --ckpt_path last, or give this one another --run_name"
    ]
    assert files_of(run_dir) == before


def test_an_extension_appends_a_segment_and_the_joined_log_covers_every_step(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20: validation every 50 steps, 200 steps, then extended to 300 with ``--ckpt_path last``; the
    extension runs at another commit, and each segment records its own: the commit when the start was planned, not
    one made while it prepared its data (the code it runs was imported before)."""
    run_dir = copy_run(small_run, tmp_path)
    checkout = {"commit": "0123abc-the-extensions-commit"}
    monkeypatch.setattr("graphormer_urpe.run.start.git_commit", lambda: checkout["commit"])

    class CommitWhilePreparing(pl.Callback):
        def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            checkout["commit"] = "4567def-committed-meanwhile"

    first_segment = (run_dir / "metrics.csv").read_bytes()
    assert curve(run_dir) == expected_curve(200)
    args = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--trainer.max_steps",
        "300",
        "--ckpt_path",
        "last",
    )
    assert train_in_process(args, CommitWhilePreparing()) == 0
    assert (run_dir / "metrics.csv").read_bytes().startswith(first_segment)  # appended: not a byte lost
    assert curve(run_dir) == expected_curve(300)  # from the start to 300, no gap, no row twice
    assert [row["segment"] for row in read_metrics(run_dir)] == [0] * 12 + [1] * 8
    segments = json.loads((run_dir / "run.json").read_text())["segments"]
    assert segments[0] == json.loads((small_run / "run.json").read_text())["segments"][0]
    assert segments[0]["start_step"] == 0 and segments[0]["resumed_from"] is None
    record = json.loads((run_dir / "run.json").read_text())
    assert segments[0]["git_commit"] == json.loads((small_run / "run.json").read_text())["git_commit"]
    assert segments[1]["git_commit"] == record["git_commit"] == "0123abc-the-extensions-commit"  # the latest start's
    assert segments[1]["command"] == shlex.join(["graphormer-urpe", "train", *args])
    assert (segments[1]["start_step"], segments[1]["resumed_from"]) == (200, str(run_dir / "checkpoints" / "last.ckpt"))
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["max_steps"] == 300
    assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 300


def test_resuming_a_finished_run_at_its_own_length_evaluates_it_again_as_a_segment(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    """Nothing is left to train (Lightning skips the training loop): the start is still recorded, before
    its evaluation logs its rows."""
    run_dir = copy_run(small_run, tmp_path)
    before = (run_dir / "metrics.csv").read_bytes()
    args = small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "t2", "--ckpt_path", "last")
    assert train_in_process(args) == 0
    assert [(s["start_step"], s["command"]) for s in json.loads((run_dir / "run.json").read_text())["segments"]] == [
        (0, json.loads((small_run / "run.json").read_text())["segments"][0]["command"]),
        (200, shlex.join(["graphormer-urpe", "train", *args])),
    ]
    added = (run_dir / "metrics.csv").read_text()[len(before) :].splitlines()
    assert [row.split(",")[:2] for row in added] == [["1", "200"], ["1", "200"]]  # validation and test again
    assert learning_curve(run_dir) == learning_curve(small_run)


def test_a_requeue_after_sigterm_continues_the_learning_curve_of_an_uninterrupted_run(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    """One command for the first start and every restart (a SLURM requeue script): ``--ckpt_path auto``."""
    args = small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "cut", "--ckpt_path", "auto")
    assert train_in_process(args, SignalDuringStep(120)) == 128 + signal.SIGTERM
    assert train_in_process(args) == 0
    run_dir = tmp_path / "runs" / "cut"
    assert learning_curve(run_dir) == learning_curve(small_run)  # every step once, with the uninterrupted run's values
    segments = json.loads((run_dir / "run.json").read_text())["segments"]
    assert [(s["start_step"], s["resumed_from"]) for s in segments] == [
        (0, None),
        (120, str(run_dir / "checkpoints" / "last.ckpt")),
    ]


@pytest.mark.slow
def test_a_restart_after_kill_9_keeps_every_row_and_joins_the_learning_curve(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    """Killed at step 160, 60 steps after its last checkpoint: those steps are trained again on restart."""
    args = small_run_args(
        small_table, data_root, tmp_path / "runs", "--run_name", "killed", "--checkpoint.every_n_steps", "100"
    )
    assert run_train_subprocess([*args, signal_at(160, signal.SIGKILL)]).returncode == -signal.SIGKILL
    run_dir = tmp_path / "runs" / "killed"
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 100
    assert [(row["step"], row["train/loss"]) for row in read_metrics(run_dir) if "train/loss" in row][-1][0] == 149
    assert train_in_process([*args, "--ckpt_path", "last"]) == 0
    assert learning_curve(run_dir) == learning_curve(small_run)
    raw = (run_dir / "metrics.csv").read_text().splitlines()
    assert sum(line.startswith("0,149,") for line in raw) == 3  # the abandoned rows stay in the ledger
    assert [s["start_step"] for s in json.loads((run_dir / "run.json").read_text())["segments"]] == [0, 100]


def test_a_refused_resume_leaves_every_file_of_the_run_byte_for_byte(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    run_dir = copy_run(small_run, tmp_path)
    before = files_of(run_dir)
    args = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--trainer.max_steps",
        "300",
        "--ckpt_path",
        "last",
        "--data.batch_size",
        "16",
    )
    assert train_in_process(args) == 2
    assert error_lines(package_log) == [
        f"{run_dir / 'checkpoints' / 'last.ckpt'}: the checkpoint's data order is for 48 training graphs in global "
        "batches of 8, this run has batches of 16: the run cannot resume exactly; use the same data and "
        "--data.batch_size, or start a new run"
    ]
    assert files_of(run_dir) == before


def test_an_option_refused_once_the_data_are_read_leaves_no_run_directory_and_no_file_changed(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    """The epoch's length is known once the training split is read (when the training loader is built): an
    integer validation interval past it stops there, before the run's files are written."""
    never = ["--trainer.check_val_every_n_epoch", "1", "--trainer.val_check_interval", "50"]
    refusal = (
        "trainer.val_check_interval=50: is more than the 6 training batches of an epoch (48 training examples "
        "in global batches of 8) while trainer.check_val_every_n_epoch is 1; use at most 6, a fraction of an "
        "epoch in (0, 1], or trainer.check_val_every_n_epoch null to count batches across epochs"
    )
    assert train_in_process(small_run_args(small_table, data_root, tmp_path / "new", *never)) == 2
    assert error_lines(package_log) == [refusal]
    assert not (tmp_path / "new").exists()  # neither the run directory nor the run root made for it
    run_dir = copy_run(small_run, tmp_path)
    before = files_of(run_dir)
    package_log.clear()
    assert (
        train_in_process(
            small_run_args(
                small_table,
                data_root,
                tmp_path / "runs",
                "--run_name",
                "t2",
                "--trainer.max_steps",
                "300",
                "--ckpt_path",
                "last",
                *never,
            )
        )
        == 2
    )
    assert error_lines(package_log) == [refusal]
    assert files_of(run_dir) == before  # no segment recorded, config.yaml not rewritten


@pytest.mark.parametrize(
    "option, message",
    [
        (["--model.optim.lr", "0.5"], "model.optim.lr=0.5: differs from {last}'s 0.001"),
        (["--model.optim.weight_decay", "0.1"], "model.optim.weight_decay=0.1: differs from {last}'s 0.0"),
        (["--model.optim.adam_eps", "1e-6"], "model.optim.adam_eps=1e-06: differs from {last}'s 1e-08"),
        (["--seed_everything", "7"], "seed_everything=7: differs from {last}'s 0"),
    ],
    ids=["lr", "weight_decay", "adam_eps", "seed"],
)
def test_a_resume_refuses_options_it_would_take_from_the_checkpoint(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log, option: list[str], message: str
) -> None:
    """The optimiser's state and the random state continue from the checkpoint: a changed value would be
    written into ``config.yaml`` and never used."""
    run_dir = copy_run(small_run, tmp_path)
    before = files_of(run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    args = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--trainer.max_steps",
        "300",
        "--ckpt_path",
        "last",
        *option,
    )
    assert train_in_process(args) == 2
    assert error_lines(package_log) == [
        message.format(last=last) + ", which a resume continues with (optimiser and random state); resume with "
        f"{message.rsplit(' ', 1)[1]}, or start a new run from its weights with --init_from {last}"
    ]
    assert files_of(run_dir) == before


def test_a_resume_cannot_shorten_a_run(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    run_dir = copy_run(small_run, tmp_path)
    before = files_of(run_dir)
    args = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--trainer.max_steps",
        "100",
        "--ckpt_path",
        "last",
    )
    assert train_in_process(args) == 2
    assert error_lines(package_log) == [
        f"trainer.max_steps=100: is below the step of {run_dir / 'checkpoints' / 'last.ckpt'} (200): a resume "
        "continues a run and cannot shorten it; pass at least 200 (200 evaluates it again), or start a new run"
    ]
    assert files_of(run_dir) == before


def test_a_moved_run_directory_keeps_its_best_checkpoint_and_score(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    """Renamed (or copied, or synced elsewhere) and extended: evaluated and reported with its own files, and a
    later validation is the best only if it beats the recorded best."""
    moved = copy_run(small_run, tmp_path, "moved")
    recorded = json.loads((small_run / "metrics.json").read_text())
    assert Path(recorded["best_checkpoint"]).parent == small_run / "checkpoints"
    args = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "moved",
        "--trainer.max_steps",
        "250",
        "--ckpt_path",
        "last",
    )
    assert train_in_process(args) == 0
    callbacks = torch.load(small_run / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]
    best_score = next(
        float(state["best_model_score"]) for key, state in callbacks.items() if key.startswith("ModelCheckpoint")
    )
    [new_score] = [row["val/mae"] for row in read_metrics(moved) if row["step"] == 249 and "val/mae" in row]
    # without the recorded score, Lightning would take the validation of step 250 as the best whatever it is
    expected = "best-250.ckpt" if new_score < best_score else Path(recorded["best_checkpoint"]).name
    assert json.loads((moved / "metrics.json").read_text())["best_checkpoint"] == str(moved / "checkpoints" / expected)


def test_ckpt_path_last_with_nothing_to_resume_names_what_it_looked_for(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    run_root = tmp_path / "runs"
    assert train_in_process(small_run_args(small_table, data_root, run_root, "--ckpt_path", "last")) == 2
    [message] = error_lines(package_log)
    assert message.startswith(f"--ckpt_path last: there is no {run_root}/smiles_csv_example-")
    assert message.endswith(
        "/checkpoints/last.ckpt to resume; without --run_name every start gets a new directory; "
        "pass the --run_name of the run to resume (or --ckpt_path auto to resume it if it has a "
        "checkpoint and start it otherwise)"
    )
    assert not run_root.exists()  # the directories made for it are gone
    package_log.clear()
    assert (
        train_in_process(small_run_args(small_table, data_root, run_root, "--run_name", "nope", "--ckpt_path", "last"))
        == 2
    )
    assert error_lines(package_log) == [
        f"--ckpt_path last: there is no {run_root / 'nope/checkpoints/last.ckpt'} to "
        f"resume; {run_root / 'nope'} does not exist (check --run_root and --run_name)"
    ]
    assert not run_root.exists()
    # stopped (Ctrl-C, a crash) before its first checkpoint: its files stay as they are
    stopped = copy_run(small_run, tmp_path)
    shutil.rmtree(stopped / "checkpoints")
    before = files_of(stopped)
    package_log.clear()
    assert (
        train_in_process(small_run_args(small_table, data_root, run_root, "--run_name", "t2", "--ckpt_path", "last"))
        == 2
    )
    assert error_lines(package_log) == [
        f"--ckpt_path last: there is no {stopped / 'checkpoints/last.ckpt'} to resume; the run stopped before writing "
        "its first checkpoint; start it again with --ckpt_path auto, or under another --run_name"
    ]
    assert files_of(stopped) == before


def test_a_run_that_fails_before_its_first_checkpoint_leaves_its_name_reusable(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    """No ``.lock``, ``config.yaml`` or ``run.json`` is left to refuse the next start of the name; a resume that
    fails keeps every file of the run it continues."""
    args = small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "t3", "--trainer.max_steps", "3")
    with pytest.raises(RuntimeError, match="failed in step 2"):
        train_in_process(args, FailAtStep(2))
    assert not (tmp_path / "runs").exists()
    assert train_in_process(args) == 0  # the same command starts the run
    run_dir = copy_run(small_run, tmp_path)
    before = files_of(run_dir)
    resume = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--trainer.max_steps",
        "300",
        "--ckpt_path",
        "last",
    )
    with pytest.raises(RuntimeError, match="failed in step 201"):
        train_in_process(resume, FailAtStep(201))
    after = files_of(run_dir)
    recorded = ("run.json", "config.yaml", "metrics.csv")  # the segment, recorded when its training started
    assert after.keys() == before.keys()
    assert all(after[name] == content for name, content in before.items() if name not in recorded)
    assert after["metrics.csv"].startswith(before["metrics.csv"])
    assert [s["start_step"] for s in json.loads(after["run.json"])["segments"]] == [0, 200]


def stopped_before_its_first_checkpoint(small_run: Path, tmp_path: Path) -> Path:
    """A copy of the probe run as a run stopped (Ctrl-C, a crash) before writing any checkpoint."""
    stopped = copy_run(small_run, tmp_path)
    shutil.rmtree(stopped / "checkpoints")
    (stopped / "metrics.json").unlink()
    return stopped


def test_auto_refuses_to_start_a_run_of_another_config_in_a_directory_without_checkpoint(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    stopped = stopped_before_its_first_checkpoint(small_run, tmp_path)
    before = files_of(stopped)
    other = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--ckpt_path",
        "auto",
        "--model.encoder.attention",
        "rpe",
    )
    assert train_in_process(other) == 2
    assert error_lines(package_log) == [
        f"{stopped} holds a run of another configuration and no checkpoint to resume "
        f"(model.init_args.encoder.attention: 'urpe' ({stopped / 'config.yaml'}) vs 'rpe' (now)); give this run "
        "another --run_name"
    ]
    assert files_of(stopped) == before


def srun(args: list[str], job: str, tasks: int = 2, timeout: float = 240.0) -> list[subprocess.CompletedProcess]:
    """``srun --ntasks <tasks> python train.py ARGS`` simulated on this machine: one process per task with
    SLURM's variables, DDP over gloo on the CPU; fails if they do not all finish within ``timeout`` s."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "TORCHELASTIC_"))
        and k
        not in ("GRAPHORMER_RUN_DIR", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(REPO_DIR / "train.py"),
                *args,
                "--trainer.accelerator",
                "cpu",
                "--trainer.devices",
                str(tasks),
                "--trainer.strategy",
                "ddp",
            ],
            cwd=REPO_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **base,
                "SLURM_JOB_ID": job,
                "SLURM_STEP_ID": "0",
                "SLURM_JOB_NAME": "train",
                "SLURM_NTASKS": str(tasks),
                "SLURM_NTASKS_PER_NODE": str(tasks),
                "SLURM_NODELIST": "127.0.0.1",
                "SLURM_NODEID": "0",
                "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank),
                "MASTER_PORT": str(port),
                "WANDB_MODE": "offline",
                "PYTHONUNBUFFERED": "1",
            },
        )
        for rank in range(tasks)
    ]
    deadline = time.monotonic() + timeout
    done = []
    for process in processes:
        try:
            stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            pytest.fail(f"the {tasks} SLURM tasks did not finish within {timeout} s (one waits for the others)")
        done.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return done


@pytest.mark.slow
def test_under_srun_every_rank_refuses_what_rank_0_refuses_and_starts_what_it_starts(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    """Two SLURM tasks (DDP over gloo): ``--ckpt_path auto`` in a directory of another config is refused by
    both (rank 1 used to wait for rank 0 in the process group until its 30-minute timeout); a new run
    starts on both, rank 1 going on once rank 0 holds the directory."""
    stopped = stopped_before_its_first_checkpoint(small_run, tmp_path)
    before = files_of(stopped)
    other = small_run_args(
        small_table,
        data_root,
        tmp_path / "runs",
        "--run_name",
        "t2",
        "--ckpt_path",
        "auto",
        "--model.encoder.attention",
        "rpe",
    )
    refusal = (
        f"{stopped} holds a run of another configuration and no checkpoint to resume "
        f"(model.init_args.encoder.attention: 'urpe' ({stopped / 'config.yaml'}) vs 'rpe' (now)); give this "
        "run another --run_name"
    )
    for rank, done in enumerate(srun(other, job="4301", timeout=120)):
        assert done.returncode == 2, (rank, done.stderr[-3000:])
        assert f"ERROR] {refusal}" in done.stderr and "Traceback" not in done.stderr, (rank, done.stderr[-3000:])
    assert files_of(stopped) == before
    fresh = small_run_args(small_table, data_root, tmp_path / "runs", "--trainer.max_steps", "4")
    ranks = srun(fresh, job="4302")
    assert [done.returncode for done in ranks] == [0, 0], [done.stderr[-3000:] for done in ranks]
    run_dir = tmp_path / "runs" / "smiles_csv_example-slurm4302.0"
    assert (run_dir / LOCK_FILE).read_text() == "slurm4302.0"
    assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 4


@pytest.mark.slow
def test_auto_starts_a_run_without_checkpoint_again_from_step_0(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    stopped = stopped_before_its_first_checkpoint(small_run, tmp_path)
    before = files_of(stopped)
    same = small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "t2", "--ckpt_path", "auto")
    assert train_in_process(same) == 0
    assert learning_curve(stopped) == learning_curve(small_run)  # segment 1 from step 0 replaces segment 0 in the curve
    assert {row["segment"] for row in read_metrics(stopped)} == {1}
    assert (stopped / "metrics.csv").read_text().startswith(before["metrics.csv"].decode())


def test_a_checkpoint_of_another_run_is_continued_in_a_new_directory_only(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    run_dir, other = copy_run(small_run, tmp_path), copy_run(small_run, tmp_path, "other")
    before = files_of(run_dir)
    foreign = str(other / "checkpoints" / "last.ckpt")
    args = small_run_args(small_table, data_root, tmp_path / "runs", "--ckpt_path", foreign)
    assert train_in_process([*args, "--run_name", "t2"]) == 2
    assert error_lines(package_log) == [
        f"{run_dir} holds another run: resuming {foreign} in it would mix two runs; give the run continued from that "
        "checkpoint a new --run_name"
    ]
    assert files_of(run_dir) == before
    assert train_in_process([*args, "--run_name", "fork"]) == 0
    [segment] = json.loads((tmp_path / "runs" / "fork" / "run.json").read_text())["segments"]
    assert (segment["start_step"], segment["resumed_from"]) == (200, foreign)
    # reported with its own files only: it validated nothing yet, so it has no best checkpoint (not the other's)
    assert json.loads((tmp_path / "runs" / "fork" / "metrics.json").read_text())["best_checkpoint"] is None


def test_a_run_that_would_never_validate_says_so(
    small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    args = small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "short", "--trainer.max_steps", "3")
    assert train_in_process(args) == 0
    assert (
        "--trainer.max_steps 3 ends training after 3 training batches, before its first validation (after 50): the "
        "run never validates while training, keeps no best checkpoint, and its final metrics are those of the last "
        "weights"
    ) in [r.getMessage() for r in package_log.records if r.levelname == "WARNING"]
    assert json.loads((tmp_path / "runs" / "short" / "metrics.json").read_text())["best_checkpoint"] is None


def test_a_run_validated_at_epoch_ends_and_stopped_early_that_max_steps_ends_first_says_so_and_finishes(
    small_table: Path, data_root: Path, tmp_path: Path, package_log
) -> None:
    """small_molecules' schedule (validation at each epoch's end, early stopping on it) with max_steps below the
    batches of one epoch: it said so when training started and finished with its last weights, where early stopping
    used to fail after every step for want of its metric."""
    stopping = {"class_path": "graphormer_urpe.run.callbacks.TaskEarlyStopping", "init_args": {"patience": 2}}
    epoch_ends = ["--trainer.val_check_interval", "1.0", "--trainer.check_val_every_n_epoch", "1"]
    args = small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "short", *epoch_ends)
    args += ["--trainer.max_steps", "3", f"--trainer.callbacks+={json.dumps(stopping)}"]
    assert train_in_process(args) == 0
    warnings = [r.getMessage() for r in package_log.records if r.levelname == "WARNING"]
    batches = [w for w in warnings if w.startswith("--trainer.max_steps 3 ends training after 3 training batches")]
    assert len(batches) == 1 and "before its first validation (after " in batches[0], warnings
    metrics = json.loads((tmp_path / "runs" / "short" / "metrics.json").read_text())
    assert metrics["best_checkpoint"] is None and metrics["global_step"] == 3


@pytest.mark.slow
def test_ctrl_c_finishes_the_step_writes_last_ckpt_exits_130_and_the_run_resumes_exactly(
    small_run: Path, small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    """The first Ctrl-C acts like SIGTERM; resumed, the run logs what the uninterrupted run logged."""
    args = small_run_args(small_table, data_root, tmp_path / "runs", "--run_name", "ctrl_c")
    done = run_train_subprocess([*args, signal_at(12, signal.SIGINT)])
    assert done.returncode == 130, done.stderr[-3000:]
    last = tmp_path / "runs" / "ctrl_c" / "checkpoints" / "last.ckpt"
    assert (
        f"WARNING] Ctrl-C: finishing optimiser step 12, then writing {last} (Ctrl-C again to stop at once)"
        in done.stderr
    )
    assert (
        f"WARNING] Ctrl-C (SIGINT) received: stopped after step 12 and saved {last}; continue with --run_name "
        "ctrl_c --ckpt_path last"
    ) in done.stderr
    assert "Traceback" not in done.stderr and "interrupted" not in done.stderr
    assert torch.load(last, weights_only=True)["global_step"] == 12
    assert train_in_process([*args, "--ckpt_path", "last"]) == 0
    assert learning_curve(tmp_path / "runs" / "ctrl_c") == learning_curve(small_run)


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_keeping_the_periodic_checkpoint(
    small_table: Path, data_root: Path, tmp_path: Path
) -> None:
    args = small_run_args(
        small_table, data_root, tmp_path / "runs", "--run_name", "ctrl_c", "--checkpoint.every_n_steps", "10"
    )
    done = run_train_subprocess([*args, signal_at(12, signal.SIGINT, times=2)])
    assert done.returncode == 130, done.stderr[-3000:]
    last = tmp_path / "runs" / "ctrl_c" / "checkpoints" / "last.ckpt"
    assert (
        f"WARNING] interrupted (Ctrl-C) after step 11; continue from {last} with --run_name ctrl_c --ckpt_path last"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    assert torch.load(last, weights_only=True)["global_step"] == 10


@pytest.mark.slow
def test_runs_started_at_once_never_share_a_directory(small_table: Path, data_root: Path, tmp_path: Path) -> None:
    """Four ``train.py`` processes of one config started together, told apart by their seeds."""
    run_root = tmp_path / "runs"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(REPO_DIR / "train.py"),
                *small_run_args(
                    small_table, data_root, run_root, "--trainer.max_steps", "4", "--seed_everything", str(seed)
                ),
            ],
            cwd=REPO_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(4)
    ]
    errors = [process.communicate(timeout=600)[1] for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, errors
    run_dirs = sorted(run_root.iterdir())
    assert len(run_dirs) == 4 and all(p.name.startswith("smiles_csv_example-") for p in run_dirs)
    seeds = set()
    for run_dir in run_dirs:
        seed = json.loads((run_dir / "run.json").read_text())["seed"]
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["seed_everything"] == seed
        assert len(json.loads((run_dir / "run.json").read_text())["segments"]) == 1
        checkpoints = sorted((run_dir / "checkpoints").iterdir())
        assert [p.name for p in checkpoints] == ["last.ckpt"]  # no validation in 4 steps: no best checkpoint
        embedded = torch.load(checkpoints[0], weights_only=True)["graphormer_config_yaml"]
        assert yaml.safe_load(embedded)["seed_everything"] == seed
        assert {row["segment"] for row in read_metrics(run_dir)} == {0}
        seeds.add(seed)
    assert seeds == set(range(4))


def test_is_locked_tells_a_held_lock_from_a_free_or_missing_file(tmp_path: Path) -> None:
    """What seeds.py asks to tell a seed that another process runs from one that died."""
    lock = tmp_path / ".lock"
    lock.write_text("")
    assert not is_locked(lock)
    with open(lock) as holder:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: as another process holds it
        assert is_locked(lock)
    assert not is_locked(lock)  # closing released it
    assert not is_locked(tmp_path / "gone.lock")


def test_an_undefined_metric_is_written_as_null(tmp_path: Path) -> None:
    """Issue 44.10: a run of a label with one class wrote its ROC-AUC as a bare ``NaN`` into metrics.json, which is
    not JSON (strict readers refuse the file)."""
    ledger.write_json(
        tmp_path / "metrics.json",
        {"validation": {"val/auroc": float("nan"), "val/loss": 0.5}, "test": [float("inf"), 1.0], "global_step": 4},
    )
    text = (tmp_path / "metrics.json").read_text()
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON")) == {
        "validation": {"val/auroc": None, "val/loss": 0.5},
        "test": [None, 1.0],
        "global_step": 4,
    }
