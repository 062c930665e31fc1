"""Shortest-path structure of a whole batch of sampled subgraphs at once: SPD and degrees unpadded (numpy, in
the workers), first edges off the padded SPD (torch, on the device); together they equal
:func:`~graphormer_urpe.data.structure.graph_structure` exactly on graphs with sorted, distinct edges.

SPD: breadth-first search from every node at once on bit sets. ``reach_d[i]`` is the set of nodes within distance
d of node i (W 64-bit words), ``reach_{d+1}[i] = reach_d[i] | OR_{edges i -> k} reach_d[k]`` (one gather and one
segmented OR over the edges per level), and ``spd[i, j]`` is the number of levels at which j is not yet in
``reach_d[i]`` (at most five levels on radius-2 subgraphs).

Shape letters: B graphs, N nodes of the largest graph, V nodes, P node pairs (sum of n * n) and E edges of
the batch, W 64-bit words.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD

_BITS = 64


class BatchStructure(NamedTuple):
    """SPD and degrees of a batch, unpadded. Shapes: spd (P,) uint8, each graph's (n, n) block, row-major
    (255 = unreachable); in_degree, out_degree (V,) in :func:`edge_id_dtype`."""

    spd: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray


def edge_id_dtype(num_edges: int) -> np.dtype:
    """The smallest signed integer type (at least int16) that holds the edge ids of a batch and -1."""
    return np.result_type(np.min_scalar_type(-max(num_edges, 1)), np.int16)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (e.g. :func:`edge_id_dtype`'s, for tensors made on a device)."""
    return torch.from_numpy(np.empty(0, dtype)).dtype


def batched_graph_structure(
    num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray, out: BatchStructure | None = None
) -> BatchStructure:
    """SPD and degrees of B graphs, written into ``out`` (e.g. a shared-memory slot) or new arrays.

    Shapes: num_nodes (B,); edge_ptr (B + 1,), graph b owns edges ``edge_ptr[b]:edge_ptr[b + 1]``; edge_index
    (2, E) local (source, target) ids, sorted and distinct within each graph (else ValueError).
    """
    num_nodes, edge_ptr = np.asarray(num_nodes, dtype=np.int64), np.asarray(edge_ptr, dtype=np.int64)
    batch, n_max = len(num_nodes), max(int(num_nodes.max(initial=1)), 1)
    words = (n_max + _BITS - 1) // _BITS
    node_ptr = np.concatenate([[0], np.cumsum(num_nodes)])
    num_total = int(node_ptr[-1])
    local = np.arange(num_total) - np.repeat(node_ptr[:-1], num_nodes)

    graph_of_edge = np.repeat(np.arange(batch), np.diff(edge_ptr))
    src_local, dst_local = np.asarray(edge_index, dtype=np.int64)
    nodes_of_graph = num_nodes[graph_of_edge]  # (E,)
    if (np.minimum(src_local, dst_local) < 0).any() or (np.maximum(src_local, dst_local) >= nodes_of_graph).any():
        raise ValueError("edge_index names a node outside its graph")
    src, dst = src_local + node_ptr[graph_of_edge], dst_local + node_ptr[graph_of_edge]  # (E,) flat node ids
    if len(src) > 1 and not (np.diff(src * n_max + dst_local) > 0).all():
        raise ValueError("edges must be sorted by (graph, source, target) without duplicates")

    out_degree = np.bincount(src, minlength=num_total)
    heads = np.flatnonzero(out_degree)
    starts = np.concatenate([[0], np.cumsum(out_degree)[:-1]])[heads]  # first edge of each node with edges

    reach = np.zeros((num_total, words), dtype=np.uint64)  # (V, W)
    reach[np.arange(num_total), local // _BITS] = np.left_shift(np.uint64(1), (local % _BITS).astype(np.uint64))
    levels = [reach]
    while len(src) and len(levels) < UNREACHABLE_SPD:
        grown = levels[-1].copy()
        # (E, W) -> heads
        grown[heads] |= np.bitwise_or.reduceat(np.take(levels[-1], dst, axis=0), starts, axis=0)
        if np.array_equal(grown, levels[-1]):
            break
        levels.append(grown)
    reached = np.zeros((num_total, words * _BITS), dtype=np.uint8)  # (V, 64 W): levels with j in reach
    for level in levels:  # bit b of word w to column 64 w + b
        reached += np.unpackbits(level.astype("<u8", copy=False).view(np.uint8), axis=1, bitorder="little")

    # spd = levels at which j is not yet reached; unreachable pairs (never reached) keep 255
    pair_ptr = np.concatenate([[0], np.cumsum(num_nodes * num_nodes)])
    if out is None:
        degree_dtype = edge_id_dtype(len(src))
        out = BatchStructure(
            spd=np.empty(pair_ptr[-1], dtype=np.uint8),
            in_degree=np.empty(num_total, degree_dtype),
            out_degree=np.empty(num_total, degree_dtype),
        )
    out.spd.fill(UNREACHABLE_SPD)
    for b in range(batch):  # per-graph slices write straight into the graph's blocks
        rows, n, block = slice(node_ptr[b], node_ptr[b + 1]), num_nodes[b], slice(pair_ptr[b], pair_ptr[b + 1])
        counts = reached[rows, :n]  # (n, n)
        np.subtract(np.uint8(len(levels)), counts, out=out.spd[block].reshape(n, n), where=counts > 0)
    out.in_degree[:] = np.bincount(dst, minlength=num_total)
    out.out_degree[:] = out_degree
    return out


def batched_first_edges(
    spd: torch.Tensor, num_nodes: torch.Tensor, out_degree: torch.Tensor, edge_dst: torch.Tensor
) -> torch.Tensor:
    """First edge of a shortest path from every node to every node of its graph, on spd's device: edge ``i -> k``
    begins one to j when ``spd[k, j] == spd[i, j] - 1``; the first is the smallest k (edges are listed node after
    node by ascending target).

    Shapes: spd (B, N, N) uint8 padded (255: unreachable or padding); num_nodes (B,); out_degree (V,); edge_dst
    (E,) each edge's target in its graph; returns (V, N) edge ids in :func:`edge_id_dtype` (-1: none).
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
    # >= none: off
    candidate = (~on_path).float().mul_(none).add_(torch.arange(num_edges, device=device)[:, None])
    first = torch.full((len(node_graph), n_max), none, device=device).index_reduce_(0, edge_src, candidate, "amin")
    first[torch.arange(len(node_graph), device=device), node_local] = none  # j == i: no edge
    return first.masked_fill_(first >= none, NO_EDGE).to(torch_dtype(edge_id_dtype(num_edges)))  # (V, N)
