"""Dataset sources: raw rows in, graphs out; everything else is shared."""

from graphormer_urpe.data.sources.base import DatasetMissing, GraphSource
from graphormer_urpe.data.sources.molecules import QM9Gap
from graphormer_urpe.data.sources.zinc import ZINC

__all__ = ["DatasetMissing", "GraphSource", "QM9Gap", "ZINC"]
