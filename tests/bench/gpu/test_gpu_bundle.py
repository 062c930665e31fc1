"""bench/gpu/gpu_bundle.py without the network: its pip command, its size accounting, and that it replaces only a
bundle."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.gpu import gpu_bundle
from graphormer_urpe.testing import REPO_DIR


def test_the_download_asks_for_binary_wheels_of_the_machines_python_without_dependencies(tmp_path: Path) -> None:
    command = gpu_bundle.download_command(tmp_path, "3.12")
    assert command[1:4] == ["-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:"} <= set(command)
    assert command[command.index("--python-version") + 1] == "3.12"
    assert command[command.index("--implementation") + 1] == "cp"
    assert command[command.index("--dest") + 1] == str(tmp_path)
    platforms = [command[i + 1] for i, word in enumerate(command) if word == "--platform"]
    assert platforms == ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    assert command[-len(gpu_bundle.WHEELS) :] == [f"{name}=={version}" for name, version in gpu_bundle.WHEELS.items()]
    assert {"rdkit", "ogb", "jsonargparse"} <= set(gpu_bundle.WHEELS)


def test_sizes_count_every_file_and_group_them_by_part(tmp_path: Path) -> None:
    files = {
        "wheels/rdkit-1-cp312.whl": 3000,
        "wheels/six-1-py3.whl": 10,
        "data/qm9/graphormer/a/chunk0.npz": 500,
        "data/qm9/graphormer/a/manifest.json": 20,
        "data/qm9_pool.csv": 7,
    }
    for name, size in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    assert gpu_bundle.sizes(tmp_path) == dict(sorted(files.items()))
    assert gpu_bundle.part_sizes(gpu_bundle.sizes(tmp_path)) == {
        "data/qm9": 520,
        "data/qm9_pool.csv": 7,
        "wheels/rdkit-1-cp312.whl": 3000,
        "wheels/six-1-py3.whl": 10,
    }


def test_a_folder_that_is_no_bundle_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        gpu_bundle.main(["--out", str(tmp_path)])
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_bundle_folder_is_ignored_by_git() -> None:
    assert ".gpu_bundle/" in (REPO_DIR / ".gitignore").read_text().splitlines()
