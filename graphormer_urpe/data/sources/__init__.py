"""Dataset sources: raw rows in, graphs out. Each is imported on first use, so that the ZINC and PyG
sources never load RDKit and ogb, which only the molecule sources need."""

from __future__ import annotations

import importlib
from typing import Any

from graphormer_urpe.data.sources.base import GraphSource

#: Public name -> module that defines it.
_LAZY = {
    "MoleculeSource": "molecules",
    "MosesDescriptors": "pretraining",
    "QM9": "molecules",
    "PCQM4Mv2": "pcqm4mv2",
    "PygDataset": "pyg",
    "SmilesTable": "tables",
    "SmilesToPredict": "tables",
    "ZINC": "zinc",
}

__all__ = ["GraphSource", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
