"""Graphormer with Universal RPE attention (Luo et al., NeurIPS 2022).

The model is a plain ``nn.Module`` taking one :class:`GraphBatch`::

    from graphormer_urpe import Graphormer, GraphormerConfig, collate_graphs
"""

from graphormer_urpe.data.batch import GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.model.attention import AttentionKind, MultiHeadAttention
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig

__all__ = [
    "AttentionKind",
    "GraphBatch",
    "GraphRecord",
    "Graphormer",
    "GraphormerConfig",
    "MultiHeadAttention",
    "collate_graphs",
]
