"""Shared-memory slots that a DataLoader worker builds its batches in, reused once released.

A DataLoader worker hands a batch to the training process by copying every tensor into a new
shared-memory segment, and a new segment means a page fault for every 4 KiB of it: on a 19 MiB
MAG240M batch that costs as much CPU as sampling the batch (``bench/mag240m_sampler.py``). Tensors
that already live in shared memory are sent by handle, without a copy. So a worker keeps a
:class:`SlotRing` of a few shared segments and builds each batch straight into a free one.

Whether a slot is free is a one-byte *lease* per slot, itself in shared memory: the worker sets it
when it fills the slot; the training process clears it (:func:`release`) once it has copied the
batch onward (``CompactGraphBatch.pad`` writes new tensors). A worker whose slots are all leased
allocates ordinary tensors instead, so a consumer that never releases loses only the speed-up,
never data. Outside a worker (``num_workers=0``) there is no hand-over and no ring.

Writes are ordered by the hand-over itself: the worker fills a slot before it sends the batch,
and the training process clears the lease after its last read of the slot.
"""

from __future__ import annotations

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
    """A worker's reusable shared-memory slots (created lazily, in the worker that uses them).

    Args:
        slots: slots per worker; enough for the batches a worker has in flight (the DataLoader's
            ``prefetch_factor``, plus the one the training loop holds and one the trainer prefetches).
    """

    def __init__(self, slots: int = 4) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self._leases: torch.Tensor | None = None  # (slots,) uint8 in shared memory, 1 = in use
        self._buffers: list[torch.Tensor | None] = [None] * slots  # (capacity,) uint8 in shared memory

    def allocate(self, specs: Specs) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """Uninitialised tensors of the given shapes and dtypes.

        Returns:
            ``(tensors, lease)``: in a DataLoader worker with a free slot, views into that slot and
            its lease (a (1,) uint8 view, now set); otherwise ordinary tensors and ``None``.
        """
        slot = self._take_free_slot() if get_worker_info() is not None else None
        if slot is None:
            return empty_tensors(specs), None
        offsets, total = _layout(specs)
        buffer = self._buffers[slot]
        if buffer is None or buffer.numel() < total:
            buffer = self._buffers[slot] = torch.empty(int(total * _GROWTH), dtype=torch.uint8).share_memory_()
        tensors = {}
        for (name, (shape, dtype)), offset in zip(specs.items(), offsets):
            nbytes = math.prod(shape) * dtype.itemsize
            tensors[name] = buffer[offset:offset + nbytes].view(dtype).view(shape)
        return tensors, self._leases[slot:slot + 1]

    def _take_free_slot(self) -> int | None:
        """Index of a released slot, now leased; None if all are in use."""
        if self._leases is None:
            self._leases = torch.zeros(self.slots, dtype=torch.uint8).share_memory_()
        free = torch.nonzero(self._leases == 0)
        if not len(free):
            return None
        slot = int(free[0])
        self._leases[slot] = 1
        return slot


def empty_tensors(specs: Specs) -> dict[str, torch.Tensor]:
    """Ordinary uninitialised tensors of the given shapes and dtypes."""
    return {name: torch.empty(shape, dtype=dtype) for name, (shape, dtype) in specs.items()}


def release(lease: torch.Tensor | None) -> None:
    """Hand a slot back to its worker (``lease`` from :meth:`SlotRing.allocate`; None: nothing to do)."""
    if lease is not None:
        lease.zero_()


def _layout(specs: Specs) -> tuple[list[int], int]:
    """Aligned byte offset of each tensor in a slot, and the bytes the slot needs."""
    offsets, total = [], 0
    for shape, dtype in specs.values():
        offsets.append(total)
        total += -(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN
    return offsets, total
