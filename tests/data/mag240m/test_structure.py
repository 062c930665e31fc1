"""batched_graph_structure (SPD, degrees) and batched_first_edges together equal graph_structure graph by graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data.mag240m.structure import BatchStructure, batched_first_edges, batched_graph_structure
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.testing.graphs import random_edges


def _canonical(edges: np.ndarray) -> np.ndarray:
    """Sorted by (source, target), duplicates and self-loops removed."""
    edges = edges[:, edges[0] != edges[1]]
    return np.unique(edges, axis=1) if edges.size else np.zeros((2, 0), dtype=np.int64)


def _graphs(rng: np.random.Generator) -> list[tuple[int, np.ndarray]]:
    graphs = [(1, np.zeros((2, 0), np.int64)), (4, np.zeros((2, 0), np.int64))]  # single node, no edges
    for n in (2, 3, 7, 20, 70, 130):  # 130 nodes: bit sets of three 64-bit words
        graphs.append((n, _canonical(random_edges(rng, n, extra=n // 3))))
        graphs.append((n, _canonical(random_edges(rng, n, extra=2, connected=False))))
        directed = rng.integers(0, n, (2, 2 * n))  # directed, with hubs and unreachable pairs
        graphs.append((n, _canonical(directed)))
    star = np.stack([np.zeros(300, np.int64), np.arange(1, 301)])  # degree 300 > 255: wide ranks
    graphs.append((301, _canonical(np.concatenate([star, star[::-1]], axis=1))))
    return graphs


def _blocks(
    result: BatchStructure, sizes: np.ndarray, edge_index: np.ndarray, device: torch.device | str = "cpu"
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(spd, first_edge) of each graph as (n, n) arrays: SPD cut out of the flat blocks, first
    edges from :func:`batched_first_edges` on the padded SPD (on ``device``), as ``CompactGraphBatch.pad`` does."""
    ends = np.cumsum(sizes * sizes)
    spd_blocks = [spd.reshape(n, n) for n, spd in zip(sizes, np.split(result.spd, ends[:-1]))]
    n_max = int(sizes.max())
    padded = np.full((len(sizes), n_max, n_max), UNREACHABLE_SPD, dtype=np.uint8)
    for b, block in enumerate(spd_blocks):
        padded[b, : len(block), : len(block)] = block
    inputs = (padded, sizes, result.out_degree, edge_index[1])
    first = batched_first_edges(*(torch.from_numpy(a).to(device) for a in inputs)).cpu().numpy()  # (V, N)
    rows = np.split(first, np.cumsum(sizes)[:-1])
    return [(spd, row[:, : len(spd)]) for spd, row in zip(spd_blocks, rows)]


@pytest.mark.device
def test_equals_graph_structure_on_every_graph(rng: np.random.Generator, device: torch.device) -> None:
    """First edges computed on the device (``index_reduce_`` on a GPU) equal the CPU reference."""
    graphs = _graphs(rng)
    sizes = np.array([n for n, _ in graphs])
    edge_ptr = np.concatenate([[0], np.cumsum([e.shape[1] for _, e in graphs])])
    edge_index = np.concatenate([e for _, e in graphs], axis=1)
    result = batched_graph_structure(sizes, edge_index, edge_ptr)
    pairs, nodes = int((sizes * sizes).sum()), int(sizes.sum())
    assert result.spd.shape == (pairs,)  # no padding
    assert result.in_degree.shape == result.out_degree.shape == (nodes,)
    assert result.spd.dtype == np.uint8 and result.in_degree.dtype == np.int16  # fewer than 32,767 edges
    node_ptr = np.concatenate([[0], np.cumsum(sizes)])
    blocks = _blocks(result, sizes, edge_index, device)
    assert blocks[0][1].dtype == np.int16
    for b, ((n, edges), (spd, first_edge)) in enumerate(zip(graphs, blocks)):
        expected = graph_structure(n, edges)
        np.testing.assert_array_equal(spd, expected.spd)
        first = expected.first_edge.astype(np.int64)
        np.testing.assert_array_equal(first_edge, np.where(first >= 0, first + edge_ptr[b], NO_EDGE))
        np.testing.assert_array_equal(result.in_degree[node_ptr[b] : node_ptr[b + 1]], expected.in_degree)
        np.testing.assert_array_equal(result.out_degree[node_ptr[b] : node_ptr[b + 1]], expected.out_degree)


def test_result_does_not_depend_on_the_other_graphs(rng: np.random.Generator) -> None:
    graphs = _graphs(rng)[2:8]
    sizes = np.array([n for n, _ in graphs])
    edge_ptr = np.concatenate([[0], np.cumsum([e.shape[1] for _, e in graphs])])
    edge_index = np.concatenate([e for _, e in graphs], axis=1)
    together = batched_graph_structure(sizes, edge_index, edge_ptr)
    for b, ((n, edges), (spd, first_edge)) in enumerate(zip(graphs, _blocks(together, sizes, edge_index))):
        alone = batched_graph_structure(np.array([n]), edges, np.array([0, edges.shape[1]]))
        [(spd_alone, first_alone)] = _blocks(alone, np.array([n]), edges)
        np.testing.assert_array_equal(spd, spd_alone)
        np.testing.assert_array_equal(first_edge - np.where(first_alone >= 0, edge_ptr[b], 0), first_alone)


@pytest.mark.parametrize(
    "edges, message",
    [
        (np.array([[1, 0], [0, 1]]), "sorted"),  # unsorted
        (np.array([[0, 0], [1, 1]]), "sorted"),  # duplicate
        (np.array([[0], [5]]), "outside"),  # no node 5
    ],
)
def test_rejects_malformed_edges(edges: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        batched_graph_structure(np.array([3]), edges, np.array([0, edges.shape[1]]))


@pytest.mark.device
def test_edge_ids_widen_past_int16(device: torch.device) -> None:
    n = 200  # complete graph: 39,800 directed edges
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    edges = np.stack([src, dst])
    result = batched_graph_structure(np.array([n]), edges, np.array([0, edges.shape[1]]))
    [(spd, first)] = _blocks(result, np.array([n]), edges, device)
    assert first.dtype == np.int32 and result.out_degree.dtype == np.int32
    # graph_structure refuses it (its int16 ids cannot hold 39,800 edges): check the path and the distances directly
    np.testing.assert_array_equal(edges[1][np.maximum(first, 0)][first >= 0], np.nonzero(first >= 0)[1])
    np.testing.assert_array_equal(spd, 1 - np.eye(n, dtype=np.uint8))
