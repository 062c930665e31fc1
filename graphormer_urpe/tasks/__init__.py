"""LightningModules around the plain model; configs name them as ``graphormer_urpe.tasks.GraphRegression``."""

from graphormer_urpe.tasks.base import GraphormerTask
from graphormer_urpe.tasks.classification import Classification
from graphormer_urpe.tasks.graph import GraphRegression
from graphormer_urpe.tasks.optimiser import OptimConfig
from graphormer_urpe.tasks.tokens import SequenceTagging

__all__ = ["Classification", "GraphRegression", "GraphormerTask", "OptimConfig", "SequenceTagging"]
