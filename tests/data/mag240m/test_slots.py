"""Shared-memory slots of DataLoader workers: reuse only after release, data intact, fallbacks."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from graphormer_urpe.data.mag240m.slots import SlotRing, release

SLOTS = 3


class FilledBatches:
    """A ``collate_fn`` that builds batch k in a slot: ``values`` (k + 1 rows of k) and ``small``."""

    def __init__(self, slots: int = SLOTS) -> None:
        self.ring = SlotRing(slots)

    def __call__(self, items: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        k = items[0]
        tensors, lease = self.ring.allocate({"values": ((k + 1, 1000), torch.float16), "small": ((3,), torch.int8)})
        tensors["values"].fill_(k)
        tensors["small"].fill_(k % 100)
        return tensors["values"], tensors["small"], lease


def _loader(batches: int, slots: int = SLOTS) -> DataLoader:
    return DataLoader(list(range(batches)), batch_size=1, collate_fn=FilledBatches(slots), num_workers=1)


def _intact(k: int, values: torch.Tensor, small: torch.Tensor) -> bool:
    return values.shape == (k + 1, 1000) and bool((values == k).all()) and bool((small == k % 100).all())


def test_outside_a_worker_tensors_are_plain_and_have_no_lease() -> None:
    tensors, lease = SlotRing().allocate({"a": ((4, 2), torch.int16), "b": ((0, 5), torch.float32)})
    assert lease is None
    assert tensors["a"].shape == (4, 2) and tensors["a"].dtype == torch.int16 and not tensors["a"].is_shared()
    assert tensors["b"].shape == (0, 5)


def test_released_slots_are_reused_and_every_batch_arrives_intact() -> None:
    slots_seen = []
    for k, (values, small, lease) in enumerate(_loader(12)):
        assert lease is not None and values.is_shared() and int(lease) == 1
        assert _intact(k, values, small)  # batches grow: slots are reallocated larger on the way
        slots_seen.append(lease.storage_offset())  # the lease is a view of the slot's byte in the lease table
        release(lease)
        assert int(lease) == 0
    assert set(slots_seen) <= set(range(SLOTS)) and len(slots_seen) == 12


def test_a_held_batch_is_never_overwritten() -> None:
    held = None
    for k, (values, small, lease) in enumerate(_loader(10)):
        if k == 0:
            held = (values, small, lease)  # the training process still needs batch 0: not released
            continue
        release(lease)  # (None when the worker ran out of free slots: batches 1, 2 may still be in flight)
        assert lease is None or lease.storage_offset() != held[2].storage_offset()  # never batch 0's slot
    assert _intact(0, held[0], held[1])


def test_a_worker_with_every_slot_leased_falls_back_to_plain_tensors() -> None:
    batches = list(_loader(SLOTS + 3))  # nothing is released
    leases = [lease for _, _, lease in batches]
    assert all(lease is not None for lease in leases[:SLOTS]) and all(lease is None for lease in leases[SLOTS:])
    assert all(_intact(k, values, small) for k, (values, small, _) in enumerate(batches))


def test_slots_must_be_positive() -> None:
    with pytest.raises(ValueError, match="slots must be >= 1"):
        SlotRing(0)


def test_tensors_are_aligned_views_of_one_slot(monkeypatch) -> None:
    monkeypatch.setattr("graphormer_urpe.data.mag240m.slots.get_worker_info", lambda: object())  # as in a worker
    ring = SlotRing(1)
    tensors, lease = ring.allocate({"a": ((3,), torch.int8), "b": ((5, 7), torch.float16), "c": ((2,), torch.int64)})
    assert lease is not None and int(lease) == 1
    base = ring._buffers[0].data_ptr()
    offsets = [t.data_ptr() - base for t in tensors.values()]
    assert offsets == [0, 64, 192]  # 3 bytes, then 70 bytes rounded up to 128, then 16
    assert all(t.untyped_storage().data_ptr() == base for t in tensors.values())
    assert [tuple(t.shape) for t in tensors.values()] == [(3,), (5, 7), (2,)]
