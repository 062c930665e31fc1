"""Callbacks of every run: exact resume, preemption, non-finite losses, plots (docs/running.md)."""

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
from pytorch_lightning.callbacks import Callback, EarlyStopping, ModelCheckpoint, WeightAveraging
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.trainer.states import TrainerFn

from graphormer_urpe.data.loaders import gather_objects
from graphormer_urpe.errors import NonFiniteLoss
from graphormer_urpe.run.checkpoints import LAST_CHECKPOINT
from graphormer_urpe.run.plots import has_relative_encodings, relative_encoding_figure

log = logging.getLogger("graphormer_urpe")


def rng_state() -> dict[str, Any]:
    """This process's torch, CUDA, numpy and Python RNG states, in ``weights_only``-loadable types."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(), "numpy": [name, keys.tolist(), position, has_gauss, cached],
             "python": [version, list(internal), gauss]}
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
            log.warning("the checkpoint holds RNG states of %d processes, this run has %d: dropout masks will "
                        "differ from the original run", len(states), trainer.world_size)
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
    followed = {**state, "dirpath": dirpath, "best_model_path": best, "kth_best_model_path": kth,
                "best_k_models": {here(path): score for path, score in state.get("best_k_models", {}).items()
                                  if here(path)},
                "last_model_path": here(state.get("last_model_path"))}
    if not best:
        followed["best_model_score"] = None
    if not kth:
        followed.pop("kth_value", None)  # the callback keeps its initial one
    return followed


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt`` every ``every_n_train_steps`` optimiser steps (0: never) and always at the end of training."""

    def __init__(self, dirpath: Path, every_n_train_steps: int) -> None:
        super().__init__(dirpath=dirpath, filename=Path(LAST_CHECKPOINT).stem, save_top_k=0, save_last=True,
                         every_n_train_steps=every_n_train_steps, enable_version_counter=False)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's save_last skips the end of training once any step wrote last.ckpt; here last.ckpt always holds
        # the final state, so --ckpt_path last can extend a finished run
        if self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Before any callback loads its state: every checkpoint callback's paths follow this run directory."""
        states = checkpoint.get("callbacks") or {}
        for key, state in states.items():
            saved = state.get("dirpath") if isinstance(state, dict) and "best_model_path" in state else None
            if saved is not None and saved != self.dirpath:
                states[key] = follow_run_directory(state, self.dirpath)


class LoggedStep(Callback):
    """Keeps the step Lightning logs under equal to the optimiser step; runs before ``LearningRateMonitor`` logs."""

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # Lightning logs under its count of batches that stepped the optimiser, which is one too many after a resume
        # from the end-of-training last.ckpt at a validation step (why, and the test: docs/exactness.md)
        epoch_loop = trainer.fit_loop.epoch_loop
        if epoch_loop._batches_that_stepped != trainer.global_step:
            epoch_loop._batches_that_stepped = trainer.global_step


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
        super().__init__(f"{received} received: stopped after step {step} and saved {checkpoint}"
                         + ("; SLURM job requeued" if requeued else "")
                         + f"; continue with --run_name {checkpoint.parent.parent.name} --ckpt_path last")

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a process killed by it would report."""
        return 128 + int(getattr(signal, self.signal_name))


class PreemptionCheckpoint(Callback):
    """On one of ``signals`` or a first Ctrl-C, finish the optimiser step on every process, save ``last.ckpt``,
    requeue the SLURM job after one of ``requeue_signals``, and stop; a second Ctrl-C stops at once."""

    def __init__(self, checkpoint_dir: Path, signals: tuple[str, ...] = ("SIGTERM", "SIGUSR1"),
                 requeue_signals: tuple[str, ...] = ("SIGUSR1",)) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)
        self.signals = signals
        self.requeue_signals = requeue_signals
        self.received: str | None = None
        self._previous: dict[int, Any] = {}
        self._step_at_batch_start = 0
        self._trainer: pl.Trainer | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.received == "SIGINT":
            raise KeyboardInterrupt  # the second Ctrl-C: stop at once
        self.received = signal.Signals(signum).name
        if signum == signal.SIGINT:
            log.warning("Ctrl-C: finishing optimiser step %d, then writing %s (Ctrl-C again to stop at once)",
                        (self._trainer.global_step if self._trainer is not None else 0) + 1,
                        self.checkpoint_dir / LAST_CHECKPOINT)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._trainer = trainer
        # installed after Lightning's own handlers (registered when fitting starts), replacing them
        for name in {*self.signals, "SIGINT"}:
            signum = getattr(signal, name)
            self._previous[signum] = signal.signal(signum, self._handle)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # before Lightning's teardown: a handler left behind would outlive the run (and its forked workers)
        for signum, handler in self._previous.items():
            if signum == signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
                continue  # Lightning ignores further Ctrl-C while it shuts down after a KeyboardInterrupt
            signal.signal(signum, handler)
        self._previous = {}

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.on_train_end(trainer, pl_module)

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
        trainer.save_checkpoint(path, weights_only=False)  # every process takes part; rank 0 writes
        signal_name = self.received or ("SIGUSR1" if requeue else "SIGTERM")  # ranks that got none
        array = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        job = "_".join(array) if all(array) else os.environ.get("SLURM_JOB_ID")  # None outside SLURM
        requeued = bool(requeue and job)
        if requeued and trainer.is_global_zero:
            log.info("requeueing SLURM job %s", job)
            subprocess.run(["scontrol", "requeue", job], check=False, timeout=60)
        raise Preempted(signal_name, trainer.global_step, path, requeued)


class NonFiniteLossGuard(Callback):
    """Stops every process before the backward pass of a NaN/inf loss, naming the step, graphs and last checkpoint."""

    def __init__(self) -> None:
        self._batch: Any = None
        self._batch_idx = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._batch, self._batch_idx = batch, batch_idx

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        value = float(loss.detach())
        # every process learns whether any loss is bad, so all stop together: one process raising alone would leave
        # the others waiting in the gradient all-reduce
        if not trainer.strategy.reduce_boolean_decision(not math.isfinite(value), all=False):
            return
        index = getattr(self._batch, "index", None)
        mine = (trainer.global_rank, value, index.tolist() if isinstance(index, torch.Tensor) else None)
        reports = [r for r in gather_objects(mine) if not math.isfinite(r[1])]
        graphs = "; ".join((f"process {rank}: " if trainer.world_size > 1 else "")
                           + f"loss {loss_value}, graphs {indices}" for rank, loss_value, indices in reports)
        raise NonFiniteLoss(
            f"non-finite training loss at optimiser step {trainer.global_step + 1} (epoch {trainer.current_epoch}, "
            f"batch {self._batch_idx}): {graphs} (dataset indices, GraphBatch.index). Last good checkpoint: "
            f"{last_good_checkpoint(trainer) or 'none written yet'}. Resume from it with --ckpt_path, e.g. with a "
            "lower --model.init_args.optim.lr or --trainer.gradient_clip_val, and inspect these graphs."
        )


def last_good_checkpoint(trainer: pl.Trainer) -> str | None:
    """The most recently written checkpoint of the run (or the one it resumed from)."""
    candidates = [trainer.ckpt_path, *(path for callback in trainer.checkpoint_callbacks
                                       for path in (callback.last_model_path, callback.best_model_path))]
    existing = {c for c in candidates if c and Path(c).is_file()}
    return max(existing, key=lambda c: Path(c).stat().st_mtime) if existing else None


def remove_weight_averaging(trainer: pl.Trainer) -> None:
    """Remove Lightning's weight-averaging callbacks (:class:`WeightAveraging`, e.g. ``EMAWeightAveraging``) from a
    trainer that evaluates a checkpoint: after a run's fit, and in ``evaluate.py``.

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
        if (self.validations % self.every_n_validations or not has_relative_encodings(model)
                or not trainer.is_global_zero):
            return
        path = self.plot_dir / f"relation_tables-step{trainer.global_step:07d}.png"
        self.plot_dir.mkdir(parents=True, exist_ok=True)
        relative_encoding_figure(model, title=f"step {trainer.global_step}").savefig(path, dpi=100)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image(key="relation_tables", images=[str(path)], step=trainer.global_step)
