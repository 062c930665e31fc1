"""``path_order: official``: the edge encoding follows the shortest paths of official Graphormer's
Floyd-Warshall, represented exactly by the first-edge matrix; part of the cache key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.cache import CacheSpec, encode_chunk
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import QM9
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import graph_structure, graph_structures
from graphormer_urpe.testing.official_reference import OFFICIAL_UNREACHABLE, floyd_warshall, official_path


def random_graph(rng: np.random.Generator, n: int, directed: bool) -> np.ndarray:
    """(2, e) edges of a random graph, often disconnected, with rings (ties between shortest paths)."""
    p = rng.uniform(0.08, 0.5)
    upper = np.triu(rng.random((n, n)) < p, 1)
    adjacency = (rng.random((n, n)) < p) & ~np.eye(n, dtype=bool) if directed else upper | upper.T
    src, dst = np.nonzero(adjacency)
    order = rng.permutation(len(src))  # edge ids in a random order: paths are chosen by node, not edge id
    return np.stack([src[order], dst[order]])


def followed_path(first_edge: np.ndarray, edge_index: np.ndarray, i: int, j: int) -> list[int]:
    """Nodes visited from i to j through ``first_edge`` (the model's walk, every hop)."""
    nodes = [i]
    while nodes[-1] != j:
        edge = int(first_edge[nodes[-1], j])
        assert edge != NO_EDGE
        nodes.append(int(edge_index[1, edge]))
    return nodes


def test_official_paths_are_represented_exactly_by_first_edges() -> None:
    rng = np.random.default_rng(7)
    pairs = 0
    for trial in range(300):
        n = int(rng.integers(1, 16))
        edge_index = random_graph(rng, n, directed=trial % 3 == 0)
        adjacency = np.zeros((n, n), dtype=bool)
        adjacency[edge_index[0], edge_index[1]] = True
        dist, path = floyd_warshall(adjacency)
        s = graph_structure(n, edge_index, path_order="official")
        assert np.array_equal(s.spd.astype(np.int64), np.where(dist == OFFICIAL_UNREACHABLE, UNREACHABLE_SPD, dist))
        for i in range(n):
            for j in range(n):
                if i == j or dist[i, j] == OFFICIAL_UNREACHABLE:
                    assert s.first_edge[i, j] == NO_EDGE
                    continue
                assert followed_path(s.first_edge, edge_index, i, j) == official_path(path, i, j)
                pairs += 1
    assert pairs > 5000


def test_the_two_orders_differ_where_official_prefers_the_smaller_largest_intermediate() -> None:
    # 0 -> 5 by 0-1-4-5 (next node 1 is smallest) or 0-2-3-5 (largest intermediate 3 < 4)
    half = np.array([[0, 1, 4, 0, 2, 3], [1, 4, 5, 2, 3, 5]])
    edge_index = np.concatenate([half, half[::-1]], axis=1)
    default = graph_structure(6, edge_index)
    official = graph_structure(6, edge_index, path_order="official")
    assert followed_path(default.first_edge, edge_index, 0, 5) == [0, 1, 4, 5]
    assert followed_path(official.first_edge, edge_index, 0, 5) == [0, 2, 3, 5]
    assert np.array_equal(default.spd, official.spd)


def test_blocks_of_many_graphs_equal_one_graph_at_a_time() -> None:
    rng = np.random.default_rng(3)
    sizes = [int(v) for v in rng.integers(1, 12, 60)]
    edges = [random_graph(rng, n, directed=False) for n in sizes]
    flat = graph_structures(sizes, edges, path_order="official")
    for g, (n, e) in enumerate(zip(sizes, edges)):
        pairs = slice(flat.pair_ptr[g], flat.pair_ptr[g + 1])
        assert np.array_equal(flat.first_edge[pairs].reshape(n, n), graph_structure(n, e, "official").first_edge)


def test_the_option_reaches_the_cache_and_its_key(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    edge_index = random_graph(rng, 9, directed=False)
    graph = RawGraph(
        x=np.zeros((9, 1), np.int64),
        edge_index=edge_index,
        edge_attr=np.zeros((edge_index.shape[1], 1), np.int64),
        y=np.zeros(1, np.float32),
    )
    spec = CacheSpec(DataSpec(node_vocab=(1,), edge_vocab=(1,), num_targets=1, num_outputs=1), path_order="official")
    arrays, _ = encode_chunk(iter([(0, graph)]), spec)
    assert np.array_equal(arrays["first_edge"], graph_structure(9, edge_index, "official").first_edge.reshape(-1))

    default = GraphDataModule(QM9(), root=str(tmp_path))
    official = GraphDataModule(QM9(), root=str(tmp_path), path_order="official")
    assert "path_order" not in default.cache_key  # existing caches keep their names
    assert official.cache_key["path_order"] == "official" and official.cache_dir != default.cache_dir
    assert official.cache_spec.path_order == "official"
    with pytest.raises(ValueError, match=r"data\.path_order='shortest'"):
        GraphDataModule(QM9(), root=str(tmp_path), path_order="shortest")
