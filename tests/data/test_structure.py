"""Shortest paths, first edges and degrees against networkx and hand-checked graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data import structure as transforms
from graphormer_urpe.data.structure import graph_structure, graph_structures
from graphormer_urpe.testing.graphs import random_edges


def networkx_distances(n: int, edge_index: np.ndarray) -> np.ndarray:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edge_index.T.tolist())
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    return np.array([[lengths[i].get(j, UNREACHABLE_SPD) for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("connected", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_spd_matches_networkx(seed: int, connected: bool) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    edges = random_edges(rng, n, extra=3, connected=connected)
    np.testing.assert_array_equal(graph_structure(n, edges).spd, networkx_distances(n, edges))


def test_spd_of_directed_graph_is_directed() -> None:
    edges = np.array([[0, 1], [1, 2]])  # 0 -> 1 -> 2
    spd = graph_structure(3, edges).spd
    assert spd[0, 2] == 2 and spd[2, 0] == UNREACHABLE_SPD


def test_first_edges_trace_shortest_paths() -> None:
    """Following first_edge from i reaches j in exactly spd[i, j] existing edges."""
    rng = np.random.default_rng(7)
    for _ in range(10):
        n = int(rng.integers(2, 30))
        edges = random_edges(rng, n, extra=4, connected=bool(rng.integers(0, 2)))
        s = graph_structure(n, edges)
        for i in range(n):
            for j in range(n):
                if i == j or s.spd[i, j] == UNREACHABLE_SPD:
                    assert s.first_edge[i, j] == NO_EDGE
                    continue
                node, hops = i, 0
                while node != j:
                    e = s.first_edge[node, j]
                    assert edges[0, e] == node
                    node, hops = int(edges[1, e]), hops + 1
                assert hops == s.spd[i, j]


def test_hand_checked_cycle_takes_smallest_next_node() -> None:
    # 4-cycle 0-1-2-3-0: from 0 to 2 both 1 and 3 are on shortest paths; the smaller (1) is taken
    half = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])
    edges = np.concatenate([half, half[::-1]], axis=1)  # edge ids: 0:0->1 1:1->2 2:2->3 3:3->0 4:1->0 ...
    s = graph_structure(4, edges)
    assert s.spd[0, 2] == 2
    assert s.first_edge[0, 2] == 0  # 0 -> 1
    assert s.first_edge[1, 2] == 1  # 1 -> 2
    np.testing.assert_array_equal(s.in_degree, [2, 2, 2, 2])


def test_degrees_and_isolated_nodes() -> None:
    edges = np.array([[0, 0, 1], [1, 2, 2]])  # directed: out(0)=2, in(2)=2, node 3 isolated
    s = graph_structure(4, edges)
    np.testing.assert_array_equal(s.out_degree, [2, 1, 0, 0])
    np.testing.assert_array_equal(s.in_degree, [0, 1, 2, 0])
    assert (s.spd[3, :3] == UNREACHABLE_SPD).all() and s.spd[3, 3] == 0


def test_compact_dtypes() -> None:
    s = graph_structure(5, random_edges(np.random.default_rng(0), 5))
    assert s.spd.dtype == np.uint8 and s.first_edge.dtype == np.int16 and s.in_degree.dtype == np.int16


def test_single_node_graph() -> None:
    s = graph_structure(1, np.zeros((2, 0), dtype=np.int64))
    assert s.spd.tolist() == [[0]] and s.first_edge.tolist() == [[NO_EDGE]]


def reference_first_edges(n: int, edge_index: np.ndarray, spd: np.ndarray) -> np.ndarray:
    """The definition, pair by pair: the edge to the smallest next node on a shortest path
    (the first listed edge when an edge is duplicated)."""
    first = np.full((n, n), NO_EDGE, dtype=np.int16)
    for i in range(n):
        for j in range(n):
            if i == j or spd[i, j] == UNREACHABLE_SPD:
                continue
            candidates = [
                (int(edge_index[1, e]), e)
                for e in range(edge_index.shape[1])
                if edge_index[0, e] == i and spd[edge_index[1, e], j] == spd[i, j] - 1
            ]
            first[i, j] = min(candidates)[1]
    return first


def mixed_graphs(seed: int, count: int) -> list[tuple[int, np.ndarray]]:
    """Graphs of many sizes (0 to 24 nodes): undirected, directed, disconnected, duplicated edges."""
    rng = np.random.default_rng(seed)
    graphs = []
    for k in range(count):
        n = int(rng.integers(0, 25))
        if n == 0:
            edges = np.zeros((2, 0), dtype=np.int64)
        elif k % 3 == 0:  # directed, with duplicates and self-loops
            edges = rng.integers(0, n, (2, int(rng.integers(0, 3 * n))))
        else:
            edges = random_edges(rng, n, extra=3, connected=k % 3 == 1)
        graphs.append((n, edges))
    return graphs


def test_batched_structures_match_the_definition_and_networkx() -> None:
    graphs = mixed_graphs(seed=11, count=60)
    flat = graph_structures([n for n, _ in graphs], [e for _, e in graphs])
    assert flat.node_ptr[-1] == len(flat.in_degree) and flat.pair_ptr[-1] == len(flat.spd)
    for k, (n, edges) in enumerate(graphs):
        spd = flat.spd[flat.pair_ptr[k] : flat.pair_ptr[k + 1]].reshape(n, n)
        first = flat.first_edge[flat.pair_ptr[k] : flat.pair_ptr[k + 1]].reshape(n, n)
        np.testing.assert_array_equal(spd, networkx_distances(n, edges).reshape(n, n))
        np.testing.assert_array_equal(first, reference_first_edges(n, edges, spd))
        nodes = slice(flat.node_ptr[k], flat.node_ptr[k + 1])
        np.testing.assert_array_equal(flat.in_degree[nodes], np.bincount(edges[1], minlength=n))
        np.testing.assert_array_equal(flat.out_degree[nodes], np.bincount(edges[0], minlength=n))


@pytest.mark.parametrize("block", [1, 7, 50, 1 << 22])
def test_batching_and_blocking_do_not_change_results(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each graph's arrays are the same alone, in any company, in any order, with any block size."""
    graphs = mixed_graphs(seed=3, count=40)
    alone = [graph_structure(n, e) for n, e in graphs]
    monkeypatch.setattr(transforms, "_BLOCK_ELEMENTS", block)
    order = np.random.default_rng(block).permutation(len(graphs))
    flat = graph_structures([graphs[k][0] for k in order], [graphs[k][1] for k in order])
    for position, k in enumerate(order):
        pairs = slice(flat.pair_ptr[position], flat.pair_ptr[position + 1])
        np.testing.assert_array_equal(flat.spd[pairs], alone[k].spd.ravel())
        np.testing.assert_array_equal(flat.first_edge[pairs], alone[k].first_edge.ravel())


def test_too_many_nodes_is_refused() -> None:
    with pytest.raises(ValueError, match="graph 1 has 40000 nodes"):
        graph_structures([3, 40_000], [np.zeros((2, 0), int), np.zeros((2, 0), int)])


def test_too_many_edges_is_refused_instead_of_wrapping_int16_edge_ids() -> None:
    """A dense graph of 200 nodes has 39,800 directed edges: its int16 first-edge ids would wrap."""
    i, j = np.nonzero(~np.eye(200, dtype=bool))
    dense = np.stack([i, j])
    with pytest.raises(ValueError, match=r"graph has 39800 directed edges; at most 32767"):
        graph_structure(200, dense)
    with pytest.raises(ValueError, match=r"graph 1 has 39800 directed edges"):
        graph_structures([3, 200], [np.zeros((2, 0), int), dense])
    limit = np.stack(np.nonzero(~np.eye(182, dtype=bool)))[:, : transforms.MAX_EDGES]  # exactly at the limit
    first = graph_structure(182, limit).first_edge
    assert first.max() == transforms.MAX_EDGES - 1 and first.min() == NO_EDGE
