"""Per-graph preprocessing: shortest-path distances, first edges of shortest paths, degrees.

Everything here runs once per graph when a dataset is first processed (never per epoch) and
returns small-integer numpy arrays that the cache stores as they are.

Shortest paths are encoded compactly. For every ordered pair ``(i, j)`` we keep

* ``spd[i, j]``        the hop count of a shortest path from i to j (``uint8``;
  :data:`~graphormer_urpe.constants.UNREACHABLE_SPD` when j cannot be reached), and
* ``first_edge[i, j]`` the id of the first edge ``i -> k`` on one shortest path (``int16``;
  :data:`~graphormer_urpe.constants.NO_EDGE` when ``i == j`` or j is unreachable).

The whole path follows by repeatedly looking up ``first_edge[k, j]`` from the edge's target ``k``,
so the edge ids of the first K hops of every pair cost ``n^2`` integers instead of the official
Graphormer's ``n^2 * K * F`` edge-feature tensor. Among several shortest paths the one whose next
node has the smallest index is taken at every step, so the encoding is deterministic.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD

#: Largest node count a graph may have: node ids and edge ids are stored as int16.
MAX_NODES = 32767
#: Number of (source, k, target) booleans evaluated at once when choosing next hops.
_NEXT_HOP_BLOCK = 1 << 22


class GraphStructure(NamedTuple):
    """Structural arrays of one graph with n nodes and e directed edges.

    Shapes:
        spd: (n, n) uint8; first_edge: (n, n) int16; in_degree, out_degree: (n,) int16.
    """

    spd: np.ndarray
    first_edge: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray


def shortest_path_distances(adjacency: np.ndarray) -> np.ndarray:
    """Hop distances of an unweighted directed graph by breadth-first frontier expansion.

    ``frontier_{d+1} = (frontier_d @ A > 0) & ~reached``: each step is one small float matmul, so
    a molecule needs about ``diameter`` BLAS calls instead of Floyd-Warshall's ``n^3`` loop.

    Args:
        adjacency: (n, n) bool, ``adjacency[i, j]`` when there is an edge i -> j.

    Returns:
        (n, n) int16 distances, -1 where j is unreachable from i.
    """
    n = adjacency.shape[0]
    dist = np.full((n, n), -1, dtype=np.int16)
    np.fill_diagonal(dist, 0)
    reached = np.eye(n, dtype=bool)
    frontier = reached
    adjacency_f = adjacency.astype(np.float32)
    for d in range(1, n):
        frontier = (frontier.astype(np.float32) @ adjacency_f > 0) & ~reached
        if not frontier.any():
            break
        dist[frontier] = d
        reached |= frontier
    return dist


def first_edges(dist: np.ndarray, edge_id: np.ndarray) -> np.ndarray:
    """Id of the first edge of a shortest path for every ordered pair.

    The next node from i towards j is the smallest k with an edge i -> k and
    ``dist[k, j] == dist[i, j] - 1``.

    Args:
        dist: (n, n) int16 from :func:`shortest_path_distances`.
        edge_id: (n, n) int64, id of the edge i -> k or -1.

    Returns:
        (n, n) int16 edge ids, :data:`NO_EDGE` on the diagonal and for unreachable pairs.
    """
    n = dist.shape[0]
    first = np.full((n, n), NO_EDGE, dtype=np.int16)
    has_edge = edge_id >= 0
    block = max(1, _NEXT_HOP_BLOCK // max(1, n * n))
    for start in range(0, n, block):
        rows = slice(start, min(n, start + block))
        target = dist[rows] - 1  # (b, n): distance the next node must have to j
        # on_path[i, k, j]: edge i -> k exists and k is one step closer to j
        on_path = has_edge[rows, :, None] & (dist[None, :, :] == target[:, None, :])
        on_path &= (target >= 0)[:, None, :]
        next_node = on_path.argmax(axis=1)  # (b, n): smallest such k
        found = on_path.any(axis=1)
        chosen = np.take_along_axis(edge_id[rows], next_node, axis=1)
        first[rows] = np.where(found, chosen, NO_EDGE)
    return first


def graph_structure(num_nodes: int, edge_index: np.ndarray) -> GraphStructure:
    """SPD, first edges of shortest paths, and degrees of one graph.

    Args:
        num_nodes: n, at most :data:`MAX_NODES`.
        edge_index: (2, e) integer array of directed edges (source row, target row); an
            undirected graph lists both directions, as PyG and ogb do.

    Returns:
        A :class:`GraphStructure`; distances saturate at :data:`UNREACHABLE_SPD` (they are only
        ever used up to ``spatial_pos_max``, far below it).
    """
    if num_nodes > MAX_NODES:
        raise ValueError(f"graph has {num_nodes} nodes; at most {MAX_NODES} are supported")
    src, dst = np.asarray(edge_index, dtype=np.int64)
    adjacency = np.zeros((num_nodes, num_nodes), dtype=bool)
    adjacency[src, dst] = True
    edge_id = np.full((num_nodes, num_nodes), -1, dtype=np.int64)
    edge_id[src[::-1], dst[::-1]] = np.arange(len(src))[::-1]  # first of duplicate edges wins
    dist = shortest_path_distances(adjacency)
    spd = np.where((dist < 0) | (dist > UNREACHABLE_SPD), UNREACHABLE_SPD, dist).astype(np.uint8)
    return GraphStructure(
        spd=spd,
        first_edge=first_edges(dist, edge_id),
        in_degree=np.bincount(dst, minlength=num_nodes).astype(np.int16),
        out_degree=np.bincount(src, minlength=num_nodes).astype(np.int16),
    )
