"""Per-graph preprocessing, once (never per epoch): shortest-path distances ``spd`` (uint8, 255 unreachable), the
first edge of one shortest path per pair, ``first_edge`` (int16, -1 none; the path follows by looking up
``first_edge[k, j]`` from the edge's target k), and degrees (``docs/pyg.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple, get_args

import numpy as np

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data.official_paths import official_first_edges
from graphormer_urpe.errors import check_choice

#: Which of several shortest paths: the smallest next node
#: at every step, or official Graphormer's (``algos.pyx``).
PathOrder = Literal["smallest_next", "official"]

#: Largest node count a graph may have: node ids and edge ids are stored as int16.
MAX_NODES = 32767
#: Largest directed-edge count a graph may have: first-edge ids are stored as int16.
MAX_EDGES = 32767
#: Graphs of n nodes are stacked into (G, n, n) blocks of at most this many elements.
_BLOCK_ELEMENTS = 1 << 22


class GraphStructure(NamedTuple):
    """Structural arrays of one graph of n nodes. Shapes: spd (n, n) uint8; first_edge (n, n) int16; degrees (n,)
    int16."""

    spd: np.ndarray
    first_edge: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray


def shortest_path_distances(adjacency: np.ndarray) -> np.ndarray:
    """Hop distances of G unweighted directed graphs of n nodes each, by breadth-first expansion:
    ``reach_{d+1} = reach_d @ (A + I) > 0``, one batched matmul per step (about ``diameter`` BLAS calls).

    Shapes: adjacency (G, n, n) bool, True for an edge i -> j -> (G, n, n) int16 distances, -1 if unreachable.
    """
    num_graphs, n, _ = adjacency.shape
    step = adjacency.astype(np.float32)
    step[:, np.arange(n), np.arange(n)] = 1.0  # A + I
    reach = np.broadcast_to(np.eye(n, dtype=bool), (num_graphs, n, n))
    dist = np.zeros((num_graphs, n, n), dtype=np.int16)
    reached = n * num_graphs
    for _ in range(1, n):
        dist += ~reach  # pairs not reached yet are one step farther
        reach = reach.astype(np.float32) @ step > 0  # (G, n, n)
        if (now := np.count_nonzero(reach)) == reached:
            break
        reached = now
    dist[~reach] = -1
    return dist


def first_edges(dist: np.ndarray, edge_id: np.ndarray) -> np.ndarray:
    """Id of the first edge of a shortest path for every ordered pair of G graphs of n nodes.

    The next node from i towards j is the smallest k with an edge i -> k and ``dist[k, j] == dist[i, j] - 1``.
    Every edge is tested against all targets j at once (e * n comparisons, not n^3); the candidates, listed by
    (j, g, i, k), are sorted already, so the first of each (j, g, i) run is the smallest k.

    Shapes: dist (G, n, n) int16; edge_id (G, n, n) int64 id of the edge i -> k or -1 -> (G, n, n) int16 edge ids,
    :data:`NO_EDGE` on the diagonal and for unreachable pairs."""
    num_graphs, n, _ = dist.shape
    first = np.full(dist.shape, NO_EDGE, dtype=np.int16)
    graph, source, nxt = np.nonzero(edge_id >= 0)  # sorted by (g, i, k)
    per_block = max(1, _BLOCK_ELEMENTS // max(1, n))
    for e0 in range(0, len(graph), per_block):  # blocks in (g, i, k) order: earlier blocks have smaller k
        g, i, k = graph[e0 : e0 + per_block], source[e0 : e0 + per_block], nxt[e0 : e0 + per_block]
        from_i = dist[g, i]  # (b, n): dist[i, j] for every j
        on_path = (dist[g, k] == from_i - 1) & (from_i >= 1)  # (b, n): k is one step closer to j
        if e0:
            on_path &= first[g, i] == NO_EDGE  # pairs an earlier block settled keep their smaller k
        j, edge = np.nonzero(on_path.T)  # sorted by (j, edge), so by (j, g, i, k)
        key = (j * num_graphs + g[edge]) * n + i[edge]
        smallest = np.ones(len(key), dtype=bool)
        smallest[1:] = key[1:] != key[:-1]
        j, edge = j[smallest], edge[smallest]
        first[g[edge], i[edge], j] = edge_id[g[edge], i[edge], k[edge]]
    return first


class FlatStructures(NamedTuple):
    """Structural arrays of G graphs concatenated in input order, as the cache stores them.

    Shapes:
        spd: (sum n^2,) uint8; first_edge: (sum n^2,) int16; in_degree, out_degree: (sum n,) int16;
        node_ptr: (G + 1,) int64 and pair_ptr: (G + 1,) int64 offsets of each graph's nodes and pairs."""

    spd: np.ndarray
    first_edge: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray
    node_ptr: np.ndarray
    pair_ptr: np.ndarray


def check_path_order(path_order: str, key: str = "path_order") -> None:
    """Refuse an unknown path order, naming the option ``key`` it came from."""
    check_choice(key, path_order, get_args(PathOrder))


def graph_structures(
    num_nodes: Sequence[int], edge_indices: Sequence[np.ndarray], path_order: PathOrder = "smallest_next"
) -> FlatStructures:
    """SPD, first edges of shortest paths, and degrees of many graphs, concatenated in input order; graphs of
    equal node count are stacked, and each graph's result does not depend on the others. Distances saturate
    at :data:`UNREACHABLE_SPD` (only ever used up to ``spatial_pos_max``, far below it).

    Shapes:
        edge_indices: per graph (2, e) directed edges (an undirected graph lists both directions, as PyG
        and ogb do), n <= :data:`MAX_NODES`, e <= :data:`MAX_EDGES`."""
    if len(num_nodes) != len(edge_indices):
        raise ValueError(f"{len(num_nodes)} node counts but {len(edge_indices)} edge lists")
    check_path_order(path_order)
    sizes = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
    if sizes.size and (sizes.min() < 0 or sizes.max() > MAX_NODES):
        g = int(np.argmax((sizes < 0) | (sizes > MAX_NODES)))
        raise ValueError(f"graph {g} has {sizes[g]} nodes; 0 to {MAX_NODES} are supported")
    for g, edges in enumerate(edge_indices):
        _check_edge_count(np.shape(edges)[-1], f"graph {g}")
    node_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    pair_ptr = np.concatenate([[0], np.cumsum(sizes * sizes)]).astype(np.int64)
    out = FlatStructures(
        np.empty(pair_ptr[-1], np.uint8),
        np.empty(pair_ptr[-1], np.int16),
        np.empty(node_ptr[-1], np.int16),
        np.empty(node_ptr[-1], np.int16),
        node_ptr,
        pair_ptr,
    )
    for n in np.unique(sizes).tolist():
        members = np.flatnonzero(sizes == n)
        per_block = max(1, _BLOCK_ELEMENTS // max(1, n * n))
        for b0 in range(0, len(members), per_block):
            block = members[b0 : b0 + per_block]
            spd, first, in_degree, out_degree = _equal_size_structures(n, [edge_indices[g] for g in block], path_order)
            pairs = pair_ptr[block][:, None] + np.arange(n * n)  # (G, n*n) positions in the output
            nodes = node_ptr[block][:, None] + np.arange(n)  # (G, n)
            out.spd[pairs] = spd.reshape(len(block), n * n)
            out.first_edge[pairs] = first.reshape(len(block), n * n)
            out.in_degree[nodes] = in_degree
            out.out_degree[nodes] = out_degree
    return out


def _check_edge_count(num_edges: int, what: str) -> None:
    if num_edges > MAX_EDGES:
        raise ValueError(
            f"{what} has {num_edges} directed edges; at most {MAX_EDGES} are supported "
            "(first-edge ids are stored as int16)"
        )


def _equal_size_structures(n: int, edge_indices: list[np.ndarray], path_order: PathOrder) -> tuple[np.ndarray, ...]:
    """SPD (G, n, n) uint8, first edges (G, n, n) int16 and degrees (G, n) int16 of G graphs of n nodes."""
    num_graphs = len(edge_indices)
    edges = [np.asarray(e, dtype=np.int64).reshape(2, -1) for e in edge_indices]
    counts = np.array([e.shape[1] for e in edges])
    graph = np.repeat(np.arange(num_graphs), counts)
    src, dst = np.concatenate(edges, axis=1)
    local_id = np.arange(len(src)) - np.repeat(np.cumsum(counts) - counts, counts)
    adjacency = np.zeros((num_graphs, n, n), dtype=bool)
    adjacency[graph, src, dst] = True
    edge_id = np.full((num_graphs, n, n), -1, dtype=np.int64)
    pair, first_listed = np.unique((graph * n + src) * n + dst, return_index=True)
    edge_id.reshape(-1)[pair] = local_id[first_listed]  # the first listed of duplicate edges wins
    dist = shortest_path_distances(adjacency)
    spd = np.where((dist < 0) | (dist > UNREACHABLE_SPD), UNREACHABLE_SPD, dist).astype(np.uint8)
    in_degree = np.bincount(graph * n + dst, minlength=num_graphs * n).reshape(num_graphs, n)
    out_degree = np.bincount(graph * n + src, minlength=num_graphs * n).reshape(num_graphs, n)
    first = official_first_edges(dist, edge_id) if path_order == "official" else first_edges(dist, edge_id)
    return spd, first, in_degree.astype(np.int16), out_degree.astype(np.int16)


def graph_structure(num_nodes: int, edge_index: np.ndarray, path_order: PathOrder = "smallest_next") -> GraphStructure:
    """SPD, first edges of shortest paths, and degrees of one graph (see :func:`graph_structures`).

    Example:
        >>> s = graph_structure(4, np.array([[0, 1], [1, 2]]))  # a directed path 0 -> 1 -> 2 and an isolated node 3
        >>> s.spd.tolist()  # 255: unreachable
        [[0, 1, 2, 255], [255, 0, 1, 255], [255, 255, 0, 255], [255, 255, 255, 0]]
        >>> s.first_edge[0].tolist(), s.in_degree.tolist()  # edge 0 (0 -> 1) starts the paths from 0 to 1 and 2
        ([-1, 0, 0, -1], [0, 1, 1, 0])
    """
    if not 0 <= num_nodes <= MAX_NODES:
        raise ValueError(f"graph has {num_nodes} nodes; 0 to {MAX_NODES} are supported")
    _check_edge_count(np.shape(edge_index)[-1], "graph")
    return GraphStructure(*(block[0] for block in _equal_size_structures(int(num_nodes), [edge_index], path_order)))
