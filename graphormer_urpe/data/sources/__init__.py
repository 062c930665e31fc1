"""Dataset sources: raw rows in, graphs out; everything else is shared."""

from graphormer_urpe.data.sources.base import DataError, DatasetMissing, GraphSource
from graphormer_urpe.data.sources.molecules import MoleculeSource, QM9Gap
from graphormer_urpe.data.sources.pcqm4mv2 import PCQM4Mv2
from graphormer_urpe.data.sources.pyg import PygDataset
from graphormer_urpe.data.sources.tables import SmilesTable, SmilesToPredict
from graphormer_urpe.data.sources.zinc import ZINC

__all__ = [
    "DataError",
    "DatasetMissing",
    "GraphSource",
    "MoleculeSource",
    "PCQM4Mv2",
    "PygDataset",
    "QM9Gap",
    "SmilesTable",
    "SmilesToPredict",
    "ZINC",
]
