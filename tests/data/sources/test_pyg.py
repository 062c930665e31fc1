"""PygDataset: torch_geometric datasets on disk (TU layout, ZINC) and in memory, per-graph and per-node targets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch_geometric.io.fs
import yaml
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.datasets import TUDataset

from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import ZINC, PygDataset
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.errors import ConfigError, DataError, DatasetMissing
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.run.cli import GraphormerCLI
from graphormer_urpe.tasks import GraphRegression, OptimConfig
from graphormer_urpe.testing.graphs import random_edges
from graphormer_urpe.testing.tu_format import TUGraph, write_tu_dataset
from graphormer_urpe.testing.zinc_raw import write_zinc_raw

TINY = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)


def tu_graphs(count: int, seed: int = 0) -> list[TUGraph]:
    """Random graphs with node labels 1..3, 2 node attributes, edge labels 0..1, 1 edge attribute, binary classes."""
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(2, 10))
        edges = random_edges(rng, n)
        e = edges.shape[1]
        graphs.append(
            TUGraph(
                num_nodes=n,
                edge_index=edges,
                node_labels=rng.integers(1, 4, n),
                node_attributes=rng.normal(size=(n, 2)).round(4),
                edge_labels=rng.integers(0, 2, e),
                edge_attributes=rng.normal(size=(e, 1)).round(4),
                graph_label=int(rng.integers(0, 2)),
            )
        )
    return graphs


def prepared(source: PygDataset, root: Path, workers: int = 0) -> GraphDataModule:
    data = GraphDataModule(source, root=str(root), batch_size=4, num_workers=0, preprocess_workers=workers)
    data.prepare_data()
    data.setup()
    return data


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt by PyG to fetch a file fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("PyG tried to download")

    monkeypatch.setattr(torch_geometric.io.fs, "cp", refuse)


@pytest.mark.parametrize("workers", [0, 2])
def test_tu_dataset_on_disk_is_read_through_pyg_with_continuous_features(
    tmp_path: Path, no_download: None, workers: int
) -> None:
    graphs = tu_graphs(30)
    write_tu_dataset(tmp_path / "tu" / "TOY" / "raw", "TOY", graphs)
    args = {"root": str(tmp_path / "tu"), "name": "TOY", "use_node_attr": True, "use_edge_attr": True}
    source = PygDataset("torch_geometric.datasets.TUDataset", args=args, task="binary", split_fractions=[0.6, 0.2, 0.2])
    # TUDataset gives float (one-hot) labels: continuous features, and one constant categorical column
    assert source.spec == DataSpec(
        node_vocab=(1,),
        edge_vocab=(1,),
        num_targets=1,
        num_outputs=1,
        continuous_node_dim=2 + 3,
        continuous_edge_dim=1 + 2,
        target_kind="binary",
    )
    data = prepared(source, tmp_path / "data", workers)
    assert data.split_sizes == {"train": 18, "valid": 6, "test": 6} and data.spec.readout == "graph_token"
    pyg = TUDataset(**args)
    store = data.datasets["train"].store
    for index, row in enumerate(store.source_row):
        record, expected, written = store.record(index), pyg[int(row)], graphs[int(row)]
        np.testing.assert_array_equal(record.x_continuous, expected.x.numpy())
        np.testing.assert_array_equal(record.x_continuous[:, :2], written.node_attributes.astype(np.float32))
        np.testing.assert_array_equal(record.x_continuous[:, 2:].argmax(1) + 1, written.node_labels)  # one-hot
        np.testing.assert_array_equal(record.edge_index, expected.edge_index.numpy())
        np.testing.assert_array_equal(record.edge_continuous, expected.edge_attr.numpy())
        np.testing.assert_array_equal(record.y, [written.graph_label])
        assert (record.x == 0).all() and (record.edge_attr == 0).all()  # the constant categorical column
        structure = graph_structure(int(expected.num_nodes), expected.edge_index.numpy())
        np.testing.assert_array_equal(record.spd, structure.spd)


def test_missing_raw_files_stop_at_once_naming_them(tmp_path: Path, no_download: None) -> None:
    source = PygDataset("torch_geometric.datasets.TUDataset", args={"root": str(tmp_path), "name": "MUTAG"})
    with pytest.raises(
        DatasetMissing,
        match=r"TUDataset has no raw files in .*MUTAG/raw \(missing: .*MUTAG_A\.txt.*"
        r"data.source.download: true",
    ):
        _ = source.spec


def test_integer_features_are_categorical_with_vocabularies_from_the_data(tmp_path: Path) -> None:
    """PyG's ZINC through PygDataset (its own splits as instances) equals the dedicated ZINC source."""
    write_zinc_raw(tmp_path / "ZINC" / "raw", {"train": 30, "val": 8, "test": 6}, {"train": 10, "val": 4, "test": 3})
    source = PygDataset(
        "torch_geometric.datasets.ZINC",
        args={"root": str(tmp_path / "ZINC"), "subset": True},
        split="instances",
        target_names=["logp"],
        split_args={"train": {"split": "train"}, "valid": {"split": "val"}, "test": {"split": "test"}},
    )
    pyg = prepared(source, tmp_path / "a")
    ours = prepared(ZINC(subset=True), tmp_path)
    atoms = torch.cat([i._data.x for i in source.instances().values()])
    bonds = torch.cat([i._data.edge_attr for i in source.instances().values()])
    assert pyg.spec == DataSpec(
        node_vocab=(int(atoms.max()) + 1,),
        edge_vocab=(int(bonds.max()) + 1,),
        num_targets=1,
        num_outputs=1,
        target_names=("logp",),
    )
    assert pyg.split_sizes == ours.split_sizes == {"train": 10, "valid": 4, "test": 3}
    for split in ("train", "valid", "test"):
        for a, b in zip(pyg.datasets[split], ours.datasets[split]):
            for field in ("x", "edge_index", "edge_attr", "spd", "first_edge", "in_degree", "y"):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


class NodeTargets(InMemoryDataset):
    """Small graphs in memory: categorical ``x`` (2 columns) and ``edge_attr``, continuous ``pos`` and
    ``edge_weight``, two regression targets per node (some NaN), and train/val/test node masks.

    Args:
        graphs: how many graphs.
        negative: put a negative category into ``x`` (a bad input).
        pos: ``complex`` or ``3-D`` makes ``pos`` (n, 3) complex or (n, 3, 1) (bad inputs).
    """

    def __init__(self, graphs: int = 12, negative: bool = False, pos: str = "real") -> None:
        super().__init__(None)
        rng = np.random.default_rng(0)
        data_list = []
        for _ in range(graphs):
            n = int(rng.integers(3, 9))
            edges = random_edges(rng, n)
            e = edges.shape[1]
            y = rng.normal(size=(n, 2)) * [1.0, 10.0] + [0.0, 5.0]
            y[rng.random((n, 2)) < 0.2] = np.nan
            split = rng.integers(0, 3, n)
            x = rng.integers(0, 4, (n, 2)) - (1 if negative else 0)
            kind = torch.complex64 if pos == "complex" else torch.float32
            position = torch.tensor(rng.normal(size=(n, 3)), dtype=kind)
            data_list.append(
                Data(
                    x=torch.tensor(x),
                    pos=position.unsqueeze(-1) if pos == "3-D" else position,
                    edge_index=torch.tensor(edges),
                    edge_attr=torch.tensor(rng.integers(0, 3, e)),
                    edge_weight=torch.tensor(rng.random(e), dtype=torch.float32),
                    y=torch.tensor(y, dtype=torch.float32),
                    train_mask=torch.tensor(split == 0),
                    val_mask=torch.tensor(split == 1),
                    test_mask=torch.tensor(split == 2),
                )
            )
        self.data, self.slices = self.collate(data_list)


NODE_SOURCE = dict(
    dataset=f"{__name__}.NodeTargets",
    node_attributes=["x", "pos"],
    edge_attributes=["edge_attr", "edge_weight"],
    target_level="node",
    split="node_masks",
    target_names=["a", "b"],
)


def test_per_node_targets_with_node_masks(tmp_path: Path) -> None:
    source = PygDataset(**NODE_SOURCE)
    data = prepared(source, tmp_path)
    pyg = NodeTargets()
    x, edge_attr = pyg._data.x, pyg._data.edge_attr
    assert data.spec == DataSpec(
        node_vocab=tuple((x.max(dim=0).values + 1).tolist()),
        edge_vocab=(int(edge_attr.max()) + 1,),
        num_targets=2,
        num_outputs=2,
        continuous_node_dim=3,
        continuous_edge_dim=1,
        target_level="node",
        target_names=("a", "b"),
    )
    assert data.spec.readout == "nodes"
    assert data.split_sizes == {"train": 12, "valid": 12, "test": 12}  # every graph once per split
    for split, mask in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        for record in data.datasets[split]:
            graph = pyg[record.index % 12]
            expected = graph.y.numpy().copy()
            expected[~graph[mask].numpy()] = np.nan
            np.testing.assert_array_equal(record.y, expected)
            np.testing.assert_array_equal(record.x, graph.x.numpy())
            np.testing.assert_array_equal(record.x_continuous, graph.pos.numpy())
            np.testing.assert_array_equal(record.edge_continuous[:, 0], graph.edge_weight.numpy())
    train_y = torch.cat([pyg[g].y[pyg[g].train_mask] for g in range(12)]).double().numpy()
    mean, std = data.target_statistics()  # training nodes only, NaN left out; float64
    np.testing.assert_allclose(mean, np.nanmean(train_y, axis=0), rtol=64 * np.finfo(np.float64).eps)
    np.testing.assert_allclose(std, np.nanstd(train_y, axis=0), rtol=64 * np.finfo(np.float64).eps)


def test_per_node_regression_trains_and_reports_masked_metrics_in_data_units(tmp_path: Path) -> None:
    data = GraphDataModule(
        PygDataset(**NODE_SOURCE), root=str(tmp_path), batch_size=4, num_workers=0, preprocess_workers=0
    )
    torch.manual_seed(0)
    task = GraphRegression(
        GraphormerConfig(**TINY), OptimConfig(lr=1e-3, warmup_steps=1), normalize_targets=True, data=data.spec
    )
    assert task.target_names == ["a", "b"] and task.model.config.readout == "nodes"
    trainer = pl.Trainer(
        max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(task, data)
    # the float64 statistics rounded once into the task's float32 buffer
    np.testing.assert_allclose(
        task.target_std.numpy(), data.target_statistics()[1], rtol=float(np.finfo(np.float32).eps)
    )
    logged = trainer.validate(task, data, verbose=False)[0]
    errors, counts = np.zeros(2), np.zeros(2)
    task.eval()
    with torch.no_grad():
        for batch in data.val_dataloader():
            prediction = task(batch)  # (B, N, 2) in the data's units
            known = batch.node_mask.unsqueeze(-1) & ~torch.isnan(batch.y)
            errors += torch.where(known, (prediction - batch.y).abs(), 0.0).sum(dim=(0, 1)).numpy()
            counts += known.sum(dim=(0, 1)).numpy()
    per_target = errors / counts
    # the same float32 errors summed in other orders (torchmetrics in float32): within one ulp per term
    rel = counts.max() * float(np.finfo(np.float32).eps)
    assert logged["val/mae/a"] == pytest.approx(per_target[0], rel=rel)
    assert logged["val/mae/b"] == pytest.approx(per_target[1], rel=rel)
    assert logged["val/mae"] == pytest.approx(per_target.mean(), rel=rel)


def test_the_data_spec_is_linked_into_the_model_by_the_cli(tmp_path: Path) -> None:
    config = {
        "model": {"class_path": "graphormer_urpe.tasks.GraphRegression", "init_args": {"encoder": TINY}},
        "data": {
            "class_path": "graphormer_urpe.data.datamodule.GraphDataModule",
            "init_args": {
                "root": str(tmp_path / "data"),
                "source": {"class_path": "graphormer_urpe.data.sources.PygDataset", "init_args": NODE_SOURCE},
            },
        },
    }
    (tmp_path / "node.yaml").write_text(yaml.safe_dump(config))
    cli = GraphormerCLI(["--config", str(tmp_path / "node.yaml"), "--run_root", str(tmp_path), "--logger", "none"])
    encoder = cli.model.model.config
    assert list(encoder.node_vocab) == list(cli.datamodule.spec.node_vocab) and list(encoder.edge_vocab) == [3]
    assert (encoder.continuous_node_dim, encoder.continuous_edge_dim, encoder.readout) == (3, 1, "nodes")
    assert encoder.num_outputs == 2 and cli.model.target_names == ["a", "b"]
    assert not (tmp_path / "data").exists()  # linking reads the data, it builds nothing


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            {"node_attributes": ["x", "feat"]},
            r"no tensor attribute 'feat' \(data.source.node_attributes\); the data "
            r"has: .*edge_weight.*pos",
        ),
        ({"args": {"negative": True}}, r"categorical node attribute 'x' column 0 has negative values"),
        (
            {"args": {"pos": "complex"}},
            r"node attribute 'pos' is a torch\.complex64 tensor of shape \(\d+, 3\); features "
            r"are \(rows,\) or \(rows, columns\) tensors of integer categories or real floats",
        ),
        ({"args": {"pos": "3-D"}}, r"node attribute 'pos' is a torch\.float32 tensor of shape \(\d+, 3, 1\); features"),
        (
            {"target_level": "graph", "split": "random"},
            r"'y' has \d+ rows for 12 graphs; per-node targets need "
            r"data.source.target_level: node",
        ),
        ({"task": "binary"}, r"values of 'y' are not 0 or 1"),
        ({"dataset": "torch_geometric.data.Data"}, r"is not a torch_geometric InMemoryDataset"),
        ({"target_names": ["a"]}, r"target_names has 1 names for the 2 columns of 'y'"),
    ],
)
def test_bad_datasets_are_refused_naming_what_is_wrong(arguments: dict, message: str) -> None:
    source = PygDataset(**{**NODE_SOURCE, **arguments})
    with pytest.raises(DataError, match=message):
        _ = source.spec


def test_a_dataset_path_that_names_nothing_is_refused_naming_the_option() -> None:
    source = PygDataset(**{**NODE_SOURCE, "dataset": "torch_geometric.datasets.NoSuchSet"})
    with pytest.raises(ConfigError) as refused:
        _ = source.spec
    assert str(refused.value) == (
        "data.source.dataset='torch_geometric.datasets.NoSuchSet': cannot be imported "
        "(module 'torch_geometric.datasets' has no attribute 'NoSuchSet')"
    )


def test_impossible_split_configurations_are_refused_at_once() -> None:
    with pytest.raises(DataError, match="split: instances needs data.source.split_args"):
        PygDataset("torch_geometric.datasets.ZINC", split="instances")
    with pytest.raises(DataError, match="node_masks splits per-node targets"):
        PygDataset("torch_geometric.datasets.ZINC", split="node_masks")
