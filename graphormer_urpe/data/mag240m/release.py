"""MAG240M (OGB-LSC): the raw release, read like ``ogb.lsc.MAG240MDataset`` without its ``input()`` prompt,
every array memory-mapped; its layout and the relations built from it are in docs/ogb-lsc.md."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np

from graphormer_urpe.data.safe_load import load_numpy_checkpoint, load_split_dict
from graphormer_urpe.errors import DatasetMissing

DATASET_DIR = "mag240m_kddcup2021"
#: Dimension of the paper features (RoBERTa sentence embeddings).
FEATURE_DIM = 768
DOWNLOAD_HINT = (
    "MAG240M (about 200 GB) is not downloaded automatically. Fetch it once with\n"
    "    python -c \"from ogb.lsc import MAG240MDataset; MAG240MDataset('{root}')\"\n"
    "(answer its prompts), or unzip mag240m_kddcup2021.zip from the OGB-LSC site into {root}."
)


class NodeType(IntEnum):
    """Node types, the values of the categorical node-feature column."""

    PAPER = 0
    AUTHOR = 1
    INSTITUTION = 2


@dataclass(frozen=True)
class Relation:
    """One directed relation: CSR rows are ``source`` nodes, entries ``target`` nodes; ``id``: its edge-feature value;
    ``name``: its directory under ``csr/``; ``raw``: the raw edge directory, rows (target, source) if ``transposed``."""

    id: int
    name: str
    source: NodeType
    target: NodeType
    raw: str
    transposed: bool


CITES = "paper___cites___paper"
WRITES = "author___writes___paper"
AFFILIATED = "author___affiliated_with___institution"
RAW_EDGES = (CITES, WRITES, AFFILIATED)
#: Every relation and its reverse (each raw edge file gives both), so that every node type can be expanded.
RELATIONS = (
    Relation(0, "cites", NodeType.PAPER, NodeType.PAPER, CITES, transposed=False),
    Relation(1, "cited_by", NodeType.PAPER, NodeType.PAPER, CITES, transposed=True),
    Relation(2, "writes", NodeType.AUTHOR, NodeType.PAPER, WRITES, transposed=False),
    Relation(3, "written_by", NodeType.PAPER, NodeType.AUTHOR, WRITES, transposed=True),
    Relation(4, "affiliated_with", NodeType.AUTHOR, NodeType.INSTITUTION, AFFILIATED, transposed=False),
    Relation(5, "employs", NodeType.INSTITUTION, NodeType.AUTHOR, AFFILIATED, transposed=True),
)
#: Relation id of the reverse of each relation.
REVERSE = np.array([1, 0, 3, 2, 5, 4], dtype=np.int64)


class MAG240MRaw:
    """The OGB-LSC release under ``root/mag240m_kddcup2021/``, every array memory-mapped."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.directory = self.root / DATASET_DIR

    def required_files(self) -> list[str]:
        """Paths (relative to the dataset directory) that must exist."""
        paper = [f"processed/paper/{name}.npy" for name in ("node_feat", "node_label", "node_year")]
        return ["meta.pt", "split_dict.pt", *paper, *(f"processed/{raw}/edge_index.npy" for raw in RAW_EDGES)]

    def check(self) -> None:
        """Raise :class:`DatasetMissing` naming every missing file; validate shapes and dtypes."""
        missing = [name for name in self.required_files() if not (self.directory / name).is_file()]
        if missing:
            raise DatasetMissing(
                f"MAG240M: {len(missing)} file(s) missing under {self.directory}: "
                f"{', '.join(missing)}.\n" + DOWNLOAD_HINT.format(root=self.root)
            )
        meta = self.meta
        for key in ("paper", "author", "institution", "num_classes"):
            if key not in meta:
                raise ValueError(f"{self.directory / 'meta.pt'} has no key '{key}' (keys: {sorted(meta)})")
        expected = {
            "node_feat.npy": ((meta["paper"], FEATURE_DIM), np.float16),
            "node_label.npy": ((meta["paper"],), None),
            "node_year.npy": ((meta["paper"],), None),
        }
        for name, (shape, dtype) in expected.items():
            array = self._load(f"processed/paper/{name}")
            if array.shape != shape or (dtype is not None and array.dtype != dtype):
                wanted = f"shape {shape}" + (f" dtype {np.dtype(dtype)}" if dtype else "")
                raise ValueError(
                    f"{self.directory / 'processed/paper' / name}: shape {array.shape} dtype "
                    f"{array.dtype}; expected {wanted}"
                )
        for raw in RAW_EDGES:
            edges = self.edge_index(raw)
            if edges.ndim != 2 or edges.shape[0] != 2 or not np.issubdtype(edges.dtype, np.integer):
                raise ValueError(
                    f"{self.directory / 'processed' / raw / 'edge_index.npy'}: shape {edges.shape} "
                    f"dtype {edges.dtype}; expected an integer array of shape (2, E)"
                )

    def _load(self, name: str) -> np.ndarray:
        return np.load(self.directory / name, mmap_mode="r")

    @property
    def meta(self) -> dict:
        """``{'paper': ..., 'author': ..., 'institution': ..., 'num_classes': ...}``."""
        return dict(load_numpy_checkpoint(self.directory / "meta.pt"))

    def num_nodes(self, node_type: NodeType) -> int:
        return int(self.meta[node_type.name.lower()])

    def splits(self) -> dict[str, np.ndarray]:
        """Paper ids of ``train``, ``valid``, ``test-dev``, ``test-challenge`` and ``test-whole``,
        derived from ``split_dict.pt`` exactly as ``ogb.lsc.MAG240MDataset`` does."""
        from ogb.lsc.utils import split_test

        split = load_split_dict(self.directory / "split_dict.pt", ["train", "valid", "test"])
        split_test(split)
        return split

    @property
    def paper_features(self) -> np.ndarray:
        return self._load("processed/paper/node_feat.npy")

    @property
    def paper_labels(self) -> np.ndarray:
        return self._load("processed/paper/node_label.npy")

    def edge_index(self, raw: str) -> np.ndarray:
        """(2, E) memory-mapped edges of one raw relation file."""
        return self._load(f"processed/{raw}/edge_index.npy")

    def fingerprint(self) -> dict:
        """What the derived files depend on: node counts and edge counts."""
        return {
            "nodes": {t.name.lower(): self.num_nodes(t) for t in NodeType},
            "edges": {raw: int(self.edge_index(raw).shape[1]) for raw in RAW_EDGES},
        }
