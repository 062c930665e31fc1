"""Callbacks of every run: exact resume, preemption, non-finite losses, plots (docs/running.md)."""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.callbacks import (
    Callback,
    Checkpoint,
    EarlyStopping,
    ModelCheckpoint,
    TQDMProgressBar,
    WeightAveraging,
)
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.trainer.states import TrainerFn

from graphormer_urpe.data.loaders import gather_objects
from graphormer_urpe.errors import NonFiniteLoss
from graphormer_urpe.run.checkpoints import LAST_CHECKPOINT
from graphormer_urpe.run.plots import has_relative_encodings, relative_encoding_figure

log = logging.getLogger("graphormer_urpe")

#: Checkpoint key of whether training had decided to stop when the checkpoint was written (:class:`StopDecision`).
SHOULD_STOP_KEY = "graphormer_should_stop"


def rng_state() -> dict[str, Any]:
    """This process's torch, CUDA, numpy and Python RNG states, in ``weights_only``-loadable types."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [name, keys.tolist(), position, has_gauss, cached],
        "python": [version, list(internal), gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a state from :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class RNGState(Callback):
    """Saves every process's RNG state in checkpoints; restores it at ``on_train_start``, after set-up's draws."""

    def __init__(self) -> None:
        self.pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        states = gather_objects(rng_state())
        return {"world_size": len(states), "states": states}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = state_dict

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.pending is None:
            return
        states = self.pending["states"]
        if len(states) != trainer.world_size:
            log.warning(
                "the checkpoint holds RNG states of %d processes, this run has %d: dropout masks will "
                "differ from the original run",
                len(states),
                trainer.world_size,
            )
        set_rng_state(states[trainer.global_rank % len(states)])
        self.pending = None


def follow_run_directory(state: dict[str, Any], dirpath: str) -> dict[str, Any]:
    """A ``ModelCheckpoint`` state saved elsewhere, each path moved to ``dirpath`` if it holds the file, or dropped."""
    saved = state.get("dirpath")

    def here(path: object) -> str:
        if not isinstance(path, str) or not path or Path(path).parent != Path(saved):
            return ""
        moved = Path(dirpath) / Path(path).name
        return str(moved) if moved.is_file() else ""

    best, kth = here(state.get("best_model_path")), here(state.get("kth_best_model_path"))
    followed = {
        **state,
        "dirpath": dirpath,
        "best_model_path": best,
        "kth_best_model_path": kth,
        "best_k_models": {here(path): score for path, score in state.get("best_k_models", {}).items() if here(path)},
        "last_model_path": here(state.get("last_model_path")),
    }
    if not best:
        followed["best_model_score"] = None
    if not kth:
        followed.pop("kth_value", None)  # the callback keeps its initial one
    return followed


#: What Lightning runs after a training batch before it fetches the next: the epoch's end (its validation, if due,
#: and every callback's ``on_train_epoch_end``), or a validation within the epoch.
AfterBatch = Literal["epoch end", "validation"]
#: How a log line names what a checkpoint waits for.
WAITED_FOR: dict[AfterBatch, str] = {
    "epoch end": "end of its epoch (validation included)",
    "validation": "validation",
}


def work_after_batch(trainer: pl.Trainer) -> AfterBatch | None:
    """What Lightning runs after the training batch that just ended before the next batch (None: nothing).

    The end of an epoch counts in epoch mode only: in step mode (``trainer.max_steps``) Lightning resumes a checkpoint
    written after an epoch's last batch exactly, and one written at the epoch's end not (it replays the epoch's end
    into the finished epoch); nothing of a run acts at the end of an epoch in step mode."""
    fit_loop = trainer.fit_loop
    epoch_loop = fit_loop.epoch_loop
    if epoch_loop._num_ready_batches_reached() and not fit_loop._iteration_based_training():
        return "epoch end"
    if epoch_loop._should_check_val_fx(fit_loop._data_fetcher) and not epoch_loop.val_loop.skip:
        return "validation"
    return None


class ResumableSave(Checkpoint):
    """A checkpoint callback whose saves after a training batch are ones a resume continues exactly: at once, or, when
    Lightning validates or ends the epoch after that batch (:func:`work_after_batch`), once that is done.

    Lightning resumes a checkpoint written right after a batch as if what follows the batch had run: the resumed run
    skips the validation due there (nothing logged at that step; the best checkpoint and early stopping never see it)
    and, in epoch mode, the epoch's end (every ``on_train_epoch_end``: early stopping's check, the best checkpoint).
    Written once they are done, as Lightning's own checkpoints after a validation or an epoch are, the checkpoint holds
    their results. A :class:`Checkpoint`: Lightning calls the checkpoint callbacks after all others, in their order, so
    that what it saves holds early stopping's and the best checkpoint's decisions."""

    _waiting_for: AfterBatch | None = None

    def save(self, trainer: pl.Trainer) -> None:
        """Write the checkpoint (the state is complete)."""
        raise NotImplementedError

    def save_when_resumable(self, trainer: pl.Trainer) -> None:
        """From ``on_train_batch_end``: :meth:`save` now, or after the validation or the epoch's end that follows."""
        self._waiting_for = work_after_batch(trainer)
        if self._waiting_for is None:
            self.save(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if self._waiting_for == "validation":
            self._waiting_for = None
            self.save(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._waiting_for == "epoch end":
            self._waiting_for = None
            self.save(trainer)


class LastCheckpoint(ResumableSave, ModelCheckpoint):
    """``last.ckpt`` every ``every_n_train_steps`` optimiser steps (0: never; after the validation or the epoch's end
    that follows the step, :class:`ResumableSave`) and always at the end of training."""

    def __init__(self, dirpath: Path, every_n_train_steps: int) -> None:
        super().__init__(
            dirpath=dirpath,
            filename=Path(LAST_CHECKPOINT).stem,
            save_top_k=0,
            save_last=True,
            every_n_train_steps=every_n_train_steps,
            enable_version_counter=False,
        )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        every = self._every_n_train_steps
        if every and not trainer.global_step % every and not self._should_skip_saving_checkpoint(trainer):
            self.save_when_resumable(trainer)

    def save(self, trainer: pl.Trainer) -> None:
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's save_last skips the end of training once any step wrote last.ckpt; here last.ckpt always
        # holds the final state, so --ckpt_path last can extend a finished run
        if self._last_global_step_saved != trainer.global_step:
            self.save(trainer)

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Before any callback loads its state: every checkpoint callback's paths follow this run directory."""
        states = checkpoint.get("callbacks") or {}
        for key, state in states.items():
            saved = state.get("dirpath") if isinstance(state, dict) and "best_model_path" in state else None
            if saved is not None and saved != self.dirpath:
                states[key] = follow_run_directory(state, self.dirpath)


class LoggedStep(Callback):
    """Keeps the step Lightning logs under equal to the optimiser step; runs before ``LearningRateMonitor`` logs."""

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Lightning logs under its count of batches that stepped the optimiser, which is one too many after a
        # resume from the end-of-training last.ckpt at a validation step (why, and the test: docs/exactness.md)
        epoch_loop = trainer.fit_loop.epoch_loop
        if epoch_loop._batches_that_stepped != trainer.global_step:
            epoch_loop._batches_that_stepped = trainer.global_step


class TrainingDataPosition(Callback):
    """Continues a resumed run's training data at the batch after its checkpoint's, however early Lightning built the
    training loader.

    In epoch mode (``trainer.max_epochs``) the task's ``configure_optimizers`` asks for
    ``trainer.estimated_stepping_batches`` (the schedule's length), for which Lightning builds the training loader,
    and starts iterating it, before it reads the checkpoint. Its set-up after the restore then keeps that loader and
    never loads the saved position (Lightning issue 20550): the resumed epoch would start again at its first batch and
    train on batches it had trained on, skipping as many others. Here the pending position is loaded when training
    starts and the loader iterated anew, as Lightning's set-up does when it builds the loader after the restore (in
    step mode, ``trainer.max_steps``, it does: the schedule's length needs no loader)."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        fit_loop = trainer.fit_loop
        if not (fit_loop.restarting and fit_loop._combined_loader_states_to_load and fit_loop._data_fetcher):
            # a new run, a resume whose set-up loaded the position, or one at an epoch's end (nothing to skip)
            return
        fit_loop._load_combined_loader_states()
        # a new iterator: the one made before the restore started at the epoch's start
        iter(fit_loop._data_fetcher)


class TaskEarlyStopping(EarlyStopping):
    """Lightning's ``EarlyStopping`` on the metric that selects the task's best checkpoint (its ``monitor``:
    ``val/mae`` for regression, ``val/auroc`` for binary labels, ``val/accuracy`` for classes), so that one config
    (``configs/small_molecules.yaml``) stops any kind of target; the other arguments are ``EarlyStopping``'s.

    Args:
        patience: validations without improvement before training stops.
        min_delta: the least change that counts as an improvement (in the metric's units, either direction).
    """

    def __init__(self, patience: int = 3, min_delta: float = 0.0, **kwargs: Any) -> None:
        super().__init__(monitor="", patience=patience, min_delta=abs(min_delta), **kwargs)
        self.least_change = abs(min_delta)
        self.validated = False  # in this process: a run ended by max_steps before it validates has nothing to stop on

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.validated = True
        super().on_validation_end(trainer, pl_module)

    def _validate_condition_metric(self, logs: dict[str, torch.Tensor]) -> bool:
        """Lightning's check that the monitor was logged, except before any validation of this process: a run that
        ``max_steps`` ends before its first validation (it said so when training started) ends without a word from
        here, instead of failing after all its steps."""
        if not self.validated and self.monitor not in logs:
            return False
        return super()._validate_condition_metric(logs)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Take the task's monitor, before a resumed checkpoint restores this callback's state (keyed by it)."""
        self.monitor, self.mode = pl_module.monitor
        self.min_delta = self.least_change if self.monitor_op == torch.gt else -self.least_change
        self.best_score = torch.tensor(torch.inf if self.mode == "min" else -torch.inf)
        super().setup(trainer, pl_module, stage)


class Preempted(Exception):
    """Training stopped on ``signal_name`` (``SIGINT`` for Ctrl-C) after writing ``checkpoint``, ``last.ckpt``."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path, requeued: bool) -> None:
        self.signal_name = signal_name
        received = "Ctrl-C (SIGINT)" if signal_name == "SIGINT" else signal_name
        super().__init__(
            f"{received} received: stopped after step {step} and saved {checkpoint}"
            + ("; SLURM job requeued" if requeued else "")
            + f"; continue with --run_name {checkpoint.parent.parent.name} --ckpt_path last"
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a process killed by it would report."""
        return 128 + int(getattr(signal, self.signal_name))


class PreemptionCheckpoint(ResumableSave):
    """On one of ``signals`` or a first Ctrl-C, finish the optimiser step on every process (and the validation or the
    epoch's end that follows it, :class:`ResumableSave`), save ``last.ckpt``, requeue the SLURM job after one of
    ``requeue_signals``, and stop; a second Ctrl-C stops at once."""

    def __init__(
        self,
        checkpoint_dir: Path,
        signals: tuple[str, ...] = ("SIGTERM", "SIGUSR1"),
        requeue_signals: tuple[str, ...] = ("SIGUSR1",),
    ) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)
        self.signals = signals
        self.requeue_signals = requeue_signals
        self.received: str | None = None
        self._previous: dict[int, Any] = {}
        self._step_at_batch_start = 0
        self._trainer: pl.Trainer | None = None
        self._host_group: dist.ProcessGroup | None = None
        self._stop: tuple[str, bool] | None = None  # the signal every process stops on, and whether to requeue

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.received == "SIGINT":
            raise KeyboardInterrupt  # the second Ctrl-C: stop at once
        self.received = signal.Signals(signum).name
        if signum == signal.SIGINT:
            log.warning(
                "Ctrl-C: finishing optimiser step %d, then writing %s (Ctrl-C again to stop at once)",
                (self._trainer.global_step if self._trainer is not None else 0) + 1,
                self.checkpoint_dir / LAST_CHECKPOINT,
            )

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._trainer = trainer
        # installed after Lightning's own handlers (registered when fitting starts), replacing them
        for name in {*self.signals, "SIGINT"}:
            signum = getattr(signal, name)
            self._previous[signum] = signal.signal(signum, self._handle)
        if trainer.world_size > 1 and self._host_group is None:
            # the processes agree through the host (gloo): a collective on the GPU's stream would make every
            # process wait for its device at every step
            self._host_group = dist.new_group(backend="gloo")

    def _agreed(self, trainer: pl.Trainer) -> tuple[bool, bool]:
        """Whether any process received a signal, and whether any received a requeue signal."""
        flags = torch.tensor([self.received is not None, self.received in self.requeue_signals], dtype=torch.int32)
        if self._host_group is not None:
            dist.all_reduce(flags, group=self._host_group)
        stop, requeue = (flags > 0).tolist()
        return stop, requeue

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # before Lightning's teardown: a handler left behind would outlive the run (and its forked workers)
        for signum, handler in self._previous.items():
            if signum == signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
                continue  # Lightning ignores further Ctrl-C while it shuts down after a KeyboardInterrupt
            signal.signal(signum, handler)
        self._previous = {}

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.on_train_end(trainer, pl_module)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == self._step_at_batch_start or self._stop is not None:
            return  # accumulating gradients (only stop where the state is complete), or stopping already
        stop, requeue = self._agreed(trainer)
        if not stop:
            return
        self._stop = (self.received or ("SIGUSR1" if requeue else "SIGTERM"), requeue)  # ranks that got none
        self.save_when_resumable(trainer)
        if self._waiting_for is not None and trainer.is_global_zero:
            log.warning(
                "%s: finishing the %s after step %d, then writing %s",
                self._stop[0],
                WAITED_FOR[self._waiting_for],
                trainer.global_step,
                self.checkpoint_dir / LAST_CHECKPOINT,
            )

    def save(self, trainer: pl.Trainer) -> None:
        """Save ``last.ckpt`` on every process (rank 0 writes), requeue if asked, and stop (:class:`Preempted`)."""
        assert self._stop is not None
        signal_name, requeue = self._stop
        path = self.checkpoint_dir / LAST_CHECKPOINT
        trainer.save_checkpoint(path, weights_only=False)
        array = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        job = "_".join(array) if all(array) else os.environ.get("SLURM_JOB_ID")  # None outside SLURM
        requeued = bool(requeue and job)
        if requeued and trainer.is_global_zero:
            log.info("requeueing SLURM job %s", job)
            subprocess.run(["scontrol", "requeue", job], check=False, timeout=60)
        raise Preempted(signal_name, trainer.global_step, path, requeued)


class StopDecision(Callback):
    """Keeps a decision to stop training (early stopping's) across a resume. Lightning saves early stopping's counters
    but not ``trainer.should_stop``: a run resumed from a checkpoint written after the decision (``last.ckpt`` at the
    end of training, or on a signal at that epoch's end) would train on."""

    def __init__(self) -> None:
        self.pending = False

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[SHOULD_STOP_KEY] = trainer.should_stop

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        self.pending = bool(checkpoint.get(SHOULD_STOP_KEY, False))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.pending:
            log.info("resumed after training had decided to stop (early stopping): nothing is left to train")
            trainer.should_stop = True
            self.pending = False


class NonFiniteLossGuard(Callback):
    """Stops every process at a NaN/inf training loss, naming the step, its graphs and the last good checkpoint.

    On the CPU every loss is read before its backward pass, and the run stops there. On a GPU, reading a loss makes
    the host wait for the device, every step; so the losses stay on the device and are read together every
    ``check_every`` optimiser steps (default: ``trainer.log_every_n_steps``), before any checkpoint is written and at
    the end of training. The run then stops within that many steps of the first bad loss, and no checkpoint ever
    holds weights that a non-finite loss has reached.

    Args:
        check_every: optimiser steps between two reads of the losses; None: 1 on the CPU, else the log interval.
    """

    #: Devices where reading a value costs no wait, so every loss is checked before its backward pass.
    EVERY_STEP_DEVICES = ("cpu",)

    def __init__(self, check_every: int | None = None) -> None:
        self.check_every = check_every
        self._batch: Any = None
        self._batch_idx = 0
        #: Losses not read yet: (optimiser step, epoch, batch, the loss on its device, the batch's graph indices).
        self._pending: list[tuple[int, int, int, torch.Tensor, torch.Tensor | None]] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.check_every is None:
            every_step = pl_module.device.type in self.EVERY_STEP_DEVICES
            self.check_every = 1 if every_step else max(1, trainer.log_every_n_steps)
        self._pending = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch, self._batch_idx = batch, batch_idx

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        index = getattr(self._batch, "index", None)
        self._pending.append((trainer.global_step + 1, trainer.current_epoch, self._batch_idx, loss.detach(), index))
        if self.check_every == 1:
            self.check(trainer)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._pending and trainer.global_step % self.check_every == 0:
            self.check(trainer)

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.check(trainer)  # raising here writes no file

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check(trainer)

    def check(self, trainer: pl.Trainer) -> None:
        """Read the pending losses (one wait for the device); raise :class:`NonFiniteLoss` on every process if any
        process had a non-finite one, naming the first of each."""
        pending, self._pending = self._pending, []
        finite = torch.isfinite(torch.stack([loss.float() for _, _, _, loss, _ in pending])).tolist() if pending else []
        first_bad = next((entry for entry, ok in zip(pending, finite) if not ok), None)
        # every process learns whether any loss is bad, so all stop together: one process raising alone would
        # leave the others waiting in the gradient all-reduce
        if not trainer.strategy.reduce_boolean_decision(first_bad is not None, all=False):
            return
        mine = None
        if first_bad is not None:
            step, epoch, batch_idx, loss, index = first_bad
            # -1: padding
            graphs = [i for i in index.tolist() if i >= 0] if isinstance(index, torch.Tensor) else None
            mine = (trainer.global_rank, step, epoch, batch_idx, float(loss), graphs)
        reports = sorted((r for r in gather_objects(mine) if r is not None), key=lambda r: r[1])
        _, step, epoch, batch_idx, _, _ = reports[0]
        graphs = "; ".join(
            (f"process {rank}: " if trainer.world_size > 1 else "") + f"loss {value}, graphs {indices}"
            for rank, _, _, _, value, indices in reports
        )
        later = trainer.global_step - step if self.check_every > 1 else 0  # optimiser steps taken since
        raise NonFiniteLoss(
            f"non-finite training loss at optimiser step {step} (epoch {epoch}, batch {batch_idx}): {graphs} (dataset "
            "indices, GraphBatch.index)"
            + (
                f"; found {later} step(s) later, losses being read every {self.check_every} steps on this device"
                if later
                else ""
            )
            + f". Last good checkpoint: {last_good_checkpoint(trainer) or 'none written yet'}. Resume from it with "
            "--ckpt_path, e.g. with a lower --model.init_args.optim.lr or --trainer.gradient_clip_val, and inspect "
            "these graphs."
        )


class StepProgressBar(TQDMProgressBar):
    """Lightning's progress bar, redrawn at most once every ``refresh_seconds`` of wall time, with the training
    step's logged values (``train/loss`` ...). The task logs them without ``prog_bar`` because Lightning reads every
    progress-bar value from the device after every step, which makes the host wait for the device each time; this bar
    reads them only when it redraws.

    Args:
        refresh_seconds: least wall time between two redraws (and reads of the values).
    """

    def __init__(self, refresh_seconds: float = 1.0) -> None:
        super().__init__(refresh_rate=1)
        self.refresh_seconds = refresh_seconds
        self._drawn_at = -math.inf

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        if getattr(trainer.fit_loop, "restarted_mid_epoch", False):  # Lightning >= 2.5 (2.4 starts every epoch)
            # Lightning calls no on_train_epoch_start for an epoch resumed midway: the bar would have no total and no
            # epoch, and its rate would count the batches done before the resume as done in this process's seconds
            self.on_train_epoch_start(trainer, pl_module)
            # the epoch's batches trained before the resume (the batch_idx of the next one): the rate counts only
            # the batches of this process
            done = trainer.fit_loop.epoch_loop.batch_progress.current.ready
            self.train_progress_bar.n = self.train_progress_bar.initial = done

    def _should_update(self, current: int, total: int) -> bool:
        now = time.monotonic()
        if not self.is_enabled or (current != total and now - self._drawn_at < self.refresh_seconds):
            return False
        self._drawn_at = now
        return True

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, int | str | float]:
        metrics = super().get_metrics(trainer, pl_module)
        for name, value in trainer.callback_metrics.items():
            if name.startswith("train/"):
                metrics[name] = float(value)
        return metrics


def last_good_checkpoint(trainer: pl.Trainer) -> str | None:
    """The most recently written checkpoint of the run (or the one it resumed from)."""
    candidates = [
        trainer.ckpt_path,
        *(
            path
            for callback in trainer.checkpoint_callbacks
            if isinstance(callback, ModelCheckpoint)
            for path in (callback.last_model_path, callback.best_model_path)
        ),
    ]
    existing = {c for c in candidates if c and Path(c).is_file()}
    return max(existing, key=lambda c: Path(c).stat().st_mtime) if existing else None


def remove_weight_averaging(trainer: pl.Trainer) -> None:
    """Remove Lightning's weight-averaging callbacks (:class:`WeightAveraging`, e.g. ``EMAWeightAveraging``) from a
    trainer that evaluates a checkpoint: after a run's fit, and in ``graphormer-urpe evaluate``.

    A checkpoint written while averaging holds the *averaged* weights: validation chose it on them and they are
    what it gives to any reader. Left in place, the callback would load the weights before averaging (its
    ``current_model_state``) when ``trainer.test`` restores that checkpoint after the fit, and the run's test figure
    would come from other weights than the checkpoint's; in a trainer that never fits it only warns."""
    trainer.callbacks = [callback for callback in trainer.callbacks if not isinstance(callback, WeightAveraging)]


class RelationTablePlots(Callback):
    """Every ``every_n_validations`` validations (0: never), draw the learned B and C to ``plot_dir`` and W&B."""

    def __init__(self, plot_dir: Path, every_n_validations: int = 5) -> None:
        self.plot_dir = Path(plot_dir)
        self.every_n_validations = every_n_validations
        self.validations = 0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking or self.every_n_validations <= 0:
            return
        self.validations += 1
        model = getattr(pl_module, "model", None)
        if (
            self.validations % self.every_n_validations
            or not has_relative_encodings(model)
            or not trainer.is_global_zero
        ):
            return
        path = self.plot_dir / f"relation_tables-step{trainer.global_step:07d}.png"
        self.plot_dir.mkdir(parents=True, exist_ok=True)
        relative_encoding_figure(model, title=f"step {trainer.global_step}").savefig(path, dpi=100)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image(key="relation_tables", images=[str(path)], step=trainer.global_step)
