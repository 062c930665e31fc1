"""The pretrained checkpoint shipped with the package: ``graphormer-urpe train --init_from pretrained``. See
docs/small-data.md.

``moses_rdkit2d.ckpt`` is the best checkpoint of ``graphormer-urpe train --config pretrain_moses`` (a Graphormer + URPE
encoder trained to predict the RDKit 2D descriptors of 50,000 MOSES molecules), reduced to what ``--init_from`` reads:
weights (float32), hyper-parameters and the run's config, without optimiser state. ``moses_rdkit2d.json`` beside it
records its provenance (config, corpus and its hash, steps, command, commit, metrics) and the SHA-256 of the file.
``graphormer-urpe convert pretrained RUN_CHECKPOINT --replace`` writes both from a run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

#: The short name ``--init_from`` takes for the shipped checkpoint.
SHORT_NAME = "pretrained"
CHECKPOINT = Path(__file__).with_name("moses_rdkit2d.ckpt")
PROVENANCE = Path(__file__).with_name("moses_rdkit2d.json")


def resolve_checkpoint(name_or_path: str) -> str:
    """The file ``--init_from`` reads: the shipped checkpoint for :data:`SHORT_NAME`, else ``name_or_path`` itself
    (a file of that name in the working directory is still reachable as ``./pretrained``)."""
    return str(CHECKPOINT) if name_or_path == SHORT_NAME else name_or_path


def provenance() -> dict:
    """The shipped checkpoint's provenance record."""
    return json.loads(PROVENANCE.read_text())


def sha256_of(path: Path) -> str:
    """SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
