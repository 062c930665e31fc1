"""The cache is built once even when several processes or jobs start together."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import QM9Gap
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
