"""ZINC (Benchmarking-GNNs): penalised logP regression, subset or full, through PyG's ``ZINC``."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from torch_geometric.datasets import ZINC as PygZINC

from graphormer_urpe.data.sources.base import GraphSource, missing_files, network_reachable
from graphormer_urpe.data.sources.pyg import FeatureLayout, PygReader
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import DatasetMissing

log = logging.getLogger(__name__)

#: PyG's split names, in the order their rows are numbered, and ours.
_SPLITS = (("train", "train"), ("val", "valid"), ("test", "test"))
_RAW_FILES = ("train.pickle", "val.pickle", "test.pickle", "train.index", "val.index", "test.index")


class ZINCReader(PygReader):
    """Rows of PyG's processed ZINC splits, numbered train, then val, then test: atom and bond types, one target."""

    def __init__(self, root: Path, subset: bool) -> None:
        super().__init__(
            [PygZINC(str(root), subset=subset, split=split) for split, _ in _SPLITS],
            FeatureLayout((("x", 1),), (), ZINC.spec.node_vocab),
            FeatureLayout((("edge_attr", 1),), (), ZINC.spec.edge_vocab),
            "y",
            node_targets=False,
        )


class ZINC(GraphSource):
    """ZINC molecules: 28 atom types, bond types 1-3, target penalised logP.

    Args:
        subset: the papers' 12k-graph "ZINC-subset" (10,000 / 1,000 / 1,000); False: the full 250k set
            (220,011 / 24,445 / 5,000), PyG's default.
    """

    name = "ZINC"
    spec = DataSpec(node_vocab=(28,), edge_vocab=(4,), num_targets=1, num_outputs=1)

    def __init__(self, subset: bool = True) -> None:
        self.subset = subset
        sizes = (10_000, 1_000, 1_000) if subset else (220_011, 24_445, 5_000)
        self.published_split_sizes = dict(zip(("train", "valid", "test"), sizes))

    def options(self) -> dict:
        return {"subset": self.subset}

    def ensure_raw(self, root: Path) -> None:
        raw = root / self.name / "raw"
        if not (missing := missing_files(raw, _RAW_FILES)):
            return
        if not network_reachable(PygZINC.url):
            raise DatasetMissing(
                f"ZINC raw files are missing from {raw}: {', '.join(missing)}; the network is not "
                f"reachable to download them. Fetch {PygZINC.url}, unzip it and move its 'molecules/' "
                f"folder to {raw}, then put train.index, val.index and test.index from "
                f"{PygZINC.split_url.format('<split>')} into {raw}."
            )
        log.info("downloading ZINC into %s", root / self.name)
        PygZINC(str(root / self.name), subset=self.subset, split="train")

    def open(self, root: Path) -> ZINCReader:
        return ZINCReader(root / self.name, self.subset)

    def splits(self, root: Path, reader: ZINCReader) -> dict[str, np.ndarray]:
        starts = reader.start
        return {ours: np.arange(starts[i], starts[i + 1]) for i, (_, ours) in enumerate(_SPLITS)}
