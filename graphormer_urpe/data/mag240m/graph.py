"""The memory-mapped MAG240M graph that the sampler reads: CSR of every relation, features, labels."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from graphormer_urpe.data.mag240m.derived import FEATURE_FILES, csr_files
from graphormer_urpe.data.mag240m.release import RELATIONS, NodeType


def _mapped(path: Path) -> np.ndarray:
    return np.asarray(np.load(path, mmap_mode="r"))


class MAG240MGraph:
    """Memory-mapped CSR, features and labels of the release in ``raw_directory`` and its derived files; pickled
    without arrays (each process maps the files itself on first use). ``num_nodes``: nodes per type."""

    def __init__(self, raw_directory: Path, derived_directory: Path, num_nodes: Mapping[NodeType, int]) -> None:
        self.raw_directory = Path(raw_directory)
        self.derived_directory = Path(derived_directory)
        self.num_nodes = {NodeType(k): int(v) for k, v in num_nodes.items()}
        self._arrays: dict | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrays": None}

    @property
    def arrays(self) -> dict:
        """The memory maps of this process, as plain read-only ndarray views (no per-access
        ``np.memmap`` overhead; the data stay in the page cache, shared by all workers)."""
        if self._arrays is None:
            derived, paper = self.derived_directory, self.raw_directory / "processed" / "paper"
            self._arrays = {"indptr": [_mapped(derived / csr_files(relation)[0]) for relation in RELATIONS],
                            "indices": [_mapped(derived / csr_files(relation)[1]) for relation in RELATIONS],
                            "features": [_mapped(paper / "node_feat.npy"),
                                         *(_mapped(derived / FEATURE_FILES[t]) for t in FEATURE_FILES)],
                            "labels": _mapped(paper / "node_label.npy")}
        return self._arrays

    def indptr(self, relation: int) -> np.ndarray:
        return self.arrays["indptr"][relation]

    def indices(self, relation: int) -> np.ndarray:
        return self.arrays["indices"][relation]

    def features(self, node_type: NodeType) -> np.ndarray:
        return self.arrays["features"][node_type]

    def labels(self, papers: np.ndarray) -> np.ndarray:
        """float32 labels of ``papers``, NaN where unknown (outside arXiv, or hidden test labels)."""
        labels = np.asarray(self.arrays["labels"][papers], dtype=np.float32)
        return np.where(np.isfinite(labels) & (labels >= 0), labels, np.nan).astype(np.float32)
