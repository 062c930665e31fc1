"""The model in a plain PyG loop: GraphormerStructure as pre_transform, a PyG DataLoader, and
to_graph_batch (or model(batch)) give exactly our pipeline's batches and outputs (cache +
collate_graphs), on ZINC-layout pickles, on a TUDataset written here and on per-node targets."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data, InMemoryDataset
from torch_geometric.datasets import ZINC as PygZINC
from torch_geometric.datasets import TUDataset
from torch_geometric.loader import DataLoader
from torch_geometric.transforms import ToUndirected

from graphormer_urpe import Graphormer, GraphormerConfig, GraphormerStructure, collate_graphs, to_graph_batch
from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import ZINC, PygDataset
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.graphs import random_edges
from graphormer_urpe.testing.tu_format import TUGraph, write_tu_dataset
from graphormer_urpe.testing.zinc_raw import write_zinc_raw

TINY = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4)


def assert_same_batch(ours: GraphBatch, theirs: GraphBatch) -> None:
    """Every field equal in value, dtype and shape (NaN = NaN), except ``index`` (dataset positions)."""
    for field in dataclasses.fields(GraphBatch):
        if field.name != "index":
            torch.testing.assert_close(
                getattr(theirs, field.name),
                getattr(ours, field.name),
                rtol=0,
                atol=0,
                equal_nan=True,
                msg=lambda m, name=field.name: f"{name}: {m}",
            )


def cached_records(data: GraphDataModule) -> list:
    """Every graph of the cache, in the dataset's order (nothing skipped)."""
    store = next(iter(data.datasets.values())).store
    np.testing.assert_array_equal(store.source_row, np.arange(len(store)))
    return [store.record(i) for i in range(len(store))]


def model_pair(config: GraphormerConfig) -> Graphormer:
    torch.manual_seed(0)
    return Graphormer(config).eval()


# ----------------------------------------------------------------------------- the transform


def test_transform_on_a_directed_disconnected_graph_with_an_isolated_node_hand_checked() -> None:
    """0 -> 1 -> 2 -> 0 (directed cycle), 3 <-> 4 (another component), 5 isolated; no edge features."""
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 0, 4, 3]])
    data = GraphormerStructure()(Data(edge_index=edge_index, num_nodes=6))
    u = 255
    assert data.spd.dtype == torch.uint8 and data.first_edge.dtype == torch.int16 and data.num_nodes == 6
    assert data.spd.view(6, 6).tolist() == [
        [0, 1, 2, u, u, u],
        [2, 0, 1, u, u, u],
        [1, 2, 0, u, u, u],
        [u, u, u, 0, 1, u],
        [u, u, u, 1, 0, u],
        [u, u, u, u, u, 0],
    ]
    assert data.first_edge.view(6, 6).tolist() == [
        [-1, 0, 0, -1, -1, -1],
        [1, -1, 1, -1, -1, -1],
        [2, 2, -1, -1, -1, -1],
        [-1, -1, -1, -1, 3, -1],
        [-1, -1, -1, 4, -1, -1],
        [-1] * 6,
    ]
    assert data.in_degree.tolist() == [1, 1, 1, 1, 1, 0] and data.out_degree.tolist() == [1, 1, 1, 1, 1, 0]
    assert torch.equal(data.edge_index, edge_index)  # the graph itself is unchanged


def test_transform_does_not_touch_its_input_and_handles_a_graph_without_edges() -> None:
    original = Data(x=torch.tensor([[2], [0], [1]]))
    data = GraphormerStructure()(original)
    assert "spd" not in original and data.edge_index.shape == (2, 0)
    assert data.spd.view(3, 3).diagonal().tolist() == [0, 0, 0] and (data.spd.view(3, 3).sum() == 6 * 255)
    assert (data.first_edge == -1).all() and data.in_degree.tolist() == [0, 0, 0]


def test_first_edges_become_batch_edge_ids_and_edge_targets_local_positions() -> None:
    structure = GraphormerStructure()
    first = structure(Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3))  # edges 0, 1
    second = structure(Data(edge_index=torch.tensor([[1, 0, 1], [0, 1, 2]]), num_nodes=3))  # batch edges 2, 3, 4
    batch = to_graph_batch(Batch.from_data_list([first, second]))
    assert batch.first_edge[1].tolist() == [[-1, 3, 3], [2, -1, 4], [-1, -1, -1]]
    assert batch.edge_dst.tolist() == [1, 2, 0, 1, 2]
    assert batch.x.tolist() == [[[0]] * 3] * 2 and batch.edge_attr.tolist() == [[0]] * 5  # constant columns
    assert_same_batch(to_graph_batch(first), to_graph_batch(Batch.from_data_list([first])))  # one Data


@pytest.mark.parametrize(
    "data, transform, message",
    [
        (Data(), GraphormerStructure(), r"node count is unknown: set data.num_nodes"),
        (
            Data(x=torch.zeros(0, 1, dtype=torch.long), edge_index=torch.zeros(2, 0, dtype=torch.long)),
            GraphormerStructure(),
            r"num_nodes=0; 1 to 32767 nodes",
        ),
        (
            Data(x=torch.zeros(3, 1, dtype=torch.long), edge_index=torch.tensor([[0, 1], [1, 3]])),
            GraphormerStructure(),
            r"edge_index\[1, 1\] = 3 is not a node of a graph with num_nodes=3 \(0 .. 2\)",
        ),
        (
            Data(x=torch.zeros(3, 1, dtype=torch.long), edge_index=torch.tensor([[0, -1], [1, 2]])),
            GraphormerStructure(),
            r"edge_index\[0, 1\] = -1 is not a node",
        ),
        (
            Data(x=torch.zeros(3, 1, dtype=torch.long), edge_index=torch.tensor([[0.0], [1.0]])),
            GraphormerStructure(),
            r"edge_index has shape \(2, 1\) and dtype torch.float32; expected \(2, edges\) integers",
        ),
        (
            Data(x=torch.tensor([[1, 0], [2, -3]]), edge_index=torch.tensor([[0], [1]])),
            GraphormerStructure(),
            r"attribute 'x' row 1 column 1 is -3: a negative category",
        ),
        (
            Data(x=torch.tensor([[0.5], [float("nan")]]), edge_index=torch.tensor([[0], [1]])),
            GraphormerStructure(),
            r"attribute 'x' row 1 column 0 is nan: not finite",
        ),
        (
            Data(x=torch.zeros(2, 1), edge_index=torch.tensor([[0], [1]]), edge_attr=torch.zeros(2, 1)),
            GraphormerStructure(),
            r"attribute 'edge_attr' has shape \(2, 1\); expected \(1,\) or \(1, columns\)",
        ),
        (
            Data(x=torch.zeros(2, 3, 1), edge_index=torch.tensor([[0], [1]])),
            GraphormerStructure(),
            r"attribute 'x' has shape \(2, 3, 1\); expected \(2,\) or \(2, columns\)",
        ),
        (
            Data(x=torch.ones(2, 1, dtype=torch.complex64), edge_index=torch.tensor([[0], [1]])),
            GraphormerStructure(),
            r"attribute 'x' is torch.complex64: features are integer categories or real floats",
        ),
        (
            Data(x=torch.zeros(2, 1), edge_index=torch.tensor([[0], [1]])),
            GraphormerStructure(node_attributes=["feat"]),
            r"no tensor attribute 'feat'; it has: edge_index, x",
        ),
        (
            Data(edge_index=torch.stack(torch.nonzero(~torch.eye(200, dtype=torch.bool)).T.unbind()), num_nodes=200),
            GraphormerStructure(),
            r"39800 directed edges in edge_index; at most 32767",
        ),
    ],
)
def test_transform_refuses_what_it_cannot_take_naming_attribute_and_value(
    data: Data, transform: GraphormerStructure, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        transform(data)


# ----------------------------------------------------------------------------- ZINC layout


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_zinc_pyg_loop_gives_exactly_our_pipelines_batches_and_outputs(tmp_path: Path, attention: str) -> None:
    sizes, subset = {"train": 30, "val": 8, "test": 6}, {"train": 10, "val": 4, "test": 3}
    write_zinc_raw(tmp_path / "ours" / "ZINC" / "raw", sizes, subset)
    write_zinc_raw(tmp_path / "pyg" / "raw", sizes, subset)  # the same pickles (same seed), PyG's own root
    data = GraphDataModule(
        ZINC(subset=True), root=str(tmp_path / "ours"), batch_size=4, num_workers=0, preprocess_workers=0
    )
    data.prepare_data()
    data.setup()
    records = list(data.datasets["train"])
    dataset = PygZINC(str(tmp_path / "pyg"), subset=True, split="train", pre_transform=GraphormerStructure())
    assert len(dataset) == len(records) == 10
    model = model_pair(GraphormerConfig(**data.spec.encoder_fields(), attention=attention, **TINY))
    loader = DataLoader(dataset, batch_size=4, shuffle=False)
    for start, batch in zip(range(0, 10, 4), loader, strict=True):
        ours = collate_graphs(records[start : start + 4])
        assert_same_batch(ours, to_graph_batch(batch, data.spec))
        with torch.no_grad():
            assert torch.equal(model(batch), model(ours))


# ----------------------------------------------------------------------------- a TUDataset written here


def awkward_tu_graphs(count: int, seed: int = 0) -> list[TUGraph]:
    """Graphs of every kind the transform must handle: connected, disconnected, with isolated nodes,
    directed, and without edges; two float node attributes and node labels 1..3, one float edge
    attribute and edge labels 0..1, two regression targets."""
    rng = np.random.default_rng(seed)
    graphs = []
    for k in range(count):
        n = int(rng.integers(3, 12))
        kind = k % 5
        if kind == 0:
            edges = random_edges(rng, n)
        elif kind == 1:
            edges = random_edges(rng, n, connected=False)
        elif kind == 2:  # the last two nodes isolated
            edges = random_edges(rng, n - 2)
        elif kind == 3:  # directed: one direction of each edge, some reversed
            half = random_edges(rng, n)[:, : n - 1]
            flip = rng.random(half.shape[1]) < 0.5
            edges = np.where(flip, half[::-1], half)
        else:
            edges = np.zeros((2, 0), dtype=np.int64)
        e = edges.shape[1]
        graphs.append(
            TUGraph(
                num_nodes=n,
                edge_index=edges,
                node_labels=rng.integers(1, 4, n),
                node_attributes=rng.normal(size=(n, 2)).round(4),
                edge_labels=rng.integers(0, 2, e),
                edge_attributes=rng.normal(size=(e, 1)).round(4),
                graph_attributes=rng.normal(size=2).round(4),
            )
        )
    return graphs


def test_tu_dataset_pyg_loop_gives_exactly_our_pipelines_batches_and_outputs(tmp_path: Path) -> None:
    graphs = awkward_tu_graphs(23)
    for root in ("ours", "pyg"):
        write_tu_dataset(tmp_path / root / "AWK" / "raw", "AWK", graphs)
    args = {"name": "AWK", "use_node_attr": True, "use_edge_attr": True}
    source = PygDataset("torch_geometric.datasets.TUDataset", args={"root": str(tmp_path / "ours"), **args})
    data = GraphDataModule(source, root=str(tmp_path / "cache"), batch_size=4, num_workers=0, preprocess_workers=0)
    data.prepare_data()
    data.setup()
    records = cached_records(data)
    dataset = TUDataset(str(tmp_path / "pyg"), pre_transform=GraphormerStructure(), **args)
    isolated = [int((d.in_degree + d.out_degree == 0).sum()) for d in dataset]
    assert sum(isolated) > 0 and dataset[3].in_degree.tolist() != dataset[3].out_degree.tolist()  # really awkward
    config = GraphormerConfig(**(data.spec.encoder_fields() | {"num_outputs": 2}), **TINY)
    assert (config.continuous_node_dim, config.continuous_edge_dim) == (2 + 3, 1 + 2)  # TU labels are one-hot floats
    model = model_pair(config)
    for start, batch in zip(range(0, 23, 5), DataLoader(dataset, batch_size=5), strict=True):
        ours = collate_graphs(records[start : start + 5])
        assert_same_batch(ours, to_graph_batch(batch, data.spec))
        with torch.no_grad():
            assert torch.equal(model(batch), model(ours))


# ----------------------------------------------------------------------------- per-node targets


class NodeGraphs(InMemoryDataset):
    """Graphs in memory: two categorical node columns ``x``, continuous ``pos``, no edge features,
    two regression targets per node (some NaN), some graphs with isolated nodes."""

    def __init__(self, graphs: int = 11) -> None:
        super().__init__(None)
        rng = np.random.default_rng(3)
        data_list = []
        for k in range(graphs):
            n = int(rng.integers(2, 9))
            edges = random_edges(rng, n - (k % 2), connected=k % 3 != 0)  # odd graphs: last node isolated
            y = rng.normal(size=(n, 2))
            y[rng.random((n, 2)) < 0.2] = np.nan
            data_list.append(
                Data(
                    x=torch.tensor(rng.integers(0, 4, (n, 2))),
                    num_nodes=n,
                    pos=torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float32),
                    edge_index=torch.tensor(edges),
                    y=torch.tensor(y, dtype=torch.float32),
                )
            )
        self.data, self.slices = self.collate(data_list)


def test_per_node_targets_without_edge_features_give_exactly_our_pipelines_outputs(tmp_path: Path) -> None:
    source = PygDataset(f"{__name__}.NodeGraphs", node_attributes=["x", "pos"], target_level="node")
    data = GraphDataModule(source, root=str(tmp_path), batch_size=4, num_workers=0, preprocess_workers=0)
    data.prepare_data()
    data.setup()
    records = cached_records(data)
    transform = GraphormerStructure(node_attributes=["x", "pos"])
    graphs = [transform(graph) for graph in NodeGraphs()]
    assert (data.spec.continuous_node_dim, data.spec.target_level, data.spec.readout) == (3, "node", "nodes")
    config = GraphormerConfig(**data.spec.encoder_fields(), **TINY)
    model = model_pair(config)
    for start, batch in zip(range(0, 11, 4), DataLoader(graphs, batch_size=4), strict=True):
        ours = collate_graphs(records[start : start + 4])
        theirs = to_graph_batch(batch, data.spec, node_attributes=["x", "pos"])
        assert_same_batch(ours, theirs)
        assert theirs.y.shape[:2] == theirs.node_mask.shape and torch.isnan(theirs.y[~theirs.node_mask]).all()
        with torch.no_grad():
            assert torch.equal(model(theirs), model(ours))


# ----------------------------------------------------------------------------- conversion refusals


def graph_batch(**fields) -> Batch:
    structure = GraphormerStructure()
    return Batch.from_data_list([structure(Data(**fields)), structure(Data(**fields))])


PATH = dict(x=torch.tensor([[1], [2], [3]]), edge_index=torch.tensor([[0, 1], [1, 2]]))


@pytest.mark.parametrize(
    "batch, config, message",
    [
        (
            Batch.from_data_list([Data(**PATH)]),
            None,
            r"the batch has no spd, first_edge, in_degree, out_degree: build the dataset with "
            r"pre_transform=GraphormerStructure\(\)",
        ),
        (
            graph_batch(**PATH),
            GraphormerConfig(node_vocab=[3], **TINY),
            r"attribute 'x' column 0 has value 3 \(batch row 2\), outside the model's node_vocab\[0\] = 3 categories "
            r"\(0 .. 2\): raise node_vocab\[0\]",
        ),
        (
            graph_batch(**PATH),
            GraphormerConfig(node_vocab=[5, 5], **TINY),
            r"1 categorical node-feature column\(s\), the model's node_vocab has 2 entries",
        ),
        (
            graph_batch(x=torch.rand(3, 4), edge_index=PATH["edge_index"]),
            GraphormerConfig(**TINY),
            r"4 continuous \(float\) node-feature column\(s\), the model has continuous_node_dim=0: set "
            r"continuous_node_dim=4",
        ),
        (
            graph_batch(**PATH, edge_attr=torch.rand(2, 1)),
            GraphormerConfig(continuous_edge_dim=2, **TINY),
            r"1 continuous \(float\) edge-feature column\(s\), the model has continuous_edge_dim=2",
        ),
        (
            graph_batch(**PATH),
            GraphormerConfig(readout="target_node", **TINY),
            r"readout='target_node' reads GraphBatch.target_node, which PyG batches do not carry",
        ),
        (
            graph_batch(**PATH, y=torch.zeros(3)),
            GraphormerConfig(**TINY),
            r"target 'y' has shape \(6,\); graph-level targets need 2 rows",
        ),
    ],
)
def test_conversion_refuses_batches_that_do_not_fit_naming_what_to_change(
    batch: Batch, config: GraphormerConfig | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        to_graph_batch(batch, None if config is None else Graphormer(config).data_spec())
    if config is not None:
        with pytest.raises(ValueError, match=message):
            Graphormer(config)(batch)  # the model converts with the same checks


def test_features_a_later_transform_breaks_are_refused_by_the_conversion() -> None:
    """A ``transform`` runs at every access, after the checks of the ``pre_transform``."""
    graph = GraphormerStructure()(Data(x=torch.rand(3, 2), edge_index=PATH["edge_index"]))
    model = Graphormer(GraphormerConfig(continuous_node_dim=2, **TINY))
    broken = graph.clone()
    broken.x[2, 1] = float("inf")
    with pytest.raises(
        ValueError,
        match=r"the batch's continuous node features hold 1 values that are not finite "
        r"\(NaN or inf\), the first at node 5 of the batch, column 1: inf; "
        r"GraphormerStructure refuses them, so a transform applied after it",
    ):
        model(Batch.from_data_list([graph, broken]))
    for x, message in (
        (graph.x.to(torch.complex64), r"attribute 'x' is torch\.complex64"),
        (graph.x[:, :, None], r"attribute 'x' has shape \(3, 2, 1\); expected \(3,\) or \(3, "),
    ):
        changed = graph.clone()
        changed.x = x
        with pytest.raises(ValueError, match=message):
            model(Batch.from_data_list([changed]))


def test_edges_changed_after_the_transform_are_detected() -> None:
    directed = GraphormerStructure()(Data(**PATH))
    with pytest.raises(
        ValueError,
        match=r"2 nodes whose out_degree disagrees with edge_index\): apply every "
        r"transform that changes nodes or edges before GraphormerStructure",
    ):
        to_graph_batch(Batch.from_data_list([ToUndirected()(directed)]))


# ----------------------------------------------------------------------------- the model from keyword arguments


def test_model_from_keyword_arguments_equals_the_model_from_a_config() -> None:
    torch.manual_seed(1)
    from_kwargs = Graphormer(attention="rpe", node_vocab=[7], **TINY)
    torch.manual_seed(1)
    from_config = Graphormer(GraphormerConfig(attention="rpe", node_vocab=[7], **TINY))
    assert from_kwargs.config == from_config.config
    state = from_config.state_dict()
    assert all(torch.equal(value, state[key]) for key, value in from_kwargs.state_dict().items())
    replaced = Graphormer(from_config.config, num_layers=3)
    assert len(replaced.layers) == 3 and from_config.config.num_layers == 2  # the given config is not changed


def test_unknown_keyword_arguments_are_refused_with_a_suggestion() -> None:
    with pytest.raises(
        TypeError,
        match=r"unknown option\(s\) 'num_layer' \(did you mean 'num_layers'\?\), "
        r"'widget'; GraphormerConfig fields: node_vocab, .*num_layers",
    ):
        Graphormer(num_layer=2, widget=1)
    with pytest.raises(TypeError, match=r"takes a GraphormerConfig, got dict"):
        Graphormer({"num_layers": 2})


# ----------------------------------------------------------------------------- the example


EXAMPLE = REPO_DIR / "examples" / "pyg_loop.py"


@pytest.mark.slow
def test_pyg_loop_example_runs_and_uses_only_the_transform_and_the_model(tmp_path: Path) -> None:
    source = EXAMPLE.read_text()
    project_imports = [line for line in source.splitlines() if "graphormer_urpe" in line]
    assert project_imports == ["from graphormer_urpe import Graphormer, GraphormerStructure"]
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent.parent)}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path), "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.fullmatch(r"epoch 1: train L1 (\d+\.\d+) eV, test MAE (\d+\.\d+) eV\n", result.stdout)
    assert match and 0 < float(match[2]) < 5, result.stdout  # gaps are 2-12 eV; a broken model predicts NaN
    assert "GraphormerStructure" in (tmp_path / "QM9SAMPLE" / "processed" / "pre_transform.pt").read_bytes().decode(
        "latin-1"
    )
    docs = (EXAMPLE.parent.parent / "docs" / "pyg.md").read_text()
    assert source in docs, "docs/pyg.md must show examples/pyg_loop.py verbatim"


def test_official_path_order_is_the_cache_s_official_order() -> None:
    """``path_order='official'`` stores the first edges of official Floyd-Warshall paths, exactly
    what the cache stores with the same option (and on these graphs something else than the default)."""
    rng = np.random.default_rng(5)
    differs = 0
    for _ in range(20):
        n = int(rng.integers(6, 12))
        pairs = rng.integers(0, n, (2, 3 * n))
        edges = np.concatenate([pairs, pairs[::-1]], axis=1)  # undirected: many tied shortest paths
        data = Data(edge_index=torch.from_numpy(edges), num_nodes=n)
        official = GraphormerStructure(path_order="official")(data.clone())
        expected = graph_structure(n, edges, "official")
        assert torch.equal(official.first_edge, torch.from_numpy(expected.first_edge.reshape(-1)))
        assert torch.equal(official.spd, torch.from_numpy(expected.spd.reshape(-1)))
        default = GraphormerStructure()(data.clone())
        differs += int(not torch.equal(default.first_edge, official.first_edge))
    assert differs > 0
    with pytest.raises(ValueError, match="path_order='shortest'"):
        GraphormerStructure(path_order="shortest")
