"""Global batches, exact evaluation shards and mid-epoch resume of the data order."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from bench.common import padded_share
from graphormer_urpe.data.loaders import (
    EvalShardSampler,
    GlobalBatchSampler,
    ResumableLoader,
    check_validation_interval,
    per_device_batch_size,
)
from graphormer_urpe.errors import ConfigError


class Indices(Dataset):
    """Item i is i."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> int:
        return i


class WorkerRandom(Indices):
    """Item i is (i, a random number drawn in the worker process)."""

    def __getitem__(self, i: int) -> tuple[int, float]:
        return i, torch.rand(()).item()


def collate(items: list) -> list:
    return list(items)


def sizes_of(size: int) -> np.ndarray:
    """Node counts of a dataset of ``size`` graphs: 1 to 40, many ties."""
    return np.random.default_rng(size).integers(1, 41, size)


def global_batches(size: int, batch: int, world: int, epoch: int = 0, window: int = 0) -> list[list[int]]:
    """The graphs of every optimiser step when W processes each take their sampler's slices
    (size-aware with ``window`` > 0)."""
    per_rank = []
    for rank in range(world):
        sampler = GlobalBatchSampler(
            Indices(size), batch, world, rank, seed=3, sizes=sizes_of(size) if window else None, bucket_window=window
        )
        sampler.set_epoch(epoch)
        order = list(sampler)
        assert len(order) == len(sampler)
        local = batch // world
        per_rank.append([order[i : i + local] for i in range(0, len(order), local)])
    assert len({len(steps) for steps in per_rank}) == 1, "every process must take the same number of steps"
    return [sum((steps[s] for steps in per_rank), []) for s in range(len(per_rank[0]))]


@pytest.mark.parametrize("world", [2, 4])
def test_every_step_sees_the_same_graphs_whatever_the_number_of_processes(world: int) -> None:
    size, batch = 22, 8  # 22 is not divisible by 4 or 8
    single = global_batches(size, batch, 1)
    multi = global_batches(size, batch, world)
    assert len(single) == len(multi) == 3
    assert multi[:-1] == single[:-1]  # full batches: identical
    # the last batch holds the 6 left-over graphs, padded to a multiple of W with the epoch's first graphs
    padding = -(-len(single[-1]) // world) * world - len(single[-1])
    assert sorted(multi[-1]) == sorted(single[-1] + single[0][:padding])
    assert sorted(sum(single, [])) == list(range(size))  # one process: every graph exactly once


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("window", [1, 3, 100])
def test_bucketed_steps_are_the_same_whatever_the_number_of_processes(world: int, window: int) -> None:
    size, batch = 103, 8
    single = global_batches(size, batch, 1, window=window)
    multi = global_batches(size, batch, world, window=window)
    assert len(single) == len(multi) == 13
    assert multi[:-1] == single[:-1]  # not just the same sets: each process's slice is in place
    assert sorted(sum(single, [])) == list(range(size))
    sizes = sizes_of(size)
    for step in single[:-1]:
        assert np.all(np.diff(sizes[step]) >= 0)  # ascending: process r's slice holds similar sizes


def test_bucketing_cuts_padding_and_window_one_only_reorders_inside_batches() -> None:
    size, batch = 4000, 64
    sizes = sizes_of(size)
    plain = [np.array(b) for b in global_batches(size, batch, 1)]
    within = [np.array(b) for b in global_batches(size, batch, 1, window=1)]
    assert [sorted(b.tolist()) for b in within] != [sorted(b.tolist()) for b in plain]  # own permutation...
    windowed = [np.array(b) for b in global_batches(size, batch, 1, window=20)]
    # ...for W = 1 sorting inside a batch changes no padding; windows of 20 batches cut most of it
    assert padded_share(sizes, windowed) < 0.25 * padded_share(sizes, plain)
    # with 4 processes, sorting inside the global batch already helps each slice
    assert padded_share(sizes, within, world=4) < padded_share(sizes, plain, world=4)


@pytest.mark.parametrize("window", [0, 2])
def test_each_epoch_has_its_own_deterministic_order(window: int) -> None:
    epochs = [sum(global_batches(30, 6, 2, epoch, window=window), []) for epoch in (0, 1, 0)]
    assert epochs[0] == epochs[2]
    assert epochs[0] != epochs[1]
    assert sorted(epochs[1]) == list(range(30))


def test_bucketing_needs_one_size_per_graph() -> None:
    with pytest.raises(ValueError, match="bucket_window > 0 needs the size of every item"):
        GlobalBatchSampler(Indices(5), 2, bucket_window=3)
    with pytest.raises(ValueError, match=r"sizes has shape \(4,\), expected one size per item: \(5,\)"):
        GlobalBatchSampler(Indices(5), 2, sizes=np.ones(4), bucket_window=3)


@pytest.mark.parametrize(("size", "world"), [(5, 2), (7, 3), (8, 4), (1001, 8)])
def test_eval_shards_hold_every_graph_exactly_once(size: int, world: int) -> None:
    shards = [list(EvalShardSampler(Indices(size), world, rank)) for rank in range(world)]
    assert sum(shards, []) == list(range(size))  # contiguous, in order, no repeats, none dropped
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert [len(EvalShardSampler(Indices(size), world, r)) for r in range(world)] == list(map(len, shards))


@pytest.mark.parametrize(("size", "world"), [(7, 3), (1001, 8)])
def test_size_sorted_eval_shards_still_hold_every_graph_exactly_once(size: int, world: int) -> None:
    sizes = sizes_of(size)
    shards = [list(EvalShardSampler(Indices(size), world, rank, sizes)) for rank in range(world)]
    plain = [list(EvalShardSampler(Indices(size), world, rank)) for rank in range(world)]
    assert [sorted(s) for s in shards] == plain  # the same shards, read in another order
    for shard in shards:
        assert np.all(np.diff(sizes[shard]) >= 0)


def test_eval_split_smaller_than_the_world_is_refused() -> None:
    with pytest.raises(ValueError, match="3 graphs cannot be shared by 4 processes"):
        EvalShardSampler(Indices(3), 4, 0)


def test_global_batch_must_divide_over_the_processes() -> None:
    assert per_device_batch_size(256, 8) == 32
    with pytest.raises(ValueError, match="batch_size=250 is the global batch and must be divisible by the 8"):
        per_device_batch_size(250, 8)


def epochs_of(loader: ResumableLoader, epochs: range) -> list[list]:
    """Iterate ``loader`` over ``epochs`` as Lightning does (set_epoch, then iter)."""
    out = []
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        out.append(list(loader))
    return out


def make_loader(
    size: int = 22,
    batch: int = 4,
    world: int = 1,
    rank: int = 0,
    dataset: Dataset | None = None,
    num_workers: int = 0,
    window: int = 0,
) -> ResumableLoader:
    dataset = Indices(size) if dataset is None else dataset
    sizes = sizes_of(len(dataset)) if window else None
    sampler = GlobalBatchSampler(dataset, batch, world, rank, seed=5, sizes=sizes, bucket_window=window)
    return ResumableLoader(dataset, sampler, collate, num_workers=num_workers)


@pytest.mark.parametrize("window", [0, 2])
@pytest.mark.parametrize("consumed", [0, 2, 5, 6])  # 6 batches per epoch: 6 = saved after the epoch's last batch
def test_loader_resumes_at_the_exact_next_batch(consumed: int, window: int) -> None:
    reference = make_loader(window=window)
    expected = sum(epochs_of(reference, range(3)), [])

    original = make_loader(window=window)
    original.sampler.set_epoch(1)
    iterator = iter(original)
    for _ in range(consumed):
        next(iterator)
    state = original.state_dict()
    assert state["epoch"] == 1 and state["batches_done"] == consumed

    resumed = make_loader(window=window)
    resumed.load_state_dict(state)
    epoch = resumed.sampler.epoch
    assert len(resumed) == 6  # Lightning's epoch length stays the full epoch
    first = list(resumed)  # Lightning iterates once without calling set_epoch again for this epoch
    rest = epochs_of(resumed, range(epoch + 1, 3))
    assert first + sum(rest, []) == expected[6 + consumed :]


@pytest.mark.parametrize("window", [0, 2])
def test_resume_on_another_number_of_processes_keeps_the_global_order(window: int) -> None:
    two = [make_loader(world=2, rank=r, window=window) for r in range(2)]
    two[0].sampler.set_epoch(0)
    iterator = iter(two[0])
    next(iterator), next(iterator)
    state = two[0].state_dict()
    single = make_loader(world=1, window=window)
    single.load_state_dict(state)
    expected = [b for b in list(make_loader(world=1, window=window))][2:]
    assert list(single) == expected


def test_resume_refuses_a_different_dataset_or_batch() -> None:
    state = make_loader(size=22, batch=4).state_dict()
    with pytest.raises(ValueError, match="22 training graphs in global batches of 4.*30 graphs in batches of 4"):
        make_loader(size=30, batch=4).load_state_dict(state)
    with pytest.raises(ValueError, match="bucket_window=0, this run 2.*--data.bucket_window 0"):
        make_loader(window=2).load_state_dict(state)
    del state["bucket_window"]  # a checkpoint from before size-aware batching
    make_loader().load_state_dict(state)


def test_worker_random_numbers_depend_only_on_seed_and_epoch() -> None:
    dataset = WorkerRandom(8)
    uninterrupted = epochs_of(make_loader(batch=2, dataset=dataset, num_workers=1), range(2))
    resumed = make_loader(batch=2, dataset=dataset, num_workers=1)
    resumed.load_state_dict({"epoch": 1, "batches_done": 0, "seed": 5, "dataset_size": 8, "global_batch": 2})
    assert list(resumed) == uninterrupted[1]
    assert uninterrupted[0] != uninterrupted[1]


def test_a_validation_interval_past_the_epoch_is_refused_only_when_validation_is_per_epoch() -> None:
    def trainer(interval: int | float, every: int | None, limit_val: int | float = 1.0) -> SimpleNamespace:
        return SimpleNamespace(val_check_interval=interval, check_val_every_n_epoch=every, limit_val_batches=limit_val)

    with pytest.raises(
        ConfigError,
        match=r"^trainer\.val_check_interval=8: is more than the 7 training batches of an "
        r"epoch \(50 training examples in global batches of 8\) while "
        r"trainer\.check_val_every_n_epoch is 1; use at most 7",
    ):
        check_validation_interval(trainer(8, 1), 7, 50, 8)
    check_validation_interval(trainer(7, 1), 7, 50, 8)  # the last batch of the epoch
    check_validation_interval(trainer(8, None), 7, 50, 8)  # counted across epochs
    check_validation_interval(trainer(1.0, 1), 7, 50, 8)  # a fraction
    check_validation_interval(trainer(8, 1, limit_val=0), 7, 50, 8)  # no validation at all
    check_validation_interval(None, 7, 50, 8)
