"""bench/gpu/gpu_bundle.py without the network: its pip command, its size accounting (the bundle and the working tree
sent with it), the MOSES corpus it places, and that it replaces only a bundle."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from bench.gpu import gpu_bundle
from graphormer_urpe.data.sources.pretraining import moses_smiles
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.moses_layout import write_moses_package


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


def test_the_bundle_and_the_working_tree_are_sent_within_64_mib_together() -> None:
    files = {"wheels/rdkit.whl": 40 * gpu_bundle.MIB, "data/moses_descriptors/raw/train.csv.gz": 10 * gpu_bundle.MIB}
    lines, within = gpu_bundle.send_report(files, tree=14 * gpu_bundle.MIB)
    assert within
    assert lines[-1] == "   64.00 MiB  sent together (within the 64 MiB limit)"
    assert "   50.00 MiB  the bundle" in lines and "   10.00 MiB  data/moses_descriptors" in lines
    lines, within = gpu_bundle.send_report(files, tree=14 * gpu_bundle.MIB + 1)
    assert not within and lines[-1].endswith("(OVER the 64 MiB limit)")


def test_the_working_tree_is_what_git_tracks_and_what_it_does_not_ignore(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(".gpu_bundle/\n")  # 13 bytes, untracked and not ignored: sent
    (tmp_path / "tracked.py").write_bytes(b"x" * 100)
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.py"], check=True)
    (tmp_path / "new.md").write_bytes(b"y" * 7)
    (tmp_path / ".gpu_bundle").mkdir()
    (tmp_path / ".gpu_bundle" / "rdkit.whl").write_bytes(b"z" * 5000)  # ignored: sent only when carried
    assert gpu_bundle.working_tree_bytes(tmp_path) == 13 + 100 + 7


def test_the_corpus_is_placed_under_the_data_root_once_its_sha1_is_the_references(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel_file = write_moses_package(tmp_path / "site", ["CCO", "c1ccccc1"])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sha1 = hashlib.sha1(wheel_file.read_bytes()).hexdigest()
    with pytest.raises(SystemExit, match=f"{wheel_file}: SHA-1 {sha1}, not the 0000"):
        gpu_bundle.place_corpus(tmp_path / "data", "0000")
    assert not (tmp_path / "data").exists()
    placed = gpu_bundle.place_corpus(tmp_path / "data", sha1)
    assert placed == tmp_path / "data" / "moses_descriptors" / "raw" / "train.csv.gz"
    assert placed.read_bytes() == wheel_file.read_bytes()
    assert moses_smiles("train", tmp_path / "data") == ["CCO", "c1ccccc1"]


def test_a_folder_that_is_no_bundle_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        gpu_bundle.main(["--out", str(tmp_path)])
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_bundle_folder_is_ignored_by_git() -> None:
    assert ".gpu_bundle/" in (REPO_DIR / ".gitignore").read_text().splitlines()
