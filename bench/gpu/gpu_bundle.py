"""Prepare what a GPU machine without network lacks for bench/gpu/gpu_check.py: wheels and prebuilt data, < 48 MiB.

    python bench/gpu/gpu_bundle.py                                      # .gpu_bundle/, wheels for Python 3.12
    python bench/gpu/gpu_bundle.py --python-version 3.11 --out BUNDLE   # the CPU rehearsal's (gpu_rehearsal.sh)

A machine with the image docs/gpu.md describes has torch, Lightning, PyG, numpy, pandas and the rest, but not
:data:`WHEELS`' packages; with no network, it gets them from here. The bundle holds:

* ``wheels/``: those packages as manylinux x86-64 wheels for ``--python-version`` (``pip download
  --no-deps --only-binary=:all:``), installed there with ``pip install --no-index --no-deps --target``;
* ``data/qm9/``: the caches of the first :data:`~gpu_check.QM9_MOLECULES` QM9 molecules, as
  ``configs/qm9_gap.yaml`` builds it (its key holds the RDKit version: the wheel's is the same), and
  of the first 50, the device tests' (``qm9_root`` of tests/conftest.py);
* ``manifest.json``: what is where, the Python version and every file's size.

It prints every part's size and the total, and exits with 1 if the total passes :data:`LIMIT_MIB`
(leaving room for the working tree within the 64 MiB such a machine may be sent). The folder is git-ignored; send it
with the working tree. Building the data needs this project's own environment
(``qm9pack``, RDKit); downloading the wheels needs PyPI.
"""

from __future__ import annotations

import argparse
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
LIMIT_MIB = 48
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
    """Bytes per part: each wheel, the QM9 cache (the first two path components)."""
    parts: dict[str, int] = {}
    for name, size in files.items():
        key = "/".join(Path(name).parts[:2])
        parts[key] = parts.get(key, 0) + size
    return parts


def build_data(data: Path, molecules: int) -> None:
    """The QM9 caches of the first ``molecules`` molecules and of the first 50, under ``data``."""
    from graphormer_urpe.data.datamodule import GraphDataModule
    from graphormer_urpe.data.sources import QM9
    from graphormer_urpe.testing.runs import TINY_MOLECULES

    for count in (molecules, TINY_MOLECULES):  # the check's runs, the device tests' qm9_root (tests/conftest.py)
        print(f"QM9 cache of the first {count} molecules under {data}", flush=True)
        GraphDataModule(QM9(max_molecules=count), root=str(data), preprocess_workers=0).prepare_data()


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
    total = sum(files.values())
    manifest = {
        "python_version": args.python_version,
        "wheels": WHEELS,
        "qm9_molecules": args.qm9_molecules,
        "total_bytes": total,
        "files": files,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name, size in part_sizes(files).items():
        print(f"{size / MIB:8.2f} MiB  {name}")
    verdict = "within" if total <= LIMIT_MIB * MIB else "OVER"
    print(f"{total / MIB:8.2f} MiB  in all under {args.out} ({verdict} the {LIMIT_MIB} MiB limit)")
    return 0 if total <= LIMIT_MIB * MIB else 1


if __name__ == "__main__":
    sys.exit(main())
