"""Small random graphs for tests: edge lists, and graphs preprocessed into the cache's record format."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphormer_urpe.data.batch import GraphRecord


def random_edges(rng: np.random.Generator, n: int, extra: int = 2, connected: bool = True) -> np.ndarray:
    """A random tree on ``n`` nodes plus ``extra`` chords; ``connected=False``: the last third is a separate component.

    Shapes:
        returns: (2, e) int64, every edge in both directions.
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


def make_record(
    rng: np.random.Generator,
    n: int,
    index: int = 0,
    node_vocab: Sequence[int] = (28,),
    edge_vocab: Sequence[int] = (4,),
    connected: bool = True,
    edges: np.ndarray | None = None,
) -> GraphRecord:
    """A random graph (:func:`random_edges` unless ``edges``) as the cache returns it, a feature column per vocabulary.

    Shapes:
        edges: (2, e), every edge in both directions.
    """
    edge_index = random_edges(rng, n, connected=connected) if edges is None else edges
    return GraphRecord.from_graph(
        np.stack([rng.integers(0, v, n) for v in node_vocab], axis=1),
        edge_index,
        np.stack([rng.integers(0, v, edge_index.shape[1]) for v in edge_vocab], axis=1),
        rng.normal(size=1).astype(np.float32),
        index,
    )
