"""Regular graphs with identical node features and distance-count labels."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.synthetic.graphs import (
    SyntheticGraphDataModule,
    distance_counts,
    max_distance_count,
    regular_graph_record,
    regular_graphs,
)


def as_networkx(record) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(range(len(record.in_degree)))
    graph.add_edges_from(record.edge_index.T.tolist())
    return graph


@pytest.mark.parametrize("degree,distance", [(3, 2), (4, 3)])
def test_graphs_are_regular_connected_with_networkx_labels(degree, distance):
    graphs, _ = regular_graphs(12, degree, 10, 16, distance, seed=0)
    assert len(graphs) == 12
    for record in graphs:
        labels = record.y[:, 0]
        assert record.y.dtype == np.float32 and record.y.shape == (len(record.in_degree), 1)  # PyG node targets
        graph = as_networkx(record)
        assert nx.is_connected(graph)
        assert {d for _, d in graph.degree()} == {degree}
        assert (record.x == 0).all() and (record.edge_attr == 0).all()
        assert (record.in_degree == degree).all()
        expected = [
            sum(1 for d in nx.single_source_shortest_path_length(graph, v).values() if d == distance) for v in graph
        ]
        assert labels.tolist() == expected
        assert len(set(expected)) > 1  # not vertex-transitive
        assert labels.max() <= max_distance_count(degree, distance, 16)


def test_generation_is_seeded_and_counts_rejections():
    (first, rejected), (again, _) = regular_graphs(20, 3, 8, 10, 2, seed=1), regular_graphs(20, 3, 8, 10, 2, seed=1)
    assert all(np.array_equal(a.edge_index, b.edge_index) for a, b in zip(first, again))
    other, _ = regular_graphs(20, 3, 8, 10, 2, seed=2)
    assert not all(np.array_equal(a.edge_index, b.edge_index) for a, b in zip(first, other))
    assert rejected["same label at every node"] > 0  # small cubic graphs are often too symmetric
    with pytest.raises(ValueError, match="no 3-regular graph"):
        regular_graphs(1, 3, 5, 5, 2, seed=0)


def test_distance_counts_of_a_cycle():
    record = regular_graph_record(nx.cycle_graph(7), index=0)
    assert distance_counts(record.spd, 2).tolist() == [2] * 7
    assert distance_counts(record.spd, 4).tolist() == [0] * 7


def test_collate_pads_labels_with_nan():
    graphs, _ = regular_graphs(2, 3, 10, 16, 2, seed=0)
    batch = collate_graphs(graphs)
    sizes = [len(record.y) for record in graphs]
    assert batch.y.shape[:2] == batch.node_mask.shape == (2, max(sizes))
    assert batch.y.shape[2] == 1
    for b, record in enumerate(graphs):
        assert batch.y[b, : sizes[b], 0].tolist() == record.y[:, 0].tolist()
        assert torch.isnan(batch.y[b, sizes[b] :]).all()
    assert torch.equal(~torch.isnan(batch.y[..., 0]), batch.node_mask)


def test_datamodule_splits_and_sizes():
    data = SyntheticGraphDataModule(
        degree=3,
        min_nodes=10,
        max_nodes=14,
        distance=2,
        train_graphs=8,
        val_graphs=4,
        test_graphs=4,
        batch_size=4,
        seed=0,
    )
    assert data.spec == DataSpec(
        node_vocab=(1,), edge_vocab=(1,), num_targets=1, num_outputs=7, target_level="node", target_kind="multiclass"
    )  # counts 0 .. 6 at distance 2: 3 * 2 = 6 at most
    data.setup("fit")
    batches = list(data.train_dataloader())
    assert [b.num_graphs for b in batches] == [4, 4]
    assert all(int(b.y[b.node_mask].max()) < data.spec.num_outputs for b in batches)
    assert data.spec.readout == "nodes"
    info = data.describe()
    assert info["splits"] == {"train": 8, "valid": 4, "test": 4}
    assert 0 < info["majority_label_accuracy"]["valid"] < 1
    train_edges = {r.edge_index.tobytes() for r in data.datasets["train"]}
    assert not any(r.edge_index.tobytes() in train_edges for r in data.datasets["valid"])
