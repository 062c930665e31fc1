"""Small random graphs for tests: edge lists, and graphs preprocessed into the cache's record format."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphormer_urpe.data.batch import GraphRecord
from graphormer_urpe.data.structure import graph_structure


def random_edges(rng: np.random.Generator, n: int, extra: int = 2, connected: bool = True) -> np.ndarray:
    """The undirected edge list (both directions) of a random tree on ``n`` nodes plus ``extra`` chords.

    With ``connected=False`` the last third of the nodes forms a separate component.

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


def make_record(rng: np.random.Generator, n: int, index: int = 0, node_vocab: Sequence[int] = (28,),
                edge_vocab: Sequence[int] = (4,), connected: bool = True,
                edges: np.ndarray | None = None) -> GraphRecord:
    """A preprocessed random graph with ``n`` nodes, as the cache would return it.

    Args:
        rng: source of the edges (unless ``edges`` is given), the features and the target.
        n: number of nodes.
        index: the graph's index in its split.
        node_vocab: size of each categorical node feature's vocabulary (one column per entry).
        edge_vocab: size of each categorical edge feature's vocabulary (one column per entry).
        connected: whether the random edges form one component (see :func:`random_edges`).
        edges: the edge list to use instead of random edges.

    Shapes:
        edges: (2, e), every edge in both directions.
    """
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
