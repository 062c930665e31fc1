"""The batch contract (data/batch.py): what collate_graphs writes at every real and padding position."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphormer_urpe.constants import NO_EDGE, NO_TARGET_NODE, UNREACHABLE_SPD
from graphormer_urpe.data.batch import BatchShape, GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.data.structure import graph_structure


def record(
    edges: list[tuple[int, int]], n: int, index: int, y: list[float], node_level: bool = False, continuous: bool = False
) -> GraphRecord:
    """A graph of n nodes with undirected ``edges`` (both directions stored), node feature = node id."""
    pairs = [(a, b) for a, b in edges] + [(b, a) for a, b in edges]
    edge_index = np.array(pairs, dtype=np.int64).T.reshape(2, -1)
    structure = graph_structure(n, edge_index)
    targets = np.array(y, dtype=np.float32)
    return GraphRecord(
        x=np.arange(n, dtype=np.int64).reshape(n, 1) + 1,
        edge_index=edge_index,
        edge_attr=np.arange(edge_index.shape[1], dtype=np.int64).reshape(-1, 1) + 10 * index,
        spd=structure.spd,
        first_edge=structure.first_edge,
        in_degree=structure.in_degree,
        out_degree=structure.out_degree,
        y=np.tile(targets, (n, 1)) if node_level else targets,
        index=index,
        x_continuous=np.full((n, 2), index + 0.5, dtype=np.float32) if continuous else None,
        edge_continuous=np.full((edge_index.shape[1], 3), index + 0.25, dtype=np.float32) if continuous else None,
    )


def two_graphs(**kwargs: bool) -> tuple[GraphRecord, GraphRecord]:
    path = record([(0, 1), (1, 2)], 3, index=7, y=[1.5], **kwargs)  # 0 - 1 - 2, 4 directed edges
    pair = record([(0, 1)], 2, index=3, y=[-2.0], **kwargs)  # 0 - 1, 2 directed edges
    return path, pair


def test_shapes_dtypes_and_real_positions() -> None:
    path, pair = two_graphs()
    batch = collate_graphs([path, pair])
    assert isinstance(batch, GraphBatch) and batch.num_graphs == 2
    assert batch.x.shape == (2, 3, 1) and batch.x.dtype == torch.int64
    assert batch.spd.dtype == torch.uint8 and batch.first_edge.dtype == torch.int64
    assert batch.node_mask.tolist() == [[True, True, True], [True, True, False]]
    assert batch.x[:, :, 0].tolist() == [[1, 2, 3], [1, 2, 0]]  # padding features are 0
    assert batch.in_degree.tolist() == [[1, 2, 1], [1, 1, 0]]
    assert batch.out_degree.tolist() == batch.in_degree.tolist()
    assert batch.spd[0].tolist() == [[0, 1, 2], [1, 0, 1], [2, 1, 0]]
    u = UNREACHABLE_SPD
    assert batch.spd[1].tolist() == [[0, 1, u], [1, 0, u], [u, u, u]]
    assert batch.y.tolist() == [[1.5], [-2.0]] and batch.index.tolist() == [7, 3]
    assert batch.target_node.tolist() == [NO_TARGET_NODE, NO_TARGET_NODE]
    assert batch.x_continuous.shape == (2, 3, 0) and batch.edge_continuous.shape == (6, 0)


def test_edges_are_renumbered_batch_wide() -> None:
    path, pair = two_graphs()
    batch = collate_graphs([path, pair])
    # edge_attr of graph g is 10 * index + local id: concatenated in batch order
    assert batch.edge_attr[:, 0].tolist() == [70, 71, 72, 73, 30, 31]
    assert batch.edge_dst.tolist() == [1, 2, 0, 1, 1, 0]
    # the second graph's first edges are shifted by the first graph's 4 edges; padding is NO_EDGE
    assert batch.first_edge[1].tolist() == [[NO_EDGE, 4, NO_EDGE], [5, NO_EDGE, NO_EDGE], [NO_EDGE] * 3]
    # following the first edge of (0, 2) in graph 0 leads to node 1, then to 2
    first = int(batch.first_edge[0, 0, 2])
    assert int(batch.edge_dst[first]) == 1 and int(batch.edge_dst[batch.first_edge[0, 1, 2]]) == 2


def test_node_level_targets_are_nan_at_padding() -> None:
    path, pair = two_graphs(node_level=True)
    batch = collate_graphs([path, pair])
    assert batch.y.shape == (2, 3, 1)
    assert batch.y[0, :, 0].tolist() == [1.5, 1.5, 1.5]
    assert batch.y[1, :2, 0].tolist() == [-2.0, -2.0] and torch.isnan(batch.y[1, 2, 0])


def test_continuous_features_are_zero_at_padding() -> None:
    path, pair = two_graphs(continuous=True)
    batch = collate_graphs([path, pair])
    assert batch.x_continuous.shape == (2, 3, 2)
    assert batch.x_continuous[1, :2].eq(3.5).all() and batch.x_continuous[1, 2].eq(0).all()
    assert batch.edge_continuous[:4].eq(7.25).all() and batch.edge_continuous[4:].eq(3.25).all()


def test_order_of_records_is_the_order_of_the_batch() -> None:
    path, pair = two_graphs()
    swapped = collate_graphs([pair, path])
    assert swapped.index.tolist() == [3, 7]
    assert swapped.edge_attr[:, 0].tolist() == [30, 31, 70, 71, 72, 73]
    assert swapped.first_edge[1, 0, 1].item() == 2  # the path's first edge, now behind the pair's 2


def test_device_moves_copy_every_field() -> None:
    """``to`` moves every field (to the GPU when there is one) and back, unchanged."""
    batch = collate_graphs(list(two_graphs()))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    moved = batch.to(device)
    assert all(value.device.type == device for value in vars(moved).values())
    back = moved.to("cpu")
    for name, value in vars(batch).items():
        assert torch.equal(getattr(back, name), value), name


def test_a_batch_shape_pads_nodes_graphs_and_edges_with_nothing_real() -> None:
    path, pair = two_graphs()
    plain = collate_graphs([path, pair])
    padded = collate_graphs([path, pair], BatchShape(node_multiple=4, graphs=3, edges_per_node=2))
    assert tuple(padded.x.shape[:2]) == (3, 4) and padded.edge_attr.shape[0] == 3 * 4 * 2
    for name in ("x", "node_mask", "in_degree", "out_degree"):  # the real part unchanged
        assert torch.equal(getattr(padded, name)[:2, :3], getattr(plain, name))
    for name in ("spd", "first_edge"):
        assert torch.equal(getattr(padded, name)[:2, :3, :3], getattr(plain, name))
    assert torch.equal(padded.edge_attr[:6], plain.edge_attr) and torch.equal(padded.edge_dst[:6], plain.edge_dst)
    assert not padded.node_mask[:, 3].any() and not padded.node_mask[2].any()  # padding nodes, an empty graph
    assert torch.isnan(padded.y[2]).all() and padded.index.tolist() == [7, 3, -1]
    assert (padded.spd[2] == UNREACHABLE_SPD).all() and (padded.first_edge[2] == NO_EDGE).all()
    assert int(padded.first_edge.max()) < 6  # no path runs through a padding edge


def test_a_batch_that_does_not_fit_its_shape_is_refused_naming_the_bound() -> None:
    path, pair = two_graphs()
    with pytest.raises(ValueError, match="2 graphs do not fit a batch shape of 1"):
        collate_graphs([path, pair], BatchShape(node_multiple=4, graphs=1, edges_per_node=2))
    with pytest.raises(ValueError, match=r"4 edges exceed the batch shape's 3 \(1 graphs x 3 nodes x 1 edges per node"):
        collate_graphs([path], BatchShape(node_multiple=1, graphs=1, edges_per_node=1))
