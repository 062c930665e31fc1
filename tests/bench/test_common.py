"""The benchmarks' shared measures (bench/common.py): the padding share of batches, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from bench.common import padded_share


def test_padded_share_by_hand() -> None:
    sizes = np.array([1, 3, 2, 3])  # tokens with the graph token: 2, 4, 3, 4
    # one process pads [0, 1] to 4 tokens: useful 4 + 16 of 32; [2, 3]: 9 + 16 of 32
    assert padded_share(sizes, [np.array([0, 1]), np.array([2, 3])]) == pytest.approx(1 - 45 / 64)
    # two processes: every slice holds one graph, nothing is padding
    assert padded_share(sizes, [np.array([0, 1]), np.array([2, 3])], world=2) == 0.0
    assert padded_share(sizes, [np.array([0, 1, 2, 3])], graph_token=False) == pytest.approx(1 - 23 / 36)
