"""Peak tensor memory of one training step of a task: measured on a GPU, estimated anywhere without one.

The step is the task's own, as Lightning runs it: ``training_step`` (forward and loss) under
autocast, backward (scaled under ``16-mixed`` on CUDA, as Lightning's gradient scaler does),
gradient clipping by norm, the update of the optimiser that ``configure_optimizers`` builds, and
``zero_grad`` (to None). Two steps run and the second is measured, so the optimiser state exists.

* On CUDA the peak is ``torch.cuda.max_memory_allocated`` (what the caching allocator handed out).
* On the CPU the step runs on *fake* tensors (:class:`~torch._subclasses.fake_tensor.FakeTensorMode`:
  shapes, dtypes and autograd, no data) and :class:`PeakMemory` adds up the bytes of every live
  tensor storage op by op, so the peak of a step at a GPU-sized setting is known in seconds, on a
  laptop, without allocating it. Fake tensors hold no values, so a boolean mask (the rows with a
  known target, which the loss selects) selects every row (:class:`EverySelected`): the estimate is
  that of a batch whose targets are all known. The CPU autocast casts
  the same matmuls to half precision as CUDA's (float16 and bfloat16 take the same bytes).

The estimate counts tensors only. On a GPU add the CUDA context (about 0.3-0.5 GiB), the cuBLAS
workspace, and the caching allocator's rounding and fragmentation (:func:`measure_step_memory`
reports ``max_memory_reserved`` next to ``max_memory_allocated``). See ``docs/gpu.md``.

A benchmark tool (``bench/memory/paper_memory.py``, ``bench/gpu/gpu_check.py``); from the repository root, tests
and you import it as ``bench.memory.step_memory``.
"""

from __future__ import annotations

import copy
import warnings
import weakref
from dataclasses import dataclass
from typing import Literal

import pytorch_lightning as pl
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.tasks.base import GraphormerTask

Precision = Literal["32", "16-mixed", "bf16-mixed"]
#: Autocast dtype of each Lightning precision (None: no autocast).
AUTOCAST_DTYPE: dict[str, torch.dtype | None] = {"32": None, "16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}
GIB = 1024**3


class PeakMemory(TorchDispatchMode):
    """Bytes of the tensor storages alive while ops run in its context, and their peak.

    Every tensor an op returns is counted once per storage (views share their base's) until the
    storage is freed. Tensors that exist before the context (parameters, the batch) are counted
    with :meth:`track`. Works on real and on fake tensors alike.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.current = 0
        self.peak = 0

    def track(self, *tensors: object) -> None:
        """Count tensors made outside the context (any nesting of lists, tuples and dicts)."""
        for leaf in tree_leaves(tensors):
            if isinstance(leaf, torch.Tensor):
                self._count(leaf)

    def reset_peak(self) -> None:
        """Start a new peak from what is alive now."""
        self.peak = self.current

    def _count(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        if storage in self._sizes:
            return
        size = storage.nbytes()
        self._sizes[storage] = size
        weakref.finalize(storage, self._free, size)
        self.current += size
        self.peak = max(self.peak, self.current)

    def _free(self, size: int) -> None:
        self.current -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's protocol)
        out = func(*args, **(kwargs or {}))
        self.track(out)
        return out


aten = torch.ops.aten
#: Ops that take boolean masks among their indices.
_INDEXING = (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default)


class EverySelected(TorchDispatchMode):
    """Under :class:`FakeTensorMode`, every boolean mask selects all its entries.

    How many entries a mask selects depends on its values, which fake tensors do not have; fake
    tensors refuse such ops. This mode gives ``nonzero`` every position and turns boolean indices
    into such positions, so the shapes are those of masks that are true everywhere.
    """

    @staticmethod
    def _positions(mask: torch.Tensor) -> list[torch.Tensor]:
        """Index tensors of every position of ``mask`` (one per dimension; fake: no values)."""
        return list(mask.new_empty((mask.numel(), mask.dim()), dtype=torch.long).unbind(1))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's protocol)
        if func is aten.nonzero.default:
            return args[0].new_empty((args[0].numel(), args[0].dim()), dtype=torch.long)
        if func in _INDEXING:
            indices = [
                part
                for index in args[1]
                for part in (self._positions(index) if index is not None and index.dtype == torch.bool else [index])
            ]
            args = (args[0], indices, *args[2:])
        return func(*args, **(kwargs or {}))


@dataclass
class StepMemory:
    """Memory of one training step, in bytes (the second step: optimiser state exists).

    Args:
        peak: peak of live tensor memory during the step (CUDA: ``max_memory_allocated``).
        persistent: live at the start of the step: parameters, optimiser state and the batch.
        reserved: CUDA only: ``max_memory_reserved``, the allocator's peak including its cache.
    """

    peak: int
    persistent: int
    reserved: int | None = None


def task_optimizer(task: GraphormerTask) -> torch.optim.Optimizer:
    """The optimiser of ``task.configure_optimizers()``; its schedule asks a trainer for the run's
    length, so a trainer of two steps is attached for the call."""
    task.trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=2,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        return task.configure_optimizers()["optimizer"]
    finally:
        task.trainer = None


class TrainingStep:
    """One training step of ``task`` (see the module docstring).

    Args:
        task: the task, in training mode from now on.
        precision: Lightning's precision setting.
        device: where the step runs.
        gradient_clip: max gradient norm (``trainer.gradient_clip_val``), or None.
    """

    def __init__(
        self, task: GraphormerTask, precision: Precision, device: torch.device, gradient_clip: float | None = 5.0
    ) -> None:
        self.task = task.train()
        self.gradient_clip = gradient_clip
        self.trained = [p for p in task.parameters() if p.requires_grad]
        self.optimizer = task_optimizer(task)
        self.dtype = AUTOCAST_DTYPE[precision]
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler("cuda") if precision == "16-mixed" and device.type == "cuda" else None

    def __call__(self, batch: GraphBatch) -> None:
        with (
            torch.autocast(self.device_type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None),
            warnings.catch_warnings(),
        ):
            warnings.filterwarnings("ignore", message=".*self.log.*")  # no trainer records the logged loss
            loss = self.task.training_step(batch, 0)
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.gradient_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.trained, self.gradient_clip, foreach=True)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def estimate_step_memory(
    task: GraphormerTask, batch: GraphBatch, precision: Precision, gradient_clip: float | None = 5.0
) -> StepMemory:
    """Peak tensor memory of a training step of ``task`` on ``batch``, on fake CPU tensors.

    Nothing of the step's size is allocated: a copy of the task and the batch are turned into fake
    tensors of the same shapes and dtypes, and :class:`PeakMemory` counts bytes. Two steps run; the
    second is measured, as :func:`measure_step_memory` does on a GPU.

    Args:
        task: the task, on the CPU (it stays untouched).
        batch: a real batch on the CPU.
        precision: Lightning's precision setting.
        gradient_clip: max gradient norm, or None.
    """
    fake = FakeTensorMode()
    task = copy.deepcopy(task)
    with fake:
        task._apply(fake.from_tensor)  # every parameter and buffer, as a fake tensor of its shape and dtype
        step = TrainingStep(task, precision, torch.device("cpu"), gradient_clip)
    fake_batch = batch.map_tensors(fake.from_tensor)
    tracker = PeakMemory()
    tracker.track(dict(task.named_parameters()), dict(task.named_buffers()), fake_batch.__dict__)
    with fake, EverySelected(), tracker:
        step(fake_batch)
        persistent = tracker.current
        tracker.reset_peak()
        step(fake_batch)
    return StepMemory(peak=tracker.peak, persistent=persistent)


def measure_step_memory(
    task: GraphormerTask, batch: GraphBatch, precision: Precision, gradient_clip: float | None = 5.0
) -> StepMemory:
    """Peak GPU memory of a training step (``task`` and ``batch`` on the GPU): two steps run, the
    second (with the optimiser state the first created, and the blocks the first left in the
    allocator's cache, as in training) is measured by the allocator."""
    device = batch.node_mask.device
    torch.cuda.empty_cache()  # nothing cached from earlier work counts as reserved by this step
    step = TrainingStep(task, precision, device, gradient_clip)
    step(batch)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    persistent = torch.cuda.memory_allocated(device)
    step(batch)
    torch.cuda.synchronize(device)
    return StepMemory(
        peak=torch.cuda.max_memory_allocated(device),
        persistent=persistent,
        reserved=torch.cuda.max_memory_reserved(device),
    )
