"""LightningModules: loss, metrics, optimiser and schedule around the plain model.

The names below are the ``model.class_path`` values of the configs (``graphormer_urpe.tasks.GraphRegression``).
``GraphClassification``, ``NodeClassification`` and ``NodeTagging`` are the former names of
:class:`Classification`, kept so that configs naming them still work (:mod:`graphormer_urpe.tasks.compat`).
"""

from graphormer_urpe.tasks.base import GraphormerTask, OptimConfig
from graphormer_urpe.tasks.classification import Classification
from graphormer_urpe.tasks.graph import GraphRegression
from graphormer_urpe.tasks.tokens import SequenceTagging

#: Former names of :class:`Classification` (graph labels, MAG240M target nodes, synthetic node labels).
GraphClassification = NodeClassification = NodeTagging = Classification

__all__ = [
    "Classification",
    "GraphClassification",
    "GraphRegression",
    "GraphormerTask",
    "NodeClassification",
    "NodeTagging",
    "OptimConfig",
    "SequenceTagging",
]
