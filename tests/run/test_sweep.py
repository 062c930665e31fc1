"""The sweep's library: a seed's train command, its process (signals passed on, its last error line kept), the locks
that let two sweeps share their seeds, and the statistics over the seeds."""

from __future__ import annotations

import fcntl
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from graphormer_urpe.run import sweep


def test_aggregate_gives_mean_sample_std_and_values() -> None:
    statistics = sweep.aggregate({0: {"val/mae": 1.0, "test/mae": 2.0}, 1: {"val/mae": 3.0}, 2: {"val/mae": 5.0}})
    assert statistics["val/mae"].mean == 3.0
    assert statistics["val/mae"].std == pytest.approx(2.0)  # sqrt(((1-3)^2 + 0 + (5-3)^2) / (3 - 1))
    assert statistics["val/mae"].n == 3 and statistics["val/mae"].values == {0: 1.0, 1: 3.0, 2: 5.0}
    assert statistics["test/mae"] == sweep.Statistic(mean=2.0, std=0.0, n=1, values={0: 2.0})


def test_runs_without_labelled_test_split_report_validation_only() -> None:
    metrics = {"validation": {"val/mae": 0.1}, "test": None, "global_step": 5}  # PCQM4Mv2: test hidden
    assert sweep.final_metrics(metrics) == {"val/mae": 0.1, "global_step": 5.0}


def test_an_undefined_metric_is_left_out_of_the_statistics() -> None:
    """Issue 44.10: a one-class label's ROC-AUC is undefined: ``null`` in ``metrics.json``."""
    metrics = {"validation": {"val/auroc": None, "val/loss": 0.5}, "test": None, "global_step": 4}
    assert sweep.final_metrics(metrics) == {"val/loss": 0.5, "global_step": 4.0}


def test_markdown_table_has_a_row_per_metric_and_a_column_per_seed() -> None:
    table = sweep.markdown_table("zinc", sweep.aggregate({0: {"val/mae": 0.125}, 3: {"val/mae": 0.25}}), [0, 3])
    lines = table.splitlines()
    assert lines[2] == "| metric | mean ± std | n | seed 0 | seed 3 |"
    assert lines[4] == f"| val/mae | 0.1875 ± {math.sqrt(2 * 0.0625**2):.2g} | 2 | 0.125 | 0.25 |"


def test_seed_command_sets_seed_run_name_and_wandb_group() -> None:
    runs = sweep.SeedRuns("qm9_gap", Path("runs"), (4,), "qm9_gap", ("--trainer.max_steps", "9"))
    assert runs.command(4) == [
        *sweep.TRAIN,
        "--config",
        "qm9_gap",
        "--trainer.max_steps",
        "9",
        "--seed_everything",
        "4",
        "--run_root",
        "runs",
        "--run_name",
        "qm9_gap-seed4",
        "--ckpt_path",
        "auto",
        "--wandb.group",
        "qm9_gap",
    ]


@pytest.mark.parametrize(
    "on_sigterm",
    [
        "",  # a seed past its metrics.json: it no longer catches the signal and dies of it
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))",  # a seed that finishes anyway
    ],
)
def test_a_seed_ending_as_sigterm_arrives_still_stops_the_sweep(tmp_path: Path, on_sigterm: str) -> None:
    """A SIGTERM that reached the seed's train after its metrics.json was written ended the seed with -15 (or 0),
    which the sweep counted as a failed (or finished) seed and went on to the next one, to exit 1 at the end."""
    ready = tmp_path / "ready"
    child = "\n".join(
        ["import pathlib, signal, sys, time", on_sigterm, f"pathlib.Path({str(ready)!r}).touch()", "time.sleep(60)"]
    )

    def terminate_this_process_once_the_child_runs() -> None:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=terminate_this_process_once_the_child_runs)
    sender.start()
    try:
        assert sweep.run_seed([sys.executable, "-c", child]).code == 128 + signal.SIGTERM
    finally:
        sender.join()
    assert ready.exists()


def test_a_seed_s_last_error_line_is_its_cause(capfd: pytest.CaptureFixture) -> None:
    """Issue 44.10: the cause of a seed that failed was only in its own output, two lines above the sweep's last."""
    child = (
        "import sys; print('loading', file=sys.stderr); print('[00:00:01 ERROR] data.root: no table here', "
        "file=sys.stderr); print('bye', file=sys.stderr); sys.exit(2)"
    )
    assert sweep.run_seed([sys.executable, "-c", child]) == sweep.SeedExit(2, "data.root: no table here")
    assert capfd.readouterr().err.splitlines() == ["loading", "[00:00:01 ERROR] data.root: no table here", "bye"]
    crash = "raise ValueError('a crash')"
    assert sweep.run_seed([sys.executable, "-c", crash]) == sweep.SeedExit(1, "ValueError: a crash")


def test_a_lock_another_process_holds_is_waited_for(tmp_path: Path, package_log: pytest.LogCaptureFixture) -> None:
    package_log.set_level(logging.INFO, logger="graphormer_urpe")
    lock = tmp_path / ".exp-seed0.lock"
    other = open(lock, "a")
    fcntl.flock(other, fcntl.LOCK_EX)
    released = []

    def release() -> None:
        time.sleep(0.3)
        released.append(time.monotonic())
        other.close()

    threading.Thread(target=release).start()
    with sweep.held(lock, "exp: seed 0"):
        entered = time.monotonic()
    assert released and entered >= released[0]
    assert [r.getMessage() for r in package_log.records] == [
        f"exp: seed 0: another sweep works on it ({lock} is held): waiting for it to finish",
        "exp: seed 0: the other sweep is done with it",
    ]


@pytest.mark.parametrize(("signum", "said"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C (SIGINT)")])
def test_a_signal_stops_the_sweep_through_the_code_it_interrupts(signum: int, said: str) -> None:
    """A SIGTERM that came while the ensemble read a checkpoint was taken by the reader's ``except Exception`` for a
    corrupt file: the sweep refused it (exit code 2) instead of stopping for the signal."""
    with pytest.raises(sweep.SweepStopped) as stopped:
        with sweep.stopping_on_signals("here"):
            try:
                os.kill(os.getpid(), signum)
                time.sleep(5)
            except Exception:  # as a checkpoint's reader does
                pytest.fail("the signal was taken for an error")
    assert stopped.value.exit_code == 128 + signum
    assert str(stopped.value) == (
        f"{said} received: the sweep stopped here; the same command resumes it (the finished "
        "seeds and a written ensemble are reused)"
    )
