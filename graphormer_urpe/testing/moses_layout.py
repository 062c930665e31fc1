"""A stand-in for the ``molsets`` wheel's MOSES files, in its layout, for tests that must not depend on the 51 MB
wheel: ``<root>/moses/__init__.py`` and ``<root>/moses/dataset/data/train.csv.gz`` (one column, ``SMILES``)."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path


def write_moses_package(root: Path, smiles: Sequence[str]) -> Path:
    """Write the layout under ``root`` (put ``root`` first on ``sys.path`` to use it); return the SMILES file."""
    package = root / "moses"
    data = package / "dataset" / "data"
    data.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    path = data / "train.csv.gz"
    with gzip.open(path, "wt") as text:
        text.write("SMILES\n" + "".join(f"{s}\n" for s in smiles))
    return path
