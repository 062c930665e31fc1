"""Dataset sources: raw rows in, graphs out; everything else is shared."""

from graphormer_urpe.data.sources.base import DatasetMissing, GraphSource
from graphormer_urpe.data.sources.molecules import MoleculeSource, QM9Gap
from graphormer_urpe.data.sources.pcqm4mv2 import PCQM4Mv2
from graphormer_urpe.data.sources.zinc import ZINC

__all__ = ["DatasetMissing", "GraphSource", "MoleculeSource", "PCQM4Mv2", "QM9Gap", "ZINC"]
