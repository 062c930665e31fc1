"""The cache is built once even when several processes or jobs start together; damaged cache metadata is
named and rebuilt."""

from __future__ import annotations

import json
import logging
import multiprocessing
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.cache import CacheSpec, GraphStore, build_store
from graphormer_urpe.data.datamodule import GraphDataModule, GraphDataset
from graphormer_urpe.data.sources import QM9, SmilesTable
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import DataError
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.runs import TINY_MOLECULES
from graphormer_urpe.testing.tolerance import rounding_tolerance


def build_when_released(root: str, start: multiprocessing.Event, builds: str) -> None:
    """Wait for ``start``, then prepare the data; every actual build appends a line to ``builds``."""
    original = GraphDataModule._build_cache

    def slow_recorded_build(self: GraphDataModule) -> None:
        with open(builds, "a") as f:
            f.write("build\n")
        time.sleep(1.0)  # widen the window in which an unlocked second builder would start too
        original(self)

    GraphDataModule._build_cache = slow_recorded_build
    start.wait()
    GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=root, preprocess_workers=0).prepare_data()


@pytest.mark.slow  # starts two processes
def test_two_jobs_preparing_the_same_root_build_the_cache_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    start, builds = context.Event(), tmp_path / "builds.txt"
    jobs = [
        context.Process(target=build_when_released, args=(str(tmp_path / "data"), start, str(builds))) for _ in range(2)
    ]
    for job in jobs:
        job.start()
    start.set()
    for job in jobs:
        job.join(timeout=120)
        assert job.exitcode == 0
    assert builds.read_text().count("build") == 1
    module = GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(tmp_path / "data"))
    module.setup()
    assert sum(module.split_sizes.values()) == TINY_MOLECULES


def test_building_per_node_is_an_option() -> None:
    assert not GraphDataModule(QM9(), root="x").prepare_data_per_node  # once, on global rank 0
    assert GraphDataModule(QM9(), root="x", prepare_per_node=True).prepare_data_per_node


def test_a_missing_cache_on_another_node_is_explained(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="set --data.prepare_per_node true"):
        GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(tmp_path)).setup()


def predictions_by_graph(model: Graphormer, loaders: list, skip_padding: bool = False) -> dict[int, torch.Tensor]:
    """Every graph's prediction (by dataset position) over ``loaders``, in evaluation mode; ``skip_padding``: leave
    out padding graphs (index -1)."""
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for loader in loaders:
            for batch in loader:
                for index, prediction in zip(batch.index.tolist(), model(batch)):
                    if skip_padding and index == -1:
                        continue
                    assert index not in out, "a graph was served twice"
                    out[index] = prediction
    return out


def small_model(data: GraphDataModule, attention: str) -> Graphormer:
    """A 2-layer model for ``data``'s vocabularies, in evaluation mode; with URPE a trained-looking C, so that the
    URPE product matters."""
    torch.manual_seed(0)
    model = Graphormer(
        GraphormerConfig(
            node_vocab=data.spec.node_vocab,
            edge_vocab=data.spec.edge_vocab,
            num_layers=2,
            hidden_dim=16,
            ffn_dim=16,
            num_heads=4,
            attention=attention,
        )
    ).eval()
    if model.relative_scale is not None:
        model.relative_scale.weight.data.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("attention", ["rpe", "urpe"])
def test_size_aware_batching_changes_no_prediction(qm9_root: Path, attention: str) -> None:
    modules = {}
    for window in (0, 3):
        modules[window] = GraphDataModule(
            QM9(max_molecules=TINY_MOLECULES), root=str(qm9_root), batch_size=8, num_workers=0, bucket_window=window
        )
        modules[window].setup()
    data = modules[3]
    model = small_model(data, attention)
    sizes = data.datasets["train"].store.num_nodes
    assert len(set(sizes.tolist())) > 3  # the tiny QM9 split has graphs of several sizes

    padded, bucketed = ([m.train_dataloader(), m.val_dataloader(), m.test_dataloader()] for m in modules.values())
    plain, sized = predictions_by_graph(model, padded), predictions_by_graph(model, bucketed)
    assert sorted(sized) == sorted(plain) == list(range(TINY_MOLECULES))  # every graph once per epoch / split
    for index, prediction in plain.items():
        torch.testing.assert_close(sized[index], prediction, **rounding_tolerance(sized[index], prediction))
    # size-aware batches really differ: in ascending size, fewer padded node slots
    assert sum(b.x.shape[0] * b.x.shape[1] for b in bucketed[0]) < sum(b.x.shape[0] * b.x.shape[1] for b in padded[0])
    for loader in bucketed:
        for batch in loader:
            assert torch.all(batch.node_mask.sum(1).diff() >= 0)


@pytest.mark.parametrize("attention", ["rpe", "urpe"])
def test_padding_to_a_node_multiple_changes_no_prediction_and_leaves_few_shapes(qm9_root: Path, attention: str) -> None:
    """Training batches padded to multiples of 4 nodes, to 7 graphs and to a fixed edge count: every graph predicts
    what it predicts unpadded, and an epoch's batches come in one shape per multiple."""
    modules = {}
    for multiple in (1, 4):
        modules[multiple] = GraphDataModule(
            QM9(max_molecules=TINY_MOLECULES),
            root=str(qm9_root),
            batch_size=7,
            num_workers=0,
            bucket_window=3,
            pad_nodes_to=multiple,
        )
        modules[multiple].setup()
    data = modules[4]
    model = small_model(data, attention)
    plain = predictions_by_graph(model, [modules[1].train_dataloader()])
    batches = list(data.train_dataloader())
    padded = predictions_by_graph(model, [batches], skip_padding=True)
    assert sorted(padded) == sorted(plain)
    for index, prediction in plain.items():
        torch.testing.assert_close(padded[index], prediction, **rounding_tolerance(padded[index], prediction))
    sizes = data.datasets["train"].sizes
    shapes = {(b.num_graphs, b.x.shape[1], b.edge_attr.shape[0]) for b in batches}
    assert len(shapes) <= -(-int(sizes.max()) // 4) and {graphs for graphs, _, _ in shapes} == {7}
    assert all(nodes % 4 == 0 for _, nodes, _ in shapes)
    assert any(b.index.min() == -1 for b in batches)  # the short last batch got padding graphs


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _rewrite_json(path: Path, change: Callable[[dict], None]) -> None:
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(payload))


#: (damaged file, how, fragment of the one warning after the file's path). Each is found, named and rebuilt.
DAMAGE = {
    "truncated manifest": ("manifest.json", _truncate, "is not valid JSON, truncated or corrupted"),
    "manifest of another cache": (
        "manifest.json",
        lambda p: _rewrite_json(p, lambda m: m.update(key={"x": 1})),
        "does not describe this cache (corrupted)",
    ),
    "manifest without chunks": (
        "manifest.json",
        lambda p: _rewrite_json(p, lambda m: m.pop("chunks")),
        "lacks chunks (corrupted)",
    ),
    "truncated chunk record": ("chunk_00001/chunk.json", _truncate, "chunk.json is not valid JSON"),
    "garbled chunk record": (
        "chunk_00001/chunk.json",
        lambda p: p.write_bytes(b"\xff\xfe\x00garbage"),
        "chunk.json is not valid JSON",
    ),
    "chunk record without an array": (
        "chunk_00002/chunk.json",
        lambda p: _rewrite_json(p, lambda m: m["files"].pop("y.npy")),
        "chunk.json does not list the chunk's arrays (corrupted)",
    ),
    "chunk record as a list": (
        "chunk_00000/chunk.json",
        lambda p: p.write_text("[1, 2]"),
        "chunk.json is not a JSON object (a list)",
    ),
    "corrupted split file": ("splits.npz", _flip_middle_byte, "cannot be read, truncated or corrupted"),
    "truncated split file": ("splits.npz", _truncate, "cannot be read, truncated or corrupted"),
}


@pytest.fixture(scope="module")
def intact_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, np.ndarray]:
    root = tmp_path_factory.mktemp("intact") / "data"
    module = GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(root), preprocess_workers=0, chunk_size=20)
    module.prepare_data()
    module.setup()
    return root, module.split_sizes, module.datasets["train"].store.targets()


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_damaged_cache_metadata_is_named_in_one_line_and_rebuilt(
    damage: str, intact_cache, tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    intact_root, sizes, targets = intact_cache
    root = tmp_path / "data"
    shutil.copytree(intact_root, root)
    module = GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(root), preprocess_workers=0, chunk_size=20)
    name, harm, message = DAMAGE[damage]
    harm(module.cache_dir / name)
    module.prepare_data()
    warnings = [r.getMessage() for r in package_log.records if r.levelno >= logging.WARNING]
    damaged = module.cache_dir / name.split("/")[0]
    assert len(warnings) == 1 and warnings[0].startswith(str(damaged)) and message in warnings[0], warnings
    assert warnings[0].endswith(
        "; the cache will be rebuilt" if damaged.name.endswith(("json", "npz")) else "; rebuilding it"
    )
    module.setup()
    assert module.split_sizes == sizes
    np.testing.assert_array_equal(module.datasets["train"].store.targets(), targets)
    package_log.clear()
    again = GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(root), preprocess_workers=0, chunk_size=20)
    assert again._cache_is_valid() and not package_log.records  # the rebuilt cache is intact


class HugeTargets:
    """One-node graphs whose two targets are around 1e20 (the second missing on every third graph)."""

    num_rows = 30

    def worker_init(self) -> None:
        """Nothing to prepare."""

    def graphs(self, start: int, stop: int, max_nodes: int | None = None) -> Iterator[tuple[int, RawGraph]]:
        for row in range(start, stop):
            y = np.array([1e20 * (1 + row / 7), np.nan if row % 3 == 0 else -3e19 * row], dtype=np.float32)
            yield (
                row,
                RawGraph(
                    x=np.zeros((1, 1), np.int64),
                    edge_index=np.zeros((2, 0), np.int64),
                    edge_attr=np.zeros((0, 1), np.int64),
                    y=y,
                ),
            )


def test_target_statistics_of_targets_whose_squares_overflow_float32_are_exact(tmp_path: Path) -> None:
    spec = CacheSpec(DataSpec(node_vocab=(1,), edge_vocab=(1,), num_targets=2, num_outputs=2))
    build_store(HugeTargets(), tmp_path, {"huge": 1}, spec, {"train": np.arange(30)}, num_workers=0)
    module = GraphDataModule(QM9(), root=str(tmp_path / "unused"))
    store = GraphStore(tmp_path)
    module.datasets = {"train": GraphDataset(store, np.arange(30))}
    mean, std = module.target_statistics()
    stored = store.targets().astype(np.float64)  # the float32 values the cache holds, widened exactly
    known = stored[~np.isnan(stored[:, 1]), 1]
    assert len(known) == 20
    expected_mean, expected_std = [stored[:, 0].mean(), known.mean()], [stored[:, 0].std(), known.std()]
    assert np.isfinite(mean).all() and np.isfinite(std).all()
    # float64 sums of 30 values: a relative error of a few float64 epsilons
    np.testing.assert_allclose(mean, expected_mean, rtol=64 * np.finfo(np.float64).eps)
    np.testing.assert_allclose(std, expected_std, rtol=64 * np.finfo(np.float64).eps)


def test_a_training_split_left_empty_by_preprocessing_stops_naming_why(tmp_path: Path) -> None:
    """``data.max_nodes 2`` skips every molecule: one line, not a traceback at the target statistics."""
    table = tmp_path / "t.csv"
    table.write_text("".join((REPO_DIR / "examples" / "qm9_sample.csv").read_text().splitlines(keepends=True)[:41]))
    data = GraphDataModule(
        SmilesTable(str(table), targets=["gap_ev"]), root=str(tmp_path), preprocess_workers=0, max_nodes=2
    )
    data.prepare_data()
    with pytest.raises(DataError) as refused:
        data.setup("fit")
    assert str(refused.value).startswith(
        f"{table} (SMILES column 'smiles'): no training graph is left, every one of "
        "its rows was skipped while preprocessing (first: [[0, '"
    )
    assert str(refused.value).endswith("]]); check the data, or data.max_nodes=2")
    data.setup("test")  # evaluating needs no training graph
    assert data.split_sizes["train"] == 0


def test_a_valid_cache_is_used_without_the_raw_files(
    qm9_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine given the cache alone (bench/gpu/gpu_bundle.py's, without qm9pack) trains from it; without
    a cache the missing raw files are still named before any work."""
    from graphormer_urpe.data.sources import molecules
    from graphormer_urpe.errors import DatasetMissing

    def no_qm9pack() -> list[Path]:
        raise DatasetMissing("the embedded QM9 data needs the PyPI package qm9pack: pip install qm9pack")

    monkeypatch.setattr(molecules, "qm9pack_csvs", no_qm9pack)
    module = GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(qm9_root))
    module.prepare_data()
    module.setup("fit")
    assert len(module.datasets["train"]) == int(0.8 * TINY_MOLECULES)
    with pytest.raises(DatasetMissing, match="qm9pack"):
        GraphDataModule(QM9(max_molecules=TINY_MOLECULES), root=str(tmp_path)).prepare_data()
