"""Run-operation callbacks shared by every task: exact resume, preemption, non-finite losses, plots.

* :class:`LastCheckpoint` writes ``last.ckpt`` every N steps and at the end of training.
* :class:`LoggedStep` keeps logged steps equal to optimiser steps after an extension.
* :class:`RNGState` puts every process's random-number-generator state into each checkpoint and
  restores it before the first batch after a resume (Lightning saves model, optimiser, scheduler,
  loop counters and, through :class:`~graphormer_urpe.data.loaders.ResumableLoader`, the data order).
* :class:`PreemptionCheckpoint` turns SIGTERM / SIGUSR1 into "finish this optimiser step, write
  ``last.ckpt``, stop" on all processes at the same step, and requeues SLURM jobs.
* :class:`NonFiniteLossGuard` stops the run at the first NaN/inf loss, naming the step, the graphs
  of the batch and the last good checkpoint.
* :class:`RelationTablePlots` draws the learned B and C tables every N validations.
"""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import subprocess
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.trainer.states import TrainerFn

from graphormer_urpe.errors import NonFiniteLoss
from graphormer_urpe.run.checkpoints import LAST_CHECKPOINT
from graphormer_urpe.run.plots import has_relative_encodings, relative_encoding_figure

log = logging.getLogger("graphormer_urpe")


def _distributed(trainer: pl.Trainer) -> bool:
    return trainer.world_size > 1 and dist.is_available() and dist.is_initialized()


def _gather(trainer: pl.Trainer, value: Any) -> list[Any]:
    """``value`` of every process, in rank order (a collective: every process must call it)."""
    if not _distributed(trainer):
        return [value]
    gathered: list[Any] = [None] * trainer.world_size
    dist.all_gather_object(gathered, value)
    return gathered


# ----------------------------------------------------------------------------- exact resume


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
    """Saves the RNG state of every process in checkpoints and restores it on resume.

    Together with the model, optimiser, scheduler, loop counters and data position that Lightning
    already restores, a CPU run interrupted at step k and resumed reaches bitwise the same weights
    as an uninterrupted run. The state is applied at ``on_train_start``, after everything that
    set-up draws, so the first resumed batch sees the same dropout masks as in the original run.
    """

    def __init__(self) -> None:
        self.pending: dict[str, Any] | None = None
        self._trainer: pl.Trainer | None = None

    def state_dict(self) -> dict[str, Any]:
        trainer = self._trainer
        states = _gather(trainer, rng_state()) if trainer is not None else [rng_state()]
        return {"world_size": len(states), "states": states}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = state_dict

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.pending is None:
            return
        states = self.pending["states"]
        if len(states) != trainer.world_size:
            log.warning("the checkpoint holds RNG states of %d processes, this run has %d: dropout masks will "
                        "differ from the original run", len(states), trainer.world_size)
        set_rng_state(states[trainer.global_rank % len(states)])
        self.pending = None


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt`` every ``every_n_train_steps`` optimiser steps and at the end of training.

    Lightning's ``save_last`` skips the end of training once any step wrote ``last.ckpt``; here
    ``last.ckpt`` always holds the final state, so ``--ckpt_path last`` can extend a finished run.

    Args:
        dirpath: the checkpoint directory.
        every_n_train_steps: interval in optimiser steps (0: only at the end and on signals).
    """

    def __init__(self, dirpath: Path, every_n_train_steps: int) -> None:
        super().__init__(dirpath=dirpath, filename=Path(LAST_CHECKPOINT).stem, save_top_k=0, save_last=True,
                         every_n_train_steps=every_n_train_steps, enable_version_counter=False)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


class LoggedStep(Callback):
    """Keeps the step under which Lightning logs equal to the optimiser step before every batch.

    Lightning logs under its count of batches that stepped the optimiser. Resumed from the
    end-of-training ``last.ckpt`` at a validation step (an extension with ``--ckpt_path last``), it
    skips the validation it already ran but still counts a batch, so every row the extension logs
    would be one step late and the step before it missing from the learning curve. Must run before
    the callbacks that log at the start of a batch (``LearningRateMonitor``).
    """

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        epoch_loop = trainer.fit_loop.epoch_loop
        if epoch_loop._batches_that_stepped != trainer.global_step:
            epoch_loop._batches_that_stepped = trainer.global_step


# ----------------------------------------------------------------------------- preemption


class Preempted(Exception):
    """Training stopped on a signal after writing ``last.ckpt``.

    Args:
        signal_name: the signal (``SIGTERM``, ``SIGUSR1``).
        step: optimiser steps done.
        checkpoint: the checkpoint written.
        requeued: whether the SLURM job was requeued.
    """

    def __init__(self, signal_name: str, step: int, checkpoint: Path, requeued: bool) -> None:
        self.signal_name, self.step, self.checkpoint, self.requeued = signal_name, step, checkpoint, requeued
        super().__init__(
            f"{signal_name} received: stopped after step {step} and saved {checkpoint}"
            + ("; SLURM job requeued" if requeued else "")
            + "; continue with --ckpt_path last (same --run_name)"
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a process killed by it would report."""
        return 128 + int(getattr(signal, self.signal_name))


def slurm_job_id() -> str | None:
    """This SLURM job (``<array job>_<task>`` for arrays), or None outside SLURM."""
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


class PreemptionCheckpoint(Callback):
    """On a signal, finish the optimiser step, save ``last.ckpt``, requeue if asked, and stop.

    The handler only sets a flag. After every optimiser step the flags of all processes are summed
    (one tiny all-reduce), so every process saves and stops at the same step, whichever of them got
    the signal. Lightning's own SLURM auto-requeue saves from inside the signal handler, in the
    middle of a step; the CLI turns it off in favour of this callback.

    Args:
        checkpoint_dir: directory of ``last.ckpt``.
        signals: names of the signals to handle.
        requeue_signals: signals after which a SLURM job is requeued (``scontrol requeue``): the
            warning signal of ``#SBATCH --signal=USR1@120`` before the time limit. After SIGTERM
            (preemption, scancel) SLURM decides itself.
    """

    def __init__(self, checkpoint_dir: Path, signals: tuple[str, ...] = ("SIGTERM", "SIGUSR1"),
                 requeue_signals: tuple[str, ...] = ("SIGUSR1",)) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)
        self.signals = tuple(signals)
        self.requeue_signals = tuple(requeue_signals)
        self.received: str | None = None
        self._previous: dict[int, Any] = {}
        self._step_at_batch_start = 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # installed after Lightning's own handlers (registered when fitting starts), replacing them
        for name in self.signals:
            signum = getattr(signal, name)
            self._previous[signum] = signal.signal(signum, self._handle)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # before Lightning restores the process's original handlers (its teardown runs before the
        # callbacks' ``teardown``): a handler left behind would outlive the run, and forked workers
        # that inherit it could no longer be terminated by SIGTERM
        self._restore_handlers()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore_handlers()

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.global_step == self._step_at_batch_start:
            return  # accumulating gradients: only stop where the state is complete
        flags = torch.tensor([self.received is not None, self.received in self.requeue_signals],
                             dtype=torch.float32, device=pl_module.device)
        stop, requeue = (trainer.strategy.reduce(flags, reduce_op="sum") > 0).tolist()
        if not stop:
            return
        path = self.checkpoint_dir / LAST_CHECKPOINT
        trainer.save_checkpoint(path)  # every process takes part; rank 0 writes
        signal_name = self.received or ("SIGUSR1" if requeue else "SIGTERM")  # ranks that got none
        job = slurm_job_id()
        requeued = bool(requeue and job)
        if requeued and trainer.is_global_zero:
            log.info("requeueing SLURM job %s", job)
            subprocess.run(["scontrol", "requeue", job], check=False, timeout=60)
        raise Preempted(signal_name, trainer.global_step, path, requeued)


# ----------------------------------------------------------------------------- non-finite losses


class NonFiniteLossGuard(Callback):
    """Stops training before the first backward pass of a NaN/inf loss.

    Every process checks its loss; one all-reduce tells all of them, so they stop together (a lone
    process raising would leave the others waiting forever in the gradient all-reduce). The error
    names the step, the epoch and batch, the dataset indices of the batch's graphs on every
    process with a bad loss (``batch.index``) and the most recent checkpoint to resume from.
    """

    def __init__(self) -> None:
        self._batch: Any = None
        self._batch_idx = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._batch, self._batch_idx = batch, batch_idx

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        value = float(loss.detach())
        bad = not math.isfinite(value)
        if not trainer.strategy.reduce_boolean_decision(bad, all=False):
            return
        index = getattr(self._batch, "index", None)
        mine = (trainer.global_rank, value, index.tolist() if isinstance(index, torch.Tensor) else None)
        reports = [r for r in _gather(trainer, mine) if not math.isfinite(r[1])]
        graphs = "; ".join(
            (f"process {rank}: " if trainer.world_size > 1 else "") + f"loss {loss_value}, graphs {indices}"
            for rank, loss_value, indices in reports
        )
        raise NonFiniteLoss(
            f"non-finite training loss at optimiser step {trainer.global_step + 1} (epoch {trainer.current_epoch}, "
            f"batch {self._batch_idx}): {graphs} (dataset indices, GraphBatch.index). Last good checkpoint: "
            f"{last_good_checkpoint(trainer) or 'none written yet'}. Resume from it with --ckpt_path, e.g. with a "
            "lower --model.init_args.optim.lr or --trainer.gradient_clip_val, and inspect these graphs."
        )


def last_good_checkpoint(trainer: pl.Trainer) -> str | None:
    """The most recently written checkpoint of the run (or the one it resumed from)."""
    candidates = [trainer.ckpt_path] if trainer.ckpt_path else []
    for callback in trainer.checkpoint_callbacks:
        candidates += [callback.last_model_path, callback.best_model_path]
    existing = {c for c in candidates if c and Path(c).is_file()}
    return max(existing, key=lambda c: Path(c).stat().st_mtime) if existing else None


# ----------------------------------------------------------------------------- plots


class RelationTablePlots(Callback):
    """Every ``every_n_validations`` validations, draw the learned B and C (:mod:`graphormer_urpe.run.plots`).

    Graphormers: per head against distance; sequence models: the n x n matrices. The image goes to
    every W&B logger (``relation_tables``) and to ``<run dir>/plots/``. Does nothing for models
    without relative encodings.

    Args:
        plot_dir: where the PNG files go.
        every_n_validations: plot at every n-th validation (0 turns plotting off).
    """

    def __init__(self, plot_dir: Path, every_n_validations: int = 5) -> None:
        self.plot_dir = Path(plot_dir)
        self.every_n_validations = every_n_validations
        self.validations = 0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking or self.every_n_validations <= 0:
            return
        self.validations += 1
        model = getattr(pl_module, "model", None)
        if self.validations % self.every_n_validations or not has_relative_encodings(model):
            return
        if not trainer.is_global_zero:
            return
        path = self.plot_dir / f"relation_tables-step{trainer.global_step:07d}.png"
        self.plot_dir.mkdir(parents=True, exist_ok=True)
        relative_encoding_figure(model, title=f"step {trainer.global_step}").savefig(path, dpi=100)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image(key="relation_tables", images=[str(path)], step=trainer.global_step)
