"""Shortest-path structure of a whole batch of graphs at once, for subgraphs sampled on the fly.

:func:`~graphormer_urpe.data.transforms.graph_structure` preprocesses one graph at a time, once,
for a cache. Subgraphs sampled around MAG240M papers change every epoch, so their structure is
computed in the DataLoader workers for every batch; this module does that for B graphs in one
pass of numpy operations and returns them unpadded (each graph's (n, n) block; the training
process pads them on its device, :class:`~graphormer_urpe.data.batch.CompactGraphBatch`). Results equal
``graph_structure`` exactly (same distances, same first edges, same tie-break: the smallest next
node) on graphs whose edges are sorted and free of duplicates.

Method: breadth-first search from every node simultaneously on bit sets. ``reach_d[i]`` is the
set of nodes within distance d of node i, one bit per node of i's graph (W 64-bit words), and

    reach_{d+1}[i] = reach_d[i] | OR_{edges i -> k} reach_d[k]

costs one gather and one segmented OR over the E edges per level. Then

    spd[i, j]       = number of levels d at which j is not yet in reach_d[i]
    on_path(i -> k) = OR_d (reach_d[k] & ~reach_d[i])    (the j with spd[k, j] = spd[i, j] - 1)

and the first edge of a shortest path from i to j is i's lowest edge (smallest k) whose
``on_path`` holds j. Sampled subgraphs have radius 2, so there are at most five levels.

Shape letters: B graphs, N nodes of the largest graph, V nodes of the batch, E edges of the batch,
W 64-bit words per bit set.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD

_BITS = 64


class BatchStructure(NamedTuple):
    """Structural arrays of a batch, without padding: the (n, n) block of each graph, row-major,
    block after block (P = sum of n * n pairs), as :class:`~graphormer_urpe.data.batch.CompactGraphBatch`
    holds them.

    Shapes:
        spd: (P,) uint8 (255 = unreachable); first_edge: (P,) ids into the batch's edge list (-1 if
        none), in the smallest signed integer type that holds them (int16 below 32,767 edges);
        in_degree, out_degree: (V,) in that type too.
    """

    spd: np.ndarray
    first_edge: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray


def _unpack(bits: np.ndarray) -> np.ndarray:
    """Bit sets as 0/1 bytes, bit b of word w at column ``64 w + b``. (R, W) -> (R, 64 W) uint8"""
    little = bits.astype("<u8", copy=False)
    return np.unpackbits(little.view(np.uint8).reshape(-1), bitorder="little").reshape(len(bits), -1)


def edge_id_dtype(num_edges: int) -> np.dtype:
    """The smallest signed integer type (at least int16) that holds the edge ids of a batch and -1."""
    return np.result_type(np.min_scalar_type(-max(num_edges, 1)), np.int16)


def batched_graph_structure(num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray,
                            out: BatchStructure | None = None) -> BatchStructure:
    """SPD, first edges of shortest paths and degrees of B graphs.

    Args:
        num_nodes: (B,) nodes of each graph.
        edge_index: (2, E) directed edges, local node ids (source row, target row); graph b owns
            columns ``edge_ptr[b]:edge_ptr[b + 1]``, sorted by (source, target), no duplicates.
            An undirected graph lists both directions.
        edge_ptr: (B + 1,) offsets of each graph's edges.
        out: arrays to write the result into (shapes and dtypes as returned; the integer ones in
            :func:`edge_id_dtype` of E), e.g. views into a shared-memory slot; new ones if None.

    Returns:
        A :class:`BatchStructure` (``out`` if given); ``first_edge`` holds column ids of ``edge_index``.

    Raises:
        ValueError: edges unsorted, duplicated, or naming a node outside their graph.
    """
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    edge_ptr = np.asarray(edge_ptr, dtype=np.int64)
    batch, n_max = len(num_nodes), max(int(num_nodes.max(initial=1)), 1)
    words = (n_max + _BITS - 1) // _BITS
    node_ptr = np.concatenate([[0], np.cumsum(num_nodes)])
    num_total = int(node_ptr[-1])
    local = np.arange(num_total) - np.repeat(node_ptr[:-1], num_nodes)

    graph_of_edge = np.repeat(np.arange(batch), np.diff(edge_ptr))
    src_local, dst_local = np.asarray(edge_index, dtype=np.int64)
    if len(src_local) and ((src_local < 0).any() or (dst_local < 0).any()
                           or (src_local >= num_nodes[graph_of_edge]).any()
                           or (dst_local >= num_nodes[graph_of_edge]).any()):
        raise ValueError("edge_index names a node outside its graph")
    src = src_local + node_ptr[graph_of_edge]  # (E,) flat node ids
    dst = dst_local + node_ptr[graph_of_edge]
    if len(src) > 1 and not (np.diff(src * n_max + dst_local) > 0).all():
        raise ValueError("edges must be sorted by (graph, source, target) without duplicates")

    out_degree = np.bincount(src, minlength=num_total)
    in_degree = np.bincount(dst, minlength=num_total)
    edge_dtype = edge_id_dtype(len(src))
    row_start = np.concatenate([[0], np.cumsum(out_degree)[:-1]]).astype(edge_dtype)  # first edge of each node
    heads = np.flatnonzero(out_degree)
    starts = row_start[heads]

    reach = np.zeros((num_total, words), dtype=np.uint64)  # (V, W)
    reach[np.arange(num_total), local // _BITS] = np.left_shift(np.uint64(1), (local % _BITS).astype(np.uint64))
    levels = [reach]
    at_target = []  # at_target[d]: levels[d] of each edge's target, (E, W)
    while len(src) and len(levels) < UNREACHABLE_SPD:
        at_target.append(np.take(levels[-1], dst, axis=0))
        grown = levels[-1].copy()
        grown[heads] |= np.bitwise_or.reduceat(at_target[-1], starts, axis=0)
        if np.array_equal(grown, levels[-1]):
            break
        levels.append(grown)

    reached = np.zeros((num_total, words * _BITS), dtype=np.uint8)  # (V, 64 W): levels with j in reach
    for level in levels:
        reached += _unpack(level)

    on_path = np.zeros((len(src), words), dtype=np.uint64)  # (E, W)
    for level, target_level in zip(levels, at_target):
        on_path |= target_level & ~np.take(level, src, axis=0)
    # rank[i, j]: index among i's edges (ascending target) of the first one on a path to j
    rank = np.zeros((num_total, words * _BITS), dtype=np.uint8 if out_degree.max(initial=0) <= 256 else np.uint16)
    taken = np.zeros((num_total, words), dtype=np.uint64)
    for r in range(int(out_degree.max(initial=0)) - 1):
        rows = np.flatnonzero(out_degree > r + 1)
        taken[rows] |= np.take(on_path, row_start[rows] + r, axis=0)
        rank[rows] += _unpack(~np.take(taken, rows, axis=0))

    # spd = levels at which j is not yet reached; unreachable pairs (never reached) keep 255
    pair_ptr = np.concatenate([[0], np.cumsum(num_nodes * num_nodes)])
    if out is None:
        out = BatchStructure(spd=np.empty(pair_ptr[-1], dtype=np.uint8), first_edge=np.empty(pair_ptr[-1], edge_dtype),
                             in_degree=np.empty(num_total, edge_dtype), out_degree=np.empty(num_total, edge_dtype))
    spd, first_edge = out.spd, out.first_edge  # (P,)
    spd.fill(UNREACHABLE_SPD)
    first_edge.fill(NO_EDGE)
    for b in range(batch):  # per-graph slices write straight into the graph's blocks
        rows, n, block = slice(node_ptr[b], node_ptr[b + 1]), num_nodes[b], slice(pair_ptr[b], pair_ptr[b + 1])
        counts = reached[rows, :n]  # (n, n)
        np.subtract(np.uint8(len(levels)), counts, out=spd[block].reshape(n, n), where=counts > 0)
        np.add(row_start[rows, None], rank[rows, :n], out=first_edge[block].reshape(n, n),
               where=(counts > 0) & (counts < len(levels)))
    out.in_degree[:] = in_degree
    out.out_degree[:] = out_degree
    return out
