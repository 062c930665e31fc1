"""Stand-ins for MOSES's files, for tests that must not depend on the 51 MB ``molsets`` wheel: the wheel's layout
(``<root>/moses/__init__.py`` and ``<root>/moses/dataset/data/train.csv.gz``), or the corpus alone where a data root
holds it (``<data root>/moses_descriptors/raw/train.csv.gz``); one column, ``SMILES``."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

from graphormer_urpe.data.sources.pretraining import MOSES_TRAIN_FILE, placed_moses_file


def write_moses_corpus(path: Path, smiles: Sequence[str]) -> Path:
    """Write ``smiles`` as MOSES's gzipped one-column CSV at ``path``; return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as text:
        text.write("SMILES\n" + "".join(f"{s}\n" for s in smiles))
    return path


def write_moses_package(root: Path, smiles: Sequence[str]) -> Path:
    """Write the wheel's layout under ``root`` (put ``root`` first on ``sys.path`` to use it); return the SMILES
    file."""
    (root / "moses").mkdir(parents=True, exist_ok=True)
    (root / "moses" / "__init__.py").write_text("")
    return write_moses_corpus(root / "moses" / "dataset" / "data" / MOSES_TRAIN_FILE, smiles)


def place_moses_corpus(data_root: Path, smiles: Sequence[str]) -> Path:
    """Write the corpus where a data root holds it for :class:`~graphormer_urpe.data.sources.MosesDescriptors`
    without the wheel; return the SMILES file."""
    return write_moses_corpus(placed_moses_file(data_root), smiles)
