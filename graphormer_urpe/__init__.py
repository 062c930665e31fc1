"""Graphormer with Universal RPE attention (Luo et al., NeurIPS 2022): the public API, each name with a
runnable example in its docstring (the table in docs/pyg.md). The Lightning names and the PyG interface are
imported on first use: a process that needs neither starts seconds sooner (docs/contributing.md)."""

from __future__ import annotations

import importlib
from typing import Any

from graphormer_urpe.data.batch import GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.model.attention import AttentionKind, MultiHeadAttention
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig

#: Public names that import Lightning or PyG, and their modules (loaded by :func:`__getattr__` on first use).
_ON_FIRST_USE = {
    "GraphRegression": "graphormer_urpe.tasks",
    "Classification": "graphormer_urpe.tasks",
    "GraphDataModule": "graphormer_urpe.data.datamodule",
    "GraphormerStructure": "graphormer_urpe.data.pyg_interop",
    "to_graph_batch": "graphormer_urpe.data.pyg_interop",
}

__all__ = [
    "AttentionKind",
    "Classification",
    "DataSpec",
    "GraphBatch",
    "GraphDataModule",
    "GraphRecord",
    "GraphRegression",
    "Graphormer",
    "GraphormerConfig",
    "GraphormerStructure",
    "MultiHeadAttention",
    "collate_graphs",
    "graph_structure",
    "to_graph_batch",
]


def __getattr__(name: str) -> Any:
    """The Lightning and PyG parts of the API, imported when first asked for."""
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'graphormer_urpe' has no attribute {name!r}")
