"""One training config over several seeds (``graphormer-urpe sweep``): the seeds' runs, each ``train`` in a process
of its own, the locks that let two sweeps of one experiment share its seeds, and the mean and sample standard
deviation of every metric over the finished seeds.

Seed S of experiment ``name`` is the run ``<run_root>/<name>-seed<S>`` (:class:`SeedRuns`). A seed's run is
identified by its resolved config, all but the seed and the run's name and place (:func:`seed_identity`), so a
sweep reuses a finished seed of its own config, resumes an unfinished one, and refuses one of another config.

Two processes never run one seed at once: a sweep holds ``<run_root>/.<name>-seed<S>.lock`` while it runs or reuses
seed S, from before its ``train`` starts (a second sweep of the same seeds waits for it, then reuses the seed), and a
``train`` of that run started by hand holds the run directory's own ``.lock`` (waited for the same way)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

import yaml

from graphormer_urpe.data.files import atomic_write_text
from graphormer_urpe.errors import InputError, SeedsUnfinished, check_int
from graphormer_urpe.run.callbacks import Preempted
from graphormer_urpe.run.checkpoints import config_identity, differences
from graphormer_urpe.run.cli import TrainingCLI
from graphormer_urpe.run.finetune import config_as_recorded
from graphormer_urpe.run.ledger import CONFIG_FILE, LOCK_FILE, RunDirError, is_locked

log = logging.getLogger("graphormer_urpe")

#: How a seed's run is started: the ``train`` command of the installed package, in a process of its own.
TRAIN = [sys.executable, "-m", "graphormer_urpe.commands", "train"]
#: Seconds between two looks at a seed that a ``train`` started by hand runs.
POLL_SECONDS = 10.0
#: The signals a sweep passes on to its running seed, and on which it stops in its own work (the ensemble).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
#: A finished run's final metrics in its directory (``graphormer-urpe train``).
METRICS_FILE = "metrics.json"
#: How many bytes of a seed's stderr are kept to find its last error line.
STDERR_TAIL = 8192


@dataclass(frozen=True)
class SeedRuns:
    """The runs of one experiment's seeds: ``<run_root>/<name>-seed<S>`` for each seed S, trained by ``train`` with
    ``--config config`` and the other options ``train_args``."""

    name: str  # the experiment's name: the runs' prefix and the W&B group
    run_root: Path  # where the runs, the summary and the locks are
    seeds: tuple[int, ...]  # in the order they run
    config: str | None  # train's --config; None: only aggregate finished runs (--collect)
    train_args: tuple[str, ...]  # every other option, passed to train unchanged

    def __post_init__(self) -> None:
        """Refuse (:class:`~graphormer_urpe.errors.InputError`) what ``--name`` and ``--seeds`` cannot be: a name that
        is not one file name, a seed outside ``train``'s range or given twice."""
        if self.name in (".", "..") or Path(self.name).name != self.name:
            raise InputError(
                f"--name {self.name!r}: an experiment's name is one file name (the runs are "
                f"<run_root>/{self.name}-seed<S>), without '/'"
            )
        for seed in self.seeds:
            check_int("--seeds", seed, 0, 2**32 - 1, hint=" (train's --seed_everything)")
        if len(set(self.seeds)) < len(self.seeds):
            raise InputError(f"--seeds {' '.join(map(str, self.seeds))}: a seed is given twice")

    def run_dir(self, seed: int) -> Path:
        return self.run_root / f"{self.name}-seed{seed}"

    def metrics(self, seed: int) -> Path:
        """The seed's ``metrics.json``: it exists once the seed's run finished."""
        return self.run_dir(seed) / METRICS_FILE

    def command(self, seed: int) -> list[str]:
        """The ``train`` command line of one seed (resuming it if it has a checkpoint)."""
        command = [
            *TRAIN,
            "--config",
            str(self.config),
            *self.train_args,
            "--seed_everything",
            str(seed),
            "--run_root",
            str(self.run_root),
            "--run_name",
            self.run_dir(seed).name,
            "--ckpt_path",
            "auto",
        ]
        if not any(a == "--wandb.group" or a.startswith("--wandb.group=") for a in self.train_args):
            command += ["--wandb.group", self.name]
        return command

    def lock(self, seed: int) -> Path:
        """What a sweep holds while it runs or reuses ``seed``, beside the seed's run directory."""
        return self.run_root / f".{self.run_dir(seed).name}.lock"


@dataclass(frozen=True)
class SeedExit:
    """How one seed's ``train`` ended."""

    code: int  # its exit code (0: finished or reused; 128 + signal: stopped by a signal after writing last.ckpt)
    cause: str  # its last error line ('' if it wrote none), which says why it failed


class SweepStopped(Preempted):
    """A signal stopped the sweep: exit code 128 + the signal (as :class:`Preempted`, which
    :func:`~graphormer_urpe.commands.exits.exit_codes` reports); ``message`` says where, and that the same command
    resumes it."""

    def __init__(self, signum: int, message: str) -> None:
        self.signal_name = signal.Signals(signum).name
        received = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else self.signal_name
        Exception.__init__(self, f"{received} received: {message}")


def seed_identity(config: Mapping) -> dict:
    """What a seed's run is, from its resolved config: all but the seed, run name, run root and checkpoint."""
    return config_identity(config, ignore=("seed_everything",))


def resolved_config(command: Sequence[str]) -> dict:
    """The config ``train`` would record for ``command`` (a :meth:`SeedRuns.command`: ``--print_config``, with
    ``--init_from``'s architecture: :func:`~graphormer_urpe.run.finetune.config_as_recorded`), without running it,
    so that an option ``train`` refuses stops the sweep before any seed. Parsed in this process: a ``train`` process
    started only to print it cost every sweep start some 10 s."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            TrainingCLI([*command[len(TRAIN) :], "--print_config"])
    except SystemExit as stop:  # --print_config's exit (0), or a bad option's, its message already logged
        if stop.code:
            raise
    return config_as_recorded(yaml.safe_load(printed.getvalue()))


def check_seed_runs(runs: SeedRuns, wanted: Mapping) -> None:
    """Refuse (:class:`~graphormer_urpe.run.ledger.RunDirError`) unless every existing seed directory holds a run of
    the config ``wanted`` (a :func:`resolved_config`)."""
    identity = seed_identity(wanted)
    for seed in runs.seeds:
        path = runs.run_dir(seed) / CONFIG_FILE
        if path.is_file() and (
            differing := differences(seed_identity(yaml.safe_load(path.read_text())), identity, str(path), "now")
        ):
            raise RunDirError(
                f"seed {seed} of '{runs.name}' ({path.parent}) is a run of another configuration: "
                f"{differing}; run this one under another --name"
            )


def check_same_config(runs: SeedRuns, seeds: Sequence[int]) -> None:
    """Refuse (:class:`~graphormer_urpe.run.ledger.RunDirError`) finished ``seeds`` of different configs."""
    identities = {seed: seed_identity(yaml.safe_load((runs.run_dir(seed) / CONFIG_FILE).read_text())) for seed in seeds}
    for seed in seeds[1:]:
        if differing := differences(identities[seeds[0]], identities[seed], f"seed {seeds[0]}", f"seed {seed}"):
            raise RunDirError(
                f"the seeds of '{runs.name}' under {runs.run_root} are runs of different configurations: {differing}"
            )


# ----------------------------------------------------------------------------- running the seeds


def run_seed(command: Sequence[str]) -> SeedExit:
    """Run one seed's ``train``; returns its exit code and its last error line (its stderr passes through as it
    comes). SIGTERM and SIGUSR1 sent to this process are passed on to it (it saves ``last.ckpt`` and stops); Ctrl-C
    in the terminal reaches it directly, so this process only waits for it (``subprocess.run`` would kill it a
    quarter of a second after Ctrl-C).

    A seed stopped by a forwarded signal returns 128 + that signal, so that the sweep stops, even when the signal
    came as its run was ending: after ``metrics.json`` the run no longer catches it (and dies of it), or it finished
    anyway (exit 0)."""
    child = subprocess.Popen(command, stderr=subprocess.PIPE)
    tail = io.BytesIO()
    copier = threading.Thread(target=_pass_on, args=(child.stderr, tail), daemon=True)
    copier.start()
    forwarded: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        forwarded.append(signum)
        child.send_signal(signum)

    def wait_for_the_seed(signum: int, frame: FrameType | None) -> None:
        log.warning("Ctrl-C: the seed's run finishes its step and writes last.ckpt")

    handlers = {**{signum: forward for signum in STOP_SIGNALS}, signal.SIGINT: wait_for_the_seed}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    copier.join()
    if code < 0:  # killed by a signal (Popen's -signum)
        code = 128 - code
    elif forwarded and code == 0:
        code = 128 + forwarded[0]
    return SeedExit(code, last_error(tail.getvalue().decode(errors="replace")))


def _pass_on(stream: IO[bytes], tail: io.BytesIO) -> None:
    """Copy ``stream`` to this process's stderr as it comes (progress bars included), keeping its last bytes."""
    while chunk := stream.read1(65536):  # type: ignore[attr-defined]
        sys.stderr.buffer.write(chunk)
        sys.stderr.buffer.flush()
        kept = tail.getvalue()[-STDERR_TAIL:] + chunk
        tail.seek(0)
        tail.truncate()
        tail.write(kept)


def last_error(stderr: str) -> str:
    """The last line a command logged as an error (``[HH:MM:SS ERROR] message``: the message), else its last line
    starting ``error:`` or naming an exception (``ValueError: ...``); '' if none."""
    lines = [line.strip() for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    for line in reversed(lines):
        if " ERROR] " in line:
            return line.split(" ERROR] ", 1)[1]
        if line.startswith("error:") or line.split(":", 1)[0].endswith(("Error", "Exception")):
            return line
    return ""


@contextlib.contextmanager
def held(lock: Path, what: str) -> Iterator[None]:
    """Hold ``lock`` (``flock``) for the block; while another process holds it, say so once and wait for it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s: another sweep works on it (%s is held): waiting for it to finish", what, lock)
            fcntl.flock(handle, fcntl.LOCK_EX)
            log.info("%s: the other sweep is done with it", what)
        except OSError as error:  # e.g. Lustre mounted without -o flock
            log.warning("cannot lock %s (%s): make sure no other sweep works on %s at the same time", lock, error, what)
        yield


def wait_for_train(run_dir: Path, label: str) -> None:
    """Wait while a ``train`` holds ``run_dir``'s lock (a run of that seed started by hand)."""
    lock = run_dir / LOCK_FILE
    if not (lock.is_file() and is_locked(lock)):
        return
    log.info("%s: another process runs it (%s is held): waiting for it to finish", label, lock)
    while lock.is_file() and is_locked(lock):
        time.sleep(POLL_SECONDS)
    log.info("%s: the other process is done with %s", label, run_dir)


def run_or_reuse(runs: SeedRuns, seed: int) -> SeedExit:
    """Run one seed unless its run finished (reused); a seed another process runs is waited for first."""
    label = f"{runs.name}: seed {seed}"
    with held(runs.lock(seed), label):
        while True:
            wait_for_train(runs.run_dir(seed), label)
            if runs.metrics(seed).is_file():
                log.info("%s reused: %s finished with the same config", label, runs.run_dir(seed))
                return SeedExit(0, "")
            log.info("%s (%d/%d)", label, runs.seeds.index(seed) + 1, len(runs.seeds))
            ended = run_seed(runs.command(seed))
            lock = runs.run_dir(seed) / LOCK_FILE
            if not ended.code or not (lock.is_file() and is_locked(lock)):
                return ended  # a failure of its own; else a train started by hand took the run first: wait for it


def run_seeds(runs: SeedRuns) -> dict[int, SeedExit]:
    """Run (or reuse) every seed in turn; returns how each that did not finish ended. A seed stopped by a signal
    stops the sweep (:class:`SweepStopped`), its ``last.ckpt`` written."""
    failed = {}
    for seed in runs.seeds:
        ended = run_or_reuse(runs, seed)
        if ended.code > 128:
            raise SweepStopped(
                ended.code - 128,
                f"seed {seed} stopped (exit code {ended.code}) after writing its "
                "last.ckpt; the same command resumes the sweep",
            )
        if ended.code:
            log.error(
                "%s: seed %d failed with exit code %d%s",
                runs.name,
                seed,
                ended.code,
                f": {ended.cause}" if ended.cause else "",
            )
            failed[seed] = ended
    return failed


class Signalled(BaseException):
    """A signal arrived in :func:`stopping_on_signals`'s block: a ``BaseException``, as ``KeyboardInterrupt`` is, so
    that no ``except Exception`` on its way (a checkpoint's reader) takes it for an error of its own."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stopping_on_signals(where: str) -> Iterator[None]:
    """Stop the block at once (:class:`SweepStopped`, saying ``where``) on SIGTERM, SIGUSR1 or Ctrl-C: for the
    sweep's own work (waiting for a seed, its ensemble), whose outputs are written whole or not at all; a seed's
    ``train`` that runs meanwhile gets the signal itself (:func:`run_seed`)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Signalled(signum)

    previous = {signum: signal.signal(signum, stop) for signum in (*STOP_SIGNALS, signal.SIGINT)}
    try:
        yield
    except Signalled as signalled:
        raise SweepStopped(
            signalled.signum,
            f"the sweep stopped {where}; the same command resumes it (the finished "
            "seeds and a written ensemble are reused)",
        ) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold back SIGTERM, SIGUSR1 and SIGINT during the block (a file written whole), then raise those received."""
    received: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, frame: received.append(signum))
        for signum in (*STOP_SIGNALS, signal.SIGINT)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in received:
            signal.raise_signal(signum)


# ----------------------------------------------------------------------------- aggregating them


@dataclass(frozen=True)
class Statistic:
    """One metric over the seeds that have it."""

    mean: float
    std: float  # the sample standard deviation (n - 1 in the denominator; 0 for one seed)
    n: int
    values: dict[int, float]  # seed -> value


def final_metrics(metrics: Mapping) -> dict[str, float]:
    """The numbers of one run's ``metrics.json``: its validation and test metrics, and its steps (a metric that is
    undefined, ``null``, is left out)."""
    values = {**(metrics.get("validation") or {}), **(metrics.get("test") or {})}  # test: None if hidden
    values["global_step"] = metrics.get("global_step")
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def aggregate(per_seed: Mapping[int, Mapping[str, float]]) -> dict[str, Statistic]:
    """Mean, sample standard deviation, n and values of every metric over the seeds that have it."""
    statistics = {}
    for name in sorted({name for metrics in per_seed.values() for name in metrics}):
        values = {seed: metrics[name] for seed, metrics in per_seed.items() if name in metrics}
        n = len(values)
        mean = sum(values.values()) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values.values()) / (n - 1)) if n > 1 else 0.0
        statistics[name] = Statistic(mean, std, n, values)
    return statistics


def collect(runs: SeedRuns) -> dict[int, dict[str, float]]:
    """The final metrics of every finished seed (:func:`final_metrics`), refusing seeds of different configs."""
    per_seed = {
        seed: final_metrics(json.loads(runs.metrics(seed).read_text()))
        for seed in runs.seeds
        if runs.metrics(seed).is_file()
    }
    if per_seed:
        check_same_config(runs, sorted(per_seed))
    return per_seed


def markdown_table(name: str, statistics: Mapping[str, Statistic], seeds: Sequence[int]) -> str:
    """A Markdown table: metric, mean ± std, n, one column per seed."""
    lines = [
        f"### {name}: {len(seeds)} seeds",
        "",
        "| metric | mean ± std | n | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|---|---|" + "---|" * len(seeds),
    ]
    for metric, stat in statistics.items():
        cells = [f"{stat.values[s]:.6g}" if s in stat.values else "-" for s in seeds]
        lines.append(f"| {metric} | {stat.mean:.6g} ± {stat.std:.2g} | {stat.n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_summary(runs: SeedRuns, summary: Mapping, statistics: Mapping[str, Statistic]) -> str:
    """Write ``<run_root>/<name>-seeds.json`` (``summary``) and ``-seeds.md`` (:func:`markdown_table` of the finished
    seeds' ``statistics``); returns the table."""
    json_path, md_path = runs.run_root / f"{runs.name}-seeds.json", runs.run_root / f"{runs.name}-seeds.md"
    table = markdown_table(runs.name, statistics, summary["seeds"])
    atomic_write_text(json_path, json.dumps(summary, indent=2) + "\n")
    atomic_write_text(md_path, table)
    log.info("%s: written %s and %s", runs.name, json_path, md_path)
    return table


def unfinished(
    runs: SeedRuns, failed: Mapping[int, SeedExit], missing: Sequence[int], finished: Sequence[int]
) -> SeedsUnfinished:
    """What stops a sweep whose ``missing`` seeds did not finish, in one line: each one's exit code and last error
    line, or no ``metrics.json``; and the ``finished`` seeds its summary covers."""

    def cause(seed: int) -> str:
        if seed not in failed:
            return f"seed {seed}: no {runs.metrics(seed)}"
        return f"seed {seed}: exit code {failed[seed].code}" + (f", {failed[seed].cause}" if failed[seed].cause else "")

    causes = "; ".join(cause(seed) for seed in missing)
    covered = f"the summary covers seeds {list(finished)}" if finished else "nothing was aggregated"
    return SeedsUnfinished(f"{runs.name}: seeds {list(missing)} did not finish ({causes}); {covered}")
