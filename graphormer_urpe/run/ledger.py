"""A run directory is a ledger: created once, used by one process at a time, appended to by every start; and what
every record carries (its parameter count), JSON written atomically."""

from __future__ import annotations

import atexit
import contextlib
import csv
import datetime
import fcntl
import io
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
from lightning_fabric.utilities.rank_zero import rank_zero_only
from pytorch_lightning.loggers import Logger

from graphormer_urpe.data.files import atomic_write_text
from graphormer_urpe.errors import InputError
from graphormer_urpe.run.checkpoints import LAST_CHECKPOINT

log = logging.getLogger("graphormer_urpe")

#: Held (``flock``) by the process working in the run directory, which writes its launch into it.
LOCK_FILE = ".lock"
#: Seconds the other processes of a launch wait for rank 0 to hold the run directory.
WRITER_TIMEOUT = 600.0
#: Seconds another launch must be seen holding the lock before the other processes stop.
FOREIGN_HOLDER_GRACE = 2.0
#: The resolved config of the latest segment.
CONFIG_FILE = "config.yaml"
#: What the run is, with the list of its segments.
RUN_RECORD = "run.json"
#: Every logged value of every segment.
METRICS_FILE = "metrics.csv"
#: The first columns of ``metrics.csv``; the metrics follow in alphabetical order.
LEADING_COLUMNS = ("segment", "step")


class RunDirError(InputError):
    """A run directory cannot be used as asked; the message says why and what to do instead."""


def _make_missing(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; returns those created, deepest first."""
    made = []
    for path in [*reversed(directory.parents), directory]:
        if not path.exists():
            with contextlib.suppress(FileExistsError):  # made by another process meanwhile
                path.mkdir()
                made.append(path)
    return made[::-1]


def create_timestamped_dir(run_root: Path, config_name: str, now: datetime.datetime | None = None) -> RunDirectory:
    """Create ``run_root/<config>-<YYYYmmdd-HHMMSS>`` (``now``: default the current time), or ``...-2`` when taken."""
    run_root = Path(run_root)
    parents = _make_missing(run_root)
    stamp = f"{config_name}-{(now or datetime.datetime.now()):%Y%m%d-%H%M%S}"
    copy = 1
    while True:
        path = run_root / (stamp if copy == 1 else f"{stamp}-{copy}")
        with contextlib.suppress(FileExistsError):
            path.mkdir()
            return RunDirectory(path, made=[path, *parents])
        copy += 1


@dataclass
class RunStart:
    """How one start uses its run directory: the ``checkpoint`` it resumes (None: step 0), ``earlier_segments``."""

    checkpoint: str | None
    earlier_segments: bool


class RunDirectory:
    """A run directory and this process's hold on it; ``made``: the directories this process created for it."""

    def __init__(self, path: Path, made: Sequence[Path] = ()) -> None:
        self.path = Path(path)
        self._made = list(made)
        self._lock: TextIO | None = None
        if self._made:
            atexit.register(self.release)  # whatever stops the process before the run starts in it

    @property
    def last_checkpoint(self) -> Path:
        """``checkpoints/last.ckpt``, what ``--ckpt_path last`` resumes."""
        return self.path / "checkpoints" / LAST_CHECKPOINT

    @property
    def holds_run(self) -> bool:
        """Whether the directory holds anything but its lock (which every process of a start sees alike)."""
        return self.path.is_dir() and any(entry.name != LOCK_FILE for entry in self.path.iterdir())

    def plan(self, ckpt_path: str | None) -> RunStart:
        """How a start with ``--ckpt_path ckpt_path`` may use this directory, decided from the files a run writes
        (alike in every process, before any of them writes), or :class:`RunDirError`."""
        holds_run = self.holds_run
        if ckpt_path is None:
            if holds_run:
                raise RunDirError(
                    f"{self.path} already exists and a new run never writes into an earlier run's "
                    "directory: extend or resume that run with --ckpt_path last, or give this one "
                    "another --run_name"
                )
            return RunStart(None, earlier_segments=False)
        if ckpt_path in ("last", "auto") and self.last_checkpoint.is_file():
            return RunStart(str(self.last_checkpoint), earlier_segments=True)
        if ckpt_path == "last":
            raise RunDirError(
                f"--ckpt_path last: there is no {self.last_checkpoint} to resume; " + self._why_no_checkpoint()
            )
        if ckpt_path == "auto":
            log.info("--ckpt_path auto: no %s, starting the run from step 0", self.last_checkpoint)
            return RunStart(None, earlier_segments=holds_run)
        own = Path(ckpt_path).resolve().parent == (self.path / "checkpoints").resolve()
        if holds_run and not own:
            raise RunDirError(
                f"{self.path} holds another run: resuming {ckpt_path} in it would mix two runs; "
                "give the run continued from that checkpoint a new --run_name"
            )
        return RunStart(ckpt_path, earlier_segments=holds_run)

    def take(self, writer: bool, launch: str | None = None) -> None:
        """Hold the directory for this start: the ``writer`` (global rank 0) creates and locks it, recording
        ``launch`` (the id every process shares under SLURM or torchrun), which the other processes wait for."""
        if writer:
            if not self.path.exists():
                self._create()
            self._acquire_lock(launch)
        elif launch is not None:
            self._wait_for_writer(launch)

    def _why_no_checkpoint(self) -> str:
        if self.path in self._made:  # a new directory of this start
            return (
                "without --run_name every start gets a new directory; pass the --run_name of the run to resume "
                "(or --ckpt_path auto to resume it if it has a checkpoint and start it otherwise)"
            )
        if not self.path.exists():
            return f"{self.path} does not exist (check --run_root and --run_name)"
        if not self.holds_run:
            return f"{self.path} holds no run (check --run_root and --run_name)"
        return (
            "the run stopped before writing its first checkpoint; start it again with --ckpt_path auto, or "
            "under another --run_name"
        )

    def _create(self) -> None:
        self._made = _make_missing(self.path.parent)
        atexit.register(self.release)
        try:
            self.path.mkdir()
        except FileExistsError:
            raise RunDirError(
                f"{self.path} was created by another process a moment ago: give this run another --run_name"
            ) from None
        self._made.insert(0, self.path)

    def _in_use(self) -> RunDirError:
        return RunDirError(
            f"{self.path} is in use by another process (it holds {self.path / LOCK_FILE}): wait until "
            "that run stops, or stop it first"
        )

    def _acquire_lock(self, launch: str | None) -> None:
        if self._lock is not None:
            return
        lock_path = self.path / LOCK_FILE
        handle = open(lock_path, "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise self._in_use() from None
        except OSError as error:  # e.g. Lustre mounted without -o flock
            log.warning(
                "cannot lock %s (%s): make sure no other process works in %s at the same time",
                lock_path,
                error,
                self.path,
            )
        handle.truncate(0)  # the holder's launch, for the other processes of the start
        handle.write(launch or f"pid {os.getpid()}")
        handle.flush()
        self._lock = handle

    def _wait_for_writer(self, launch: str, timeout: float = WRITER_TIMEOUT) -> None:
        """Wait until the writer of this launch holds the directory; stop as it does when another launch holds it."""
        lock_path = self.path / LOCK_FILE
        deadline, foreign_since = time.monotonic() + timeout, None
        while True:
            holder = lock_path.read_text().strip() if lock_path.is_file() else ""
            if holder == launch:
                return
            if holder and is_locked(lock_path):  # another launch's, or ours a moment before it writes its launch
                foreign_since = foreign_since if foreign_since is not None else time.monotonic()
                if time.monotonic() - foreign_since > FOREIGN_HOLDER_GRACE:
                    raise self._in_use()
            else:
                foreign_since = None
            if time.monotonic() > deadline:
                raise RunDirError(
                    f"{self.path}: the process of global rank 0 did not take the run directory within "
                    f"{timeout:.0f} s; see its log"
                )
            time.sleep(0.1)

    def release(self) -> None:
        """Let the directory go; remove it (and the parents made for it) if this process made it and left it unused."""
        self._let_go(unused=self.path.is_dir() and {p.name for p in self.path.iterdir()} <= {LOCK_FILE})

    def discard(self) -> None:
        """Let the directory go after a start that failed: if this process made it and no checkpoint was written
        in it, remove it with what the start wrote (``config.yaml``, ``run.json``, ``metrics.csv``), so that its
        name can start a run again. A directory that existed before this start is never touched."""
        self._let_go(unused=not any((self.path / "checkpoints").glob("*.ckpt")))

    def _let_go(self, unused: bool) -> None:
        parents = [directory for directory in self._made if directory != self.path]
        if self.path in self._made:  # created by this process
            if unused and self.path.is_dir():
                if self._lock is not None:
                    self._lock.close()
                    self._lock = None
                shutil.rmtree(self.path)
            else:  # the run started in it: it stays, and so do its parents
                parents = []
        for directory in parents:
            try:
                directory.rmdir()
            except OSError:  # not empty (holds other runs), or gone
                break
        self._made = []
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def is_locked(path: Path) -> bool:
    """Whether some process holds the lock on ``path``, a run's ``.lock`` (False when the file is gone or the file
    system cannot lock). ``graphormer-urpe sweep`` asks it to tell a seed that another process is running."""
    try:
        handle = open(path)
    except FileNotFoundError:  # the holder finished and removed it since the caller looked
        return False
    with handle:  # closing it drops the shared lock taken to test
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:  # the file system cannot lock
            pass
    return False


def read_segments(run_dir: Path) -> list[dict[str, Any]]:
    """The segments ``run.json`` lists (none for a new run directory, or a run recorded before segments)."""
    record_path = Path(run_dir) / RUN_RECORD
    return list(json.loads(record_path.read_text()).get("segments", [])) if record_path.is_file() else []


def start_segment(run_dir: Path, record: Mapping[str, Any], segment: Mapping[str, Any], config_yaml: str) -> int:
    """Append ``segment`` to ``run.json`` (``record`` with every segment), write ``config.yaml``; returns its number."""
    segments = read_segments(run_dir)
    number = len(segments)
    atomic_write_text(Path(run_dir) / CONFIG_FILE, config_yaml)
    write_json(Path(run_dir) / RUN_RECORD, {**record, "segments": [*segments, {"segment": number, **segment}]})
    return number


class MetricsLog(Logger):
    """``metrics.csv``: rows appended, each with its segment and step; a new metric rewrites it under a wider header."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self.segment: int | None = None
        self._columns: list[str] | None = None

    name = ""  # Lightning's logger name and version: none, the run directory names the run
    version = ""

    @property
    def save_dir(self) -> str:
        return str(self.run_dir)

    def open(self, segment: int) -> None:
        """Append the rows logged from now on under ``segment``."""
        self.segment = segment

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Nothing: ``config.yaml`` and ``run.json`` record the run."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if self.segment is None:
            raise RuntimeError("metrics logged before the run's segment was opened (RunRecord.on_train_start)")
        values = {name: value.item() if isinstance(value, torch.Tensor) else value for name, value in metrics.items()}
        row = {"segment": self.segment, "step": "" if step is None else step, **values}
        columns = self._header()
        if not set(row) <= set(columns):
            columns = self._extend_header(set(row) - set(columns))
        buffer = io.StringIO()
        csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n").writerow(row)
        with open(self.path, "a", newline="") as handle:
            handle.write(buffer.getvalue())

    def _header(self) -> list[str]:
        if self._columns is None:
            self._columns = list(LEADING_COLUMNS)
            if self.path.is_file() and self.path.stat().st_size:
                with open(self.path, "rb+") as handle:
                    handle.seek(-1, os.SEEK_END)
                    if handle.read(1) != b"\n":  # the last row of a process killed while writing it: end it
                        handle.write(b"\n")
                with open(self.path, newline="") as handle:
                    self._columns = next(csv.reader(handle))
        return self._columns

    def _extend_header(self, names: set[str]) -> list[str]:
        columns = [*LEADING_COLUMNS, *sorted((set(self._header()) | names) - set(LEADING_COLUMNS))]
        rows: list[dict[str, str]] = []
        if self.path.is_file():
            with open(self.path, newline="") as handle:
                rows = list(csv.DictReader(handle))
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.path, buffer.getvalue())
        self._columns = columns
        return columns


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The run's learning curve: every segment's rows, less those of earlier segments that a later one logged again
    (from the step it resumed at, or the same step and metrics); rows of runs before segments are segment -1."""
    with open(Path(run_dir) / METRICS_FILE, newline="") as handle:
        rows = [
            {"segment": -1} | {name: _number(name, text) for name, text in row.items() if text not in ("", None)}
            for row in csv.DictReader(handle)
        ]
    starts = {int(s["segment"]): int(s["start_step"]) for s in read_segments(run_dir)}
    kept: list[dict[str, float]] = []
    cutoff = math.inf  # the earliest start of any later segment
    logged_later: set[tuple[int, frozenset[str]]] = set()
    for segment in sorted({row["segment"] for row in rows}, reverse=True):
        own = [row for row in rows if row["segment"] == segment]
        kept = [row for row in own if row["step"] < cutoff and _logged(row) not in logged_later] + kept
        cutoff = min(cutoff, starts.get(segment, math.inf))
        logged_later |= {_logged(row) for row in own}
    return kept


def _logged(row: Mapping[str, float]) -> tuple[int, frozenset[str]]:
    return int(row["step"]), frozenset(name for name in row if name not in ("segment", "step", "epoch"))


def _number(name: str, text: str) -> float | int:
    return int(float(text)) if name in ("segment", "step", "epoch") else float(text)


# ----------------------------------------------------------------------------- what every record carries
# Its parameter count, and JSON written atomically (its commit and package versions: run/provenance.py).


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` as indented JSON, atomically (readers see the old file or the new one); a NaN or infinite
    number, a metric that is undefined (ROC-AUC of a label with one class), is written as ``null``: JSON has no NaN."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(finite_or_null(payload), indent=2, default=str, allow_nan=False) + "\n")


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float in it, at any depth of dicts and lists, replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value
