"""A callback that times a training run's steps from inside ``train.py``, for the benchmarks of the whole loop.

    python train.py --config ... --trainer.callbacks+='{"class_path": "bench.speed.step_clock.StepClock",
                    "init_args": {"out": "clock.json", "first": 50, "last": 250}}'

(``python train.py`` puts the repository root, and so ``bench``, on the path.)

Between the start of optimiser step ``first + 1``'s batch and the end of step ``last``, it counts the graphs trained
on and the wall time (the device synchronised at both ends), and the part of that time spent between two steps, from
the end of one step's hooks to the start of the next batch's: waiting for the data loader, and Lightning's
bookkeeping (logging, checkpoints). The figures go to ``out`` as JSON (:class:`StepClock` docstring).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch


class StepClock(pl.Callback):
    """Times optimiser steps ``first + 1`` .. ``last`` and writes ``{"steps", "graphs", "seconds", "steps_per_second",
    "graphs_per_second", "between_steps_seconds", "between_steps_share"}`` to ``out`` at the end of training.

    Args:
        out: the JSON file to write (refused if it exists).
        first: optimiser steps before the window (warm-up: compilation, caches, the loader's first batches).
        last: the step that closes the window.
    """

    def __init__(self, out: str, first: int = 50, last: int = 250) -> None:
        if last <= first:
            raise ValueError(f"StepClock: last={last} must be after first={first}")
        self.out = Path(out)
        if self.out.exists():
            raise FileExistsError(f"{self.out} exists: StepClock writes a new file")
        self.first = first
        self.last = last
        self.started: float | None = None
        self.stopped: float | None = None
        self.graphs: torch.Tensor | int = 0
        self.between = 0.0
        self._step_ended: float | None = None

    def _now(self, pl_module: pl.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step == self.first and self.started is None:
            self.started = self._now(pl_module)
        elif self.started is not None and self.stopped is None and self._step_ended is not None:
            self.between += time.perf_counter() - self._step_ended
        if self.started is not None and self.stopped is None:
            self.graphs = self.graphs + (batch.index >= 0).sum()  # on the device: padding graphs (-1) left out

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.started is None or self.stopped is not None:
            return
        if trainer.global_step >= self.last:
            self.stopped = self._now(pl_module)
        else:
            self._step_ended = time.perf_counter()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stopped is None or not trainer.is_global_zero:
            return
        seconds = self.stopped - self.started
        steps = self.last - self.first
        graphs = int(self.graphs)
        self.out.write_text(
            json.dumps(
                {
                    "steps": steps,
                    "graphs": graphs,
                    "seconds": seconds,
                    "steps_per_second": steps / seconds,
                    "graphs_per_second": graphs / seconds,
                    "between_steps_seconds": self.between,
                    "between_steps_share": self.between / seconds,
                },
                indent=2,
            )
            + "\n"
        )
