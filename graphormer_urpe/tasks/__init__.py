"""LightningModules: loss, metrics, optimiser and schedule around the plain model.

The names below are the ``model.class_path`` values of the configs (``graphormer_urpe.tasks.GraphRegression``).
"""

from graphormer_urpe.tasks.base import GraphormerTask, OptimConfig
from graphormer_urpe.tasks.classification import Classification
from graphormer_urpe.tasks.graph import GraphRegression
from graphormer_urpe.tasks.tokens import SequenceTagging

__all__ = ["Classification", "GraphRegression", "GraphormerTask", "OptimConfig", "SequenceTagging"]
