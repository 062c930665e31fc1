"""LightningModules: loss, metrics, optimiser and schedule around the plain model.

The names below are the ``model.class_path`` values of the configs (``graphormer_urpe.tasks.GraphRegression``).
"""

from graphormer_urpe.tasks.base import GraphormerTask
from graphormer_urpe.tasks.graph import GraphClassification, GraphRegression, NodeClassification
from graphormer_urpe.tasks.tokens import NodeTagging, SequenceTagging

__all__ = [
    "GraphClassification",
    "GraphRegression",
    "GraphormerTask",
    "NodeClassification",
    "NodeTagging",
    "SequenceTagging",
]
