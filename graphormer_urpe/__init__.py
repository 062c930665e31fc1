"""Graphormer with Universal RPE attention (Luo et al., NeurIPS 2022).

The model is a plain ``nn.Module``. In a PyTorch Geometric loop::

    from graphormer_urpe import Graphormer, GraphormerStructure

    dataset = TUDataset(root, name, pre_transform=GraphormerStructure())  # SPD etc., computed once
    model = Graphormer(num_layers=6, hidden_dim=64, ffn_dim=64, num_heads=8, ...)
    for batch in DataLoader(dataset, batch_size=32):
        loss = loss_fn(model(batch), batch.y)                               # a PyG Batch goes straight in

Public API (each with a runnable example in its docstring):

* model: :class:`Graphormer`, :class:`GraphormerConfig`, :class:`MultiHeadAttention`,
  :class:`AttentionKind`;
* PyG: :class:`GraphormerStructure` (a ``pre_transform``), :func:`to_graph_batch` (a PyG
  ``Batch`` to the model's input, checked against a :class:`DataSpec`; ``Graphormer.forward`` calls
  it on PyG batches);
* the data's declaration: :class:`DataSpec` (vocabularies, widths, targets; every datamodule's
  ``spec``);
* the batch contract and preprocessing: :class:`GraphBatch`, :class:`GraphRecord`,
  :func:`collate_graphs`, :func:`graph_structure`;
* Lightning (imported on first use, so ``import graphormer_urpe`` does not load Lightning):
  :class:`GraphRegression`, :class:`Classification` (loss, metrics, optimiser, schedule) and
  :class:`GraphDataModule` (cached datasets, splits, loaders).
"""

from __future__ import annotations

import importlib
from typing import Any

from graphormer_urpe.data.batch import GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.data.pyg_interop import GraphormerStructure, to_graph_batch
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.model.attention import AttentionKind, MultiHeadAttention
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig

#: Public names that import Lightning, and their modules (loaded by :func:`__getattr__` on first use).
_LIGHTNING = {
    "GraphRegression": "graphormer_urpe.tasks",
    "Classification": "graphormer_urpe.tasks",
    "GraphDataModule": "graphormer_urpe.data.datamodule",
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
    """The Lightning part of the API, imported when first asked for."""
    if name in _LIGHTNING:
        return getattr(importlib.import_module(_LIGHTNING[name]), name)
    raise AttributeError(f"module 'graphormer_urpe' has no attribute {name!r}")
