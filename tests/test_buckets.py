"""Size-aware batching: hand-computed buckets, determinism; the benchmarks' padding share."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from graphormer_urpe.data.buckets import bucketed_batches, size_sorted
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
from common import padded_share  # noqa: E402  (bench/common.py, importable once bench/ is on the path)


def test_a_window_is_sorted_by_size_and_cut_into_global_batches() -> None:
    sizes = np.array([5, 1, 4, 1, 3, 9, 2, 7])
    order = np.array([7, 6, 5, 4, 3, 2, 1, 0])  # the epoch's permutation
    generator = torch.Generator().manual_seed(0)
    batches = bucketed_batches(order, sizes, global_batch=2, window=2, generator=generator)
    # windows [7 6 5 4] and [3 2 1 0] sorted by size (ties keep the permutation's order: 3 before 1)
    expected = {(6, 4), (7, 5), (3, 1), (2, 0)}
    assert {tuple(b.tolist()) for b in batches} == expected
    permutation = torch.randperm(4, generator=torch.Generator().manual_seed(0)).tolist()
    assert [tuple(b.tolist()) for b in batches] == [[(6, 4), (7, 5), (3, 1), (2, 0)][i] for i in permutation]


def test_the_short_remainder_stays_last_and_everything_is_covered_once() -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 50, 103)
    order = rng.permutation(103)
    batches = bucketed_batches(order, sizes, 10, 3, torch.Generator().manual_seed(4))
    assert [len(b) for b in batches] == [10] * 10 + [3]
    assert sorted(np.concatenate(batches).tolist()) == list(range(103))
    for b in batches:
        assert np.all(np.diff(sizes[b]) >= 0)  # each batch ascending: process slices pad little
    # the last window holds 13 graphs: its 3 largest make the short batch
    last_window = order[90:]
    assert sorted(batches[-1].tolist()) == sorted(last_window[np.argsort(sizes[last_window], kind="stable")][10:])


def test_a_window_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="bucket window=0"):
        bucketed_batches(np.arange(4), np.ones(4, dtype=int), 2, 0, torch.Generator())


def test_size_sorted_keeps_ties_in_their_order() -> None:
    sizes = np.array([3, 1, 3, 2, 1])
    assert size_sorted(np.array([4, 2, 0, 1, 3]), sizes).tolist() == [4, 1, 3, 2, 0]


def test_padded_share_by_hand() -> None:
    sizes = np.array([1, 3, 2, 3])  # tokens with the graph token: 2, 4, 3, 4
    # one process pads [0, 1] to 4 tokens: useful 4 + 16 of 32; [2, 3]: 9 + 16 of 32
    assert padded_share(sizes, [np.array([0, 1]), np.array([2, 3])]) == pytest.approx(1 - 45 / 64)
    # two processes: every slice holds one graph, nothing is padding
    assert padded_share(sizes, [np.array([0, 1]), np.array([2, 3])], world=2) == 0.0
    assert padded_share(sizes, [np.array([0, 1, 2, 3])], graph_token=False) == pytest.approx(1 - 23 / 36)
