"""Shortest paths chosen as official Graphormer (v2 ``algos.pyx``) chooses them (``path_order: official``); they
are suffix-consistent, so ``first_edge`` represents them exactly (``docs/official-graphormer.md``)."""

from __future__ import annotations

import numpy as np

from graphormer_urpe.constants import NO_EDGE


def official_first_edges(dist: np.ndarray, edge_id: np.ndarray) -> np.ndarray:
    """First edge of the official shortest path of every pair of G graphs of n nodes: official ``floyd_warshall``
    gives ``path[i, j]``, the intermediate node k (-1 when joined directly); the first node of ``path(i, j)`` is
    that of ``path(i, k)``, so follow ``k = path[i, k]`` until it is -1 (at most n rounds).

    Shapes:
        dist: (G, n, n), -1 where unreachable; edge_id: (G, n, n) id of the edge i -> k, or -1 -> (G, n, n) int16
        edge ids, :data:`NO_EDGE` on the diagonal and for unreachable pairs."""
    num_graphs, n, _ = dist.shape
    unreachable = 510  # official: distances of unconnected pairs start at 510 (any value > n works)
    best = np.where(dist == 1, 1, unreachable).astype(np.int64)
    best[:, np.arange(n), np.arange(n)] = 0
    path = np.full(dist.shape, -1, dtype=np.int64)
    for k in range(n):  # row and column k do not change during step k (best[k, k] = 0), as in the loop
        through = best[:, :, k, None] + best[:, None, k, :]  # (G, n, n)
        shorter = best > through
        best = np.where(shorter, through, best)
        path[shorter] = k
    path[dist < 0] = -1
    g = np.arange(num_graphs)[:, None, None]
    i = np.arange(n)[None, :, None]
    target = np.broadcast_to(np.arange(n)[None, None, :], dist.shape).copy()  # (G, n, n)
    for _ in range(n):
        step = path[g, i, target]
        if (step < 0).all():
            break
        target = np.where(step >= 0, step, target)
    first = edge_id[g, i, target]
    first[(dist <= 0)] = NO_EDGE
    return first.astype(np.int16)
