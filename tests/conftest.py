"""Shared test helpers: small random graphs in the cache's record format."""

from __future__ import annotations

import numpy as np
import pytest

from graphormer_urpe.data.batch import GraphRecord
from graphormer_urpe.data.transforms import graph_structure


def random_edges(rng: np.random.Generator, n: int, extra: int = 2, connected: bool = True) -> np.ndarray:
    """(2, e) undirected edge list (both directions) of a random tree plus ``extra`` chords.

    With ``connected=False`` the last third of the nodes forms a separate component.
    """
    split = n - n // 3 if not connected and n >= 3 else n
    pairs = [(k, int(rng.integers(0, k))) for k in range(1, split)]
    pairs += [(k, int(rng.integers(split, k))) for k in range(split + 1, n)]
    for _ in range(extra):
        a, b = (int(v) for v in rng.integers(0, split, 2))
        if a != b and (a, b) not in pairs and (b, a) not in pairs:
            pairs.append((a, b))
    if not pairs:
        return np.zeros((2, 0), dtype=np.int64)
    half = np.array(pairs, dtype=np.int64).T
    return np.concatenate([half, half[::-1]], axis=1)


def make_record(rng: np.random.Generator, n: int, index: int = 0, node_vocab=(28,), edge_vocab=(4,),
                connected: bool = True, edges: np.ndarray | None = None) -> GraphRecord:
    """A preprocessed random graph with n nodes, as the cache would return it."""
    edge_index = random_edges(rng, n, connected=connected) if edges is None else edges
    structure = graph_structure(n, edge_index)
    return GraphRecord(
        x=np.stack([rng.integers(0, v, n) for v in node_vocab], axis=1),
        edge_index=edge_index,
        edge_attr=np.stack([rng.integers(0, v, edge_index.shape[1]) for v in edge_vocab], axis=1),
        spd=structure.spd,
        first_edge=structure.first_edge,
        in_degree=structure.in_degree,
        out_degree=structure.out_degree,
        y=rng.normal(size=1).astype(np.float32),
        index=index,
    )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def fresh_run_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's CLI picks its own run directory (the variable is process-wide)."""
    from graphormer_urpe.cli import RUN_DIR_ENV

    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
