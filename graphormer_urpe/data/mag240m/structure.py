"""Shortest-path structure of a whole batch of graphs at once, for subgraphs sampled on the fly.

:func:`~graphormer_urpe.data.structure.graph_structure` preprocesses one graph at a time, once,
for a cache. Subgraphs sampled around MAG240M papers change every batch, so their structure is
computed per batch, in two halves:

* :func:`batched_graph_structure` (numpy, in the DataLoader workers): SPD and degrees of B graphs
  in one pass, unpadded (each graph's (n, n) block;
  :class:`~graphormer_urpe.data.batch.CompactGraphBatch` holds them);
* :func:`batched_first_edges` (torch, on the training device, when the batch is padded): the first edge
  of a shortest path for every pair, read off the SPD with one comparison per edge and node
  (an (E, N) array: trivial on a GPU, and no bytes to hand over from the workers).

Together they equal ``graph_structure`` exactly (same distances, same first edges, same
tie-break: the smallest next node) on graphs whose edges are sorted and free of duplicates.

SPD method: breadth-first search from every node simultaneously on bit sets. ``reach_d[i]`` is
the set of nodes within distance d of node i, one bit per node of i's graph (W 64-bit words), and

    reach_{d+1}[i] = reach_d[i] | OR_{edges i -> k} reach_d[k]

costs one gather and one segmented OR over the E edges per level; ``spd[i, j]`` is the number of
levels at which j is not yet in ``reach_d[i]``. Sampled subgraphs have radius 2, so there are at
most five levels. First edges: edge ``i -> k`` begins a shortest path to j when
``spd[k, j] == spd[i, j] - 1``; the first edge is the lowest such edge id, i.e. the smallest k.

Shape letters: B graphs, N nodes of the largest graph, V nodes of the batch, E edges of the batch,
W 64-bit words per bit set.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD

_BITS = 64


class BatchStructure(NamedTuple):
    """SPD and degrees of a batch, without padding: the (n, n) block of each graph, row-major,
    block after block (P = sum of n * n pairs), as :class:`~graphormer_urpe.data.batch.CompactGraphBatch`
    holds them.

    Shapes:
        spd: (P,) uint8 (255 = unreachable); in_degree, out_degree: (V,) in :func:`edge_id_dtype`.
    """

    spd: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray


def _unpack(bits: np.ndarray) -> np.ndarray:
    """Bit sets as 0/1 bytes, bit b of word w at column ``64 w + b``. (R, W) -> (R, 64 W) uint8"""
    little = bits.astype("<u8", copy=False)
    return np.unpackbits(little.view(np.uint8).reshape(-1), bitorder="little").reshape(len(bits), -1)


def edge_id_dtype(num_edges: int) -> np.dtype:
    """The smallest signed integer type (at least int16) that holds the edge ids of a batch and -1."""
    return np.result_type(np.min_scalar_type(-max(num_edges, 1)), np.int16)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (e.g. :func:`edge_id_dtype`'s, for tensors made on a device)."""
    return torch.from_numpy(np.empty(0, dtype)).dtype


def batched_graph_structure(num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray,
                            out: BatchStructure | None = None) -> BatchStructure:
    """SPD and degrees of B graphs (first edges: :func:`batched_first_edges`, on the padded SPD).

    Args:
        num_nodes: (B,) nodes of each graph.
        edge_index: (2, E) directed edges, local node ids (source row, target row); graph b owns
            columns ``edge_ptr[b]:edge_ptr[b + 1]``, sorted by (source, target), no duplicates.
            An undirected graph lists both directions.
        edge_ptr: (B + 1,) offsets of each graph's edges.
        out: arrays to write the result into (shapes and dtypes as returned), e.g. views into a
            shared-memory slot; new ones if None.

    Returns:
        A :class:`BatchStructure` (``out`` if given).

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
    heads = np.flatnonzero(out_degree)
    starts = np.concatenate([[0], np.cumsum(out_degree)[:-1]])[heads]  # first edge of each node with edges

    reach = np.zeros((num_total, words), dtype=np.uint64)  # (V, W)
    reach[np.arange(num_total), local // _BITS] = np.left_shift(np.uint64(1), (local % _BITS).astype(np.uint64))
    levels = [reach]
    while len(src) and len(levels) < UNREACHABLE_SPD:
        grown = levels[-1].copy()
        grown[heads] |= np.bitwise_or.reduceat(np.take(levels[-1], dst, axis=0), starts, axis=0)  # (E, W) -> heads
        if np.array_equal(grown, levels[-1]):
            break
        levels.append(grown)
    reached = np.zeros((num_total, words * _BITS), dtype=np.uint8)  # (V, 64 W): levels with j in reach
    for level in levels:
        reached += _unpack(level)

    # spd = levels at which j is not yet reached; unreachable pairs (never reached) keep 255
    pair_ptr = np.concatenate([[0], np.cumsum(num_nodes * num_nodes)])
    if out is None:
        degree_dtype = edge_id_dtype(len(src))
        out = BatchStructure(spd=np.empty(pair_ptr[-1], dtype=np.uint8), in_degree=np.empty(num_total, degree_dtype),
                             out_degree=np.empty(num_total, degree_dtype))
    out.spd.fill(UNREACHABLE_SPD)
    for b in range(batch):  # per-graph slices write straight into the graph's blocks
        rows, n, block = slice(node_ptr[b], node_ptr[b + 1]), num_nodes[b], slice(pair_ptr[b], pair_ptr[b + 1])
        counts = reached[rows, :n]  # (n, n)
        np.subtract(np.uint8(len(levels)), counts, out=out.spd[block].reshape(n, n), where=counts > 0)
    out.in_degree[:] = in_degree
    out.out_degree[:] = out_degree
    return out


def batched_first_edges(spd: torch.Tensor, num_nodes: torch.Tensor, out_degree: torch.Tensor,
                edge_dst: torch.Tensor) -> torch.Tensor:
    """First edge of a shortest path from every node to every node of its graph, on spd's device.

    Edge ``e = i -> k`` begins a shortest path to j when ``spd[k, j] == spd[i, j] - 1``; the first
    edge is the lowest such id, which is the smallest k because the batch lists each node's edges
    by ascending target (the tie-break of ``graph_structure``).

    Args:
        spd: (B, N, N) uint8 padded SPD (255 = unreachable or padding).
        num_nodes: (B,) nodes of each graph.
        out_degree: (V,) out-degree of each node; the batch's edges are listed node after node.
        edge_dst: (E,) target of each edge, as a position in its graph; each node's edges sorted by it.

    Returns:
        (V, N) batch edge ids (-1: none, i.e. j is i, unreachable or padding), in
        :func:`edge_id_dtype` of E; row v is node v's row of its graph's (N, N) block. Exact for
        distances up to 255 (what the SPD holds).
    """
    device, (batch, n_max, _), num_edges = spd.device, spd.shape, len(edge_dst)
    node_graph = torch.repeat_interleave(torch.arange(batch, device=device), num_nodes)  # (V,)
    node_local = torch.arange(len(node_graph), device=device) - (torch.cumsum(num_nodes, 0) - num_nodes)[node_graph]
    edge_src = torch.repeat_interleave(torch.arange(len(node_graph), device=device), out_degree.long())  # (E,)
    edge_graph = node_graph[edge_src]
    from_source = spd[edge_graph, node_local[edge_src]]  # (E, N): spd[i, j] for every j
    from_target = spd[edge_graph, edge_dst.long()]  # (E, N): spd[k, j]
    on_path = from_target == from_source - 1  # (E, N); uint8: j == i wraps to 255 (cleared below)
    # ids as float32 (exact below 2^23 edges): index_reduce's amin takes floating types on every device
    none = float(num_edges)
    candidate = (~on_path).float().mul_(none).add_(torch.arange(num_edges, device=device)[:, None])  # >= none: off
    first = torch.full((len(node_graph), n_max), none, device=device).index_reduce_(0, edge_src, candidate, "amin")
    first[torch.arange(len(node_graph), device=device), node_local] = none  # j == i: no edge
    return first.masked_fill_(first >= none, NO_EDGE).to(torch_dtype(edge_id_dtype(num_edges)))  # (V, N)
