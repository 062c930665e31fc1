"""Fixtures of the benchmarks' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def torch_threads() -> Iterator[None]:
    """A benchmark run in the test's process sets torch's threads (its ``--threads``): the test's own are given
    back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
