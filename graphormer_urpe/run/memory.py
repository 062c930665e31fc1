"""Peak tensor memory of one training step: measured on a GPU, estimated anywhere without one.

A training step (forward and loss under autocast, backward, gradient clipping, AdamW update) is run

* on CUDA: the peak is ``torch.cuda.max_memory_allocated`` (what the caching allocator handed
  out), with ``16-mixed``'s gradient scaler as Lightning uses it;
* on the CPU, on *fake* tensors (:class:`~torch._subclasses.fake_tensor.FakeTensorMode`: shapes,
  dtypes and autograd, no data): :class:`PeakMemory` adds up the bytes of every live tensor storage
  op by op, so the peak of a step at a GPU-sized setting is known in seconds, on a laptop, without
  allocating it. The CPU autocast casts the same matmuls to half precision as CUDA's (the bytes of
  float16 and bfloat16 are the same), the softmax and the tables stay float32 as the model asks.

The estimate counts tensors only. On a GPU add the CUDA context (about 0.3-0.5 GiB), the cuBLAS
workspace, and the caching allocator's rounding and fragmentation (on a GPU,
:func:`measure_step_memory` reports ``max_memory_reserved`` next to ``max_memory_allocated``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from graphormer_urpe.data.batch import GraphBatch

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


def graph_loss(output: torch.Tensor, batch: GraphBatch) -> torch.Tensor:
    """The training loss on a batch whose targets are all known: L1 for one regression target
    (``output`` of width 1), cross entropy over the classes otherwise (what the tasks compute).

    Shapes:
        output: (B, Y), batch.y: (B, Y) or (B, 1) class ids -> ().
    """
    if output.shape[-1] == 1:
        return F.l1_loss(output.float(), batch.y.float())
    return F.cross_entropy(output.float(), batch.y[:, 0].long())


class TrainingStep:
    """One step as Lightning runs it: forward and loss under autocast, backward (scaled under
    ``16-mixed`` on CUDA), gradient clipping by norm, AdamW update, ``zero_grad`` (to None).

    Args:
        model: the network.
        precision: Lightning's precision setting.
        device: where the step runs.
        parameters: run the model with these tensors in place of its own (by name, as
            :func:`torch.func.functional_call` takes them: fake tensors); None: its own.
        loss_fn: loss of the model's output.
        gradient_clip: max gradient norm.
    """

    def __init__(self, model: nn.Module, precision: Precision, device: torch.device,
                 parameters: dict[str, torch.Tensor] | None = None,
                 loss_fn: Callable[[torch.Tensor, GraphBatch], torch.Tensor] = graph_loss,
                 gradient_clip: float = 5.0) -> None:
        self.model, self.parameters = model.train(), parameters
        self.loss_fn, self.gradient_clip = loss_fn, gradient_clip
        trained = parameters.values() if parameters is not None else model.parameters()
        self.trained = [t for t in trained if t.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trained, lr=1e-4, weight_decay=0.01)
        self.dtype = AUTOCAST_DTYPE[precision]
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler("cuda") if precision == "16-mixed" and device.type == "cuda" else None

    def __call__(self, batch: GraphBatch) -> None:
        with torch.autocast(self.device_type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            output = (self.model(batch) if self.parameters is None
                      else functional_call(self.model, self.parameters, (batch,)))
            loss = self.loss_fn(output, batch)
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.trained, self.gradient_clip, foreach=True)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _batch_map(batch: GraphBatch, move: Callable[[torch.Tensor], torch.Tensor]) -> GraphBatch:
    return GraphBatch(**{f.name: move(getattr(batch, f.name)) for f in fields(GraphBatch)})


def estimate_step_memory(model: nn.Module, batch: GraphBatch, precision: Precision) -> StepMemory:
    """Peak tensor memory of a training step of ``model`` on ``batch``, on fake CPU tensors.

    Nothing of the step's size is allocated: the model's parameters and the batch are turned
    into fake tensors of the same shapes and dtypes, and :class:`PeakMemory` counts bytes. Two
    steps run; the second is measured, as :func:`measure_step_memory` does on a GPU.

    Args:
        model: the network, on the CPU (its real parameters stay untouched).
        batch: a real batch on the CPU.
        precision: Lightning's precision setting.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    trainable = {name: p.requires_grad for name, p in model.named_parameters()}
    real = {name: t.detach() for name, t in (*model.named_parameters(), *model.named_buffers())}
    with FakeTensorMode() as fake:
        parameters = {name: fake.from_tensor(t).requires_grad_(trainable.get(name, False)) for name, t in real.items()}
        fake_batch = _batch_map(batch, fake.from_tensor)
        step = TrainingStep(model, precision, torch.device("cpu"), parameters)
        tracker = PeakMemory()
        tracker.track(parameters, fake_batch.__dict__)
        with tracker:
            step(fake_batch)
            persistent = tracker.current
            tracker.reset_peak()
            step(fake_batch)
    return StepMemory(peak=tracker.peak, persistent=persistent)


def measure_step_memory(model: nn.Module, batch: GraphBatch, precision: Precision) -> StepMemory:
    """Peak GPU memory of a training step (``model`` and ``batch`` on the GPU): two steps run,
    the second (with the optimiser state the first created, and the blocks the first left in the
    allocator's cache, as in training) is measured by the allocator."""
    device = batch.node_mask.device
    torch.cuda.empty_cache()  # nothing cached from earlier work counts as reserved by this step
    step = TrainingStep(model, precision, device)
    step(batch)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    persistent = torch.cuda.memory_allocated(device)
    step(batch)
    torch.cuda.synchronize(device)
    return StepMemory(peak=torch.cuda.max_memory_allocated(device), persistent=persistent,
                      reserved=torch.cuda.max_memory_reserved(device))
