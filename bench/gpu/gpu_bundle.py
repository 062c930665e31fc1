"""Prepare what a GPU machine without network lacks for bench/gpu/gpu_check.py and bench/gpu/gpu_pretrain.py: wheels
and data, sent with the working tree within 64 MiB.

    python bench/gpu/gpu_bundle.py                                      # .gpu_bundle/, wheels for Python 3.12
    python bench/gpu/gpu_bundle.py --python-version 3.11 --out BUNDLE   # the CPU rehearsal's (gpu_rehearsal.sh)

A machine with the image docs/gpu.md describes has torch, Lightning, PyG, numpy, pandas and the rest, but not
:data:`WHEELS`' packages; with no network, it gets them from here. The bundle holds:

* ``wheels/``: those packages as manylinux x86-64 wheels for ``--python-version`` (``pip download
  --no-deps --only-binary=:all:``), installed there with ``pip install --no-index --no-deps --target``;
* ``data/qm9/``: the caches of the first :data:`~gpu_check.QM9_MOLECULES` QM9 molecules, as
  ``configs/qm9_gap.yaml`` builds it (its key holds the RDKit version: the wheel's is the same), and
  of the first 50, the device tests' (``qm9_root`` of tests/conftest.py);
* ``data/moses_descriptors/raw/train.csv.gz``: MOSES's 1,584,663 training SMILES (10 MB), where
  ``MosesDescriptors`` finds them under a data root without the ``molsets`` wheel (the pretraining's corpus),
  checked against the SHA-1 that the descriptor reference records;
* ``manifest.json``: what is where, the Python version and every file's size.

It prints every part's size, the working tree's (tracked files and untracked ones git does not ignore: what is sent
with the bundle) and their total, and exits with 1 if that total passes :data:`SEND_LIMIT_MIB`. The folder is
git-ignored; send it with the working tree. Building the data needs this project's own environment (``qm9pack``,
RDKit, ``molsets``); downloading the wheels needs PyPI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import REPO

#: The packages the GPU image lacks and the check imports (exact versions: this project's environment's).
#: rdkit and ogb: the molecule featuriser (graphormer_urpe.data.sources.featurize, imported by the QM9
#: source, the benchmarks' vocabularies and tests/tasks/test_tasks.py); six: ogb.utils.url; jsonargparse and its
#: signature readers: train.py's command line (LightningCLI).
WHEELS = {
    "rdkit": "2026.9.1",
    "ogb": "1.3.6",
    "six": "1.17.0",
    "jsonargparse": "4.53.0",
    "docstring-parser": "0.18.0",
    "typeshed-client": "2.15.0",
}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: The most a GPU machine may be sent: the bundle and the working tree together.
SEND_LIMIT_MIB = 64
MIB = 1024**2


def download_command(directory: Path, python_version: str) -> list[str]:
    """``pip download`` of :data:`WHEELS` for CPython ``python_version`` on manylinux x86-64, without their
    dependencies (the image has them)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--dest",
        str(directory),
    ]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    return command + [f"{name}=={version}" for name, version in WHEELS.items()]


def sizes(root: Path) -> dict[str, int]:
    """Bytes of every file under ``root``, by its path relative to ``root`` (sorted)."""
    return {str(path.relative_to(root)): path.stat().st_size for path in sorted(root.rglob("*")) if path.is_file()}


def part_sizes(files: dict[str, int]) -> dict[str, int]:
    """Bytes per part: each wheel, each dataset's data (the first two path components)."""
    parts: dict[str, int] = {}
    for name, size in files.items():
        key = "/".join(Path(name).parts[:2])
        parts[key] = parts.get(key, 0) + size
    return parts


def working_tree_bytes(repo: Path) -> int:
    """Bytes of what is sent with the bundle: the files git tracks (as they are on disk) and the untracked ones it does
    not ignore, under ``repo``."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    paths = {repo / name for name in listed.split("\0") if name}
    return sum(path.stat().st_size for path in paths if path.is_file() and not path.is_symlink())


def place_corpus(data: Path, sha1: str) -> Path:
    """Copy MOSES's training SMILES from the ``molsets`` wheel to where ``MosesDescriptors`` finds them under the data
    root ``data`` (:func:`~graphormer_urpe.data.sources.pretraining.placed_moses_file`), once their SHA-1 is
    ``sha1``; return the copy."""
    from graphormer_urpe.data.sources.pretraining import moses_smiles_file, placed_moses_file

    corpus, placed = moses_smiles_file("train"), placed_moses_file(data)
    if (found := hashlib.sha1(corpus.read_bytes()).hexdigest()) != sha1:
        raise SystemExit(f"{corpus}: SHA-1 {found}, not the {sha1} that the descriptor reference records for it")
    print(f"MOSES corpus {corpus} -> {placed}", flush=True)
    placed.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(corpus, placed)
    return placed


def build_data(data: Path, molecules: int) -> None:
    """The QM9 caches of the first ``molecules`` molecules and of the first 50, and MOSES's training SMILES (checked
    against the SHA-1 that the descriptor reference records), under ``data``."""
    from graphormer_urpe.data.datamodule import GraphDataModule
    from graphormer_urpe.data.sources import QM9
    from graphormer_urpe.data.sources.descriptors import descriptor_reference
    from graphormer_urpe.testing.runs import TINY_MOLECULES

    for count in (molecules, TINY_MOLECULES):  # the check's runs, the device tests' qm9_root (tests/conftest.py)
        print(f"QM9 cache of the first {count} molecules under {data}", flush=True)
        GraphDataModule(QM9(max_molecules=count), root=str(data), preprocess_workers=0).prepare_data()
    place_corpus(data, descriptor_reference().provenance["corpus_sha1"])


def send_report(files: dict[str, int], tree: int) -> tuple[list[str], bool]:
    """Lines of sizes (each part of the bundle, its total, the working tree ``tree``, both together) and whether
    both together are within :data:`SEND_LIMIT_MIB`."""
    total = sum(files.values())
    within = total + tree <= SEND_LIMIT_MIB * MIB
    lines = [f"{size / MIB:8.2f} MiB  {name}" for name, size in part_sizes(files).items()]
    lines += [
        f"{total / MIB:8.2f} MiB  the bundle",
        f"{tree / MIB:8.2f} MiB  the working tree (tracked files, and untracked ones git does not ignore)",
        f"{(total + tree) / MIB:8.2f} MiB  sent together ({'within' if within else 'OVER'} the {SEND_LIMIT_MIB} MiB "
        "limit)",
    ]
    return lines, within


def main(argv: list[str] | None = None) -> int:
    from bench.gpu.gpu_check import QM9_MOLECULES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / ".gpu_bundle", help="the bundle's folder (replaced)")
    parser.add_argument("--python-version", default="3.12", help="the Python of the machine the wheels are for")
    parser.add_argument("--qm9-molecules", type=int, default=QM9_MOLECULES)
    args = parser.parse_args(argv)
    if args.out.exists():
        if not (args.out / "manifest.json").is_file():
            parser.error(f"{args.out} exists and is no bundle (no manifest.json): not replacing it")
        shutil.rmtree(args.out)
    wheels = args.out / "wheels"
    wheels.mkdir(parents=True)
    command = download_command(wheels, args.python_version)
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, stdin=subprocess.DEVNULL)
    build_data(args.out / "data", args.qm9_molecules)
    files = sizes(args.out)
    tree = working_tree_bytes(REPO)
    manifest = {
        "python_version": args.python_version,
        "wheels": WHEELS,
        "qm9_molecules": args.qm9_molecules,
        "total_bytes": sum(files.values()),
        "working_tree_bytes": tree,
        "files": files,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    lines, within = send_report(files, tree)
    print("\n".join(lines))
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
