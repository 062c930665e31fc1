"""The cache is built once even when several processes or jobs start together."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest
import torch

from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import QM9Gap
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from tests.conftest import TINY_MOLECULES


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
    GraphDataModule(QM9Gap(max_molecules=TINY_MOLECULES), root=root, preprocess_workers=0).prepare_data()


def test_two_jobs_preparing_the_same_root_build_the_cache_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    start, builds = context.Event(), tmp_path / "builds.txt"
    jobs = [context.Process(target=build_when_released, args=(str(tmp_path / "data"), start, str(builds)))
            for _ in range(2)]
    for job in jobs:
        job.start()
    start.set()
    for job in jobs:
        job.join(timeout=120)
        assert job.exitcode == 0
    assert builds.read_text().count("build") == 1
    module = GraphDataModule(QM9Gap(max_molecules=TINY_MOLECULES), root=str(tmp_path / "data"))
    module.setup()
    assert sum(module.split_sizes.values()) == TINY_MOLECULES


def test_building_per_node_is_an_option() -> None:
    assert not GraphDataModule(QM9Gap(), root="x").prepare_data_per_node  # once, on global rank 0
    assert GraphDataModule(QM9Gap(), root="x", prepare_per_node=True).prepare_data_per_node


def test_a_missing_cache_on_another_node_is_explained(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="set --data.prepare_per_node true"):
        GraphDataModule(QM9Gap(max_molecules=TINY_MOLECULES), root=str(tmp_path)).setup()


def predictions_by_graph(model: Graphormer, loaders: list) -> dict[int, torch.Tensor]:
    """Every graph's prediction (by dataset position) over ``loaders``, in evaluation mode."""
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for loader in loaders:
            for batch in loader:
                for index, prediction in zip(batch.index.tolist(), model(batch)):
                    assert index not in out, "a graph was served twice"
                    out[index] = prediction
    return out


@pytest.mark.parametrize("attention", ["rpe", "urpe"])
def test_size_aware_batching_changes_no_prediction(qm9_root: Path, attention: str) -> None:
    modules = {}
    for window in (0, 3):
        modules[window] = GraphDataModule(QM9Gap(max_molecules=TINY_MOLECULES), root=str(qm9_root), batch_size=8,
                                          num_workers=0, bucket_window=window)
        modules[window].setup()
    data = modules[3]
    torch.manual_seed(0)
    model = Graphormer(GraphormerConfig(node_vocab=data.spec.node_vocab, edge_vocab=data.spec.edge_vocab, num_layers=2,
                                        hidden_dim=16, ffn_dim=16, num_heads=4, attention=attention)).eval()
    if model.relative_scale is not None:  # a trained-looking C, so that the URPE product matters
        model.relative_scale.weight.data.uniform_(0.5, 1.5)
    sizes = data.datasets["train"].store.num_nodes
    assert len(set(sizes.tolist())) > 3  # the tiny QM9 split has graphs of several sizes

    padded, bucketed = ([m.train_dataloader(), m.val_dataloader(), m.test_dataloader()] for m in modules.values())
    plain, sized = predictions_by_graph(model, padded), predictions_by_graph(model, bucketed)
    assert sorted(sized) == sorted(plain) == list(range(TINY_MOLECULES))  # every graph once per epoch / split
    for index, prediction in plain.items():
        torch.testing.assert_close(sized[index], prediction, rtol=1e-5, atol=1e-6)  # summation order only
    # size-aware batches really differ: in ascending size, fewer padded node slots
    assert sum(b.x.shape[0] * b.x.shape[1] for b in bucketed[0]) < sum(b.x.shape[0] * b.x.shape[1] for b in padded[0])
    for loader in bucketed:
        for batch in loader:
            assert torch.all(batch.node_mask.sum(1).diff() >= 0)
