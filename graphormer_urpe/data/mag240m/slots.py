"""Shared-memory slots a DataLoader worker builds its batches in (handed over by handle, without a copy), reused
once the training process clears their one-byte lease (:func:`release`); see docs/benchmarks.md."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import torch
from torch.utils.data import get_worker_info

#: Byte alignment of every tensor inside a slot (a cache line; any dtype's itemsize divides it).
_ALIGN = 64
#: A slot grows to this factor of the batch that did not fit, so slightly larger batches reuse it.
_GROWTH = 1.25

#: Shape and dtype of each tensor a batch needs, by name.
Specs = Mapping[str, tuple[tuple[int, ...], torch.dtype]]


class SlotRing:
    """A worker's reusable shared-memory slots, created lazily in the worker; enough ``slots`` for its batches in
    flight (``prefetch_factor``, plus the one the training loop holds and one the trainer prefetches)."""

    def __init__(self, slots: int = 4) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self._leases: torch.Tensor | None = None  # (slots,) uint8 in shared memory, 1 = in use
        self._buffers: list[torch.Tensor | None] = [None] * slots  # (capacity,) uint8 in shared memory

    def allocate(self, specs: Specs) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """Uninitialised tensors and their (1,) uint8 lease, now set: views into a free slot in a DataLoader
        worker; otherwise (outside a worker, or all slots leased) ordinary tensors and ``None``."""
        if get_worker_info() is None:
            return empty_tensors(specs), None
        if self._leases is None:
            self._leases = torch.zeros(self.slots, dtype=torch.uint8).share_memory_()
        free = torch.nonzero(self._leases == 0)
        if not len(free):
            return empty_tensors(specs), None
        slot = int(free[0])
        self._leases[slot] = 1
        sizes = (-(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN for shape, dtype in specs.values())
        offsets = [0, *itertools.accumulate(sizes)]  # aligned byte offset of each tensor, then the bytes needed
        buffer = self._buffers[slot]
        if buffer is None or buffer.numel() < offsets[-1]:
            buffer = self._buffers[slot] = torch.empty(int(offsets[-1] * _GROWTH), dtype=torch.uint8).share_memory_()
        tensors = {
            name: buffer[offset : offset + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
            for (name, (shape, dtype)), offset in zip(specs.items(), offsets)
        }
        return tensors, self._leases[slot : slot + 1]


def empty_tensors(specs: Specs) -> dict[str, torch.Tensor]:
    """Ordinary uninitialised tensors of the given shapes and dtypes."""
    return {name: torch.empty(shape, dtype=dtype) for name, (shape, dtype) in specs.items()}


def release(lease: torch.Tensor | None) -> None:
    """Hand a slot back to its worker (``lease`` from :meth:`SlotRing.allocate`; None: nothing to do)."""
    if lease is not None:
        lease.zero_()
