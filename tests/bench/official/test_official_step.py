"""bench/official/official_step.py on a small epoch: official (transformers' port) on our batches and on its own,
ours with the same weights; every side is timed and compared with each official side (the figures of
docs/throughput.md)."""

from __future__ import annotations

import re

import pytest

from bench.official import official_step


@pytest.mark.slow
@pytest.mark.usefixtures("torch_threads")
def test_official_on_both_batchings_against_ours(capsys: pytest.CaptureFixture) -> None:
    official_step.main(["--settings", "zinc", "--batch-size", "8", "--epoch-batches", "2", "--rounds", "1"])
    rows = {
        match[0]: match[1]
        for match in re.findall(r"^  (.+?) +([0-9.]+) graphs/CPU-s", capsys.readouterr().out, flags=re.MULTILINE)
    }
    assert list(rows) == ["official, same batches", "official, its own batches", "ours eager rpe", "ours eager urpe"]
    assert all(float(rate) > 0 for rate in rows.values())


def test_officials_own_batches_are_a_permutation_of_the_same_molecules() -> None:
    """The same molecules in both batchings, each once: only their grouping differs."""
    orders = official_step.batch_orders(official_step.molecules("zinc", 32), 8)
    for batches in orders.values():
        assert sorted(int(i) for batch in batches for i in batch) == list(range(32))
        assert [len(batch) for batch in batches] == [8, 8, 8, 8]
    assert orders["own"] != orders["same"]
