"""Direct transcriptions of official Graphormer code, for tests to compare against.

Written from microsoft/Graphormer, read for this purpose and not copied: v2
``graphormer/data/algos.pyx`` (``floyd_warshall``, ``get_all_edges``) as plain Python loops.
"""

from __future__ import annotations

import numpy as np

OFFICIAL_UNREACHABLE = 510


def floyd_warshall(adjacency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Official ``floyd_warshall``: (distances with 510 for unreachable pairs, path matrix).

    ``path[i, j]`` is the last k that strictly shortened (i, j), -1 for none, 510 for unreachable.
    """
    n = adjacency.shape[0]
    dist = np.where(adjacency, 1, 0).astype(np.int64)
    for i in range(n):
        for j in range(n):
            if i == j:
                dist[i, j] = 0
            elif dist[i, j] == 0:
                dist[i, j] = OFFICIAL_UNREACHABLE
    path = np.full((n, n), -1, dtype=np.int64)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                through = dist[i, k] + dist[k, j]
                if dist[i, j] > through:
                    dist[i, j] = through
                    path[i, j] = k
    far = dist >= OFFICIAL_UNREACHABLE
    path[far] = OFFICIAL_UNREACHABLE
    dist[far] = OFFICIAL_UNREACHABLE
    return dist, path


def all_nodes(path: np.ndarray, i: int, j: int) -> list[int]:
    """Official ``get_all_edges``: the intermediate nodes of the path from i to j."""
    k = int(path[i, j])
    if k == -1:
        return []
    return all_nodes(path, i, k) + [k] + all_nodes(path, k, j)


def official_path(path: np.ndarray, i: int, j: int) -> list[int]:
    """The node sequence official ``gen_edge_input`` walks from i to j."""
    return [i, *all_nodes(path, i, j), j]
