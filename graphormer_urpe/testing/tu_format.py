"""Graphs written in the TU Dortmund text layout that ``torch_geometric.datasets.TUDataset`` reads (the files are
listed in docs/reference/testing.md), for the tests and the offline PyG example (``examples/make_examples.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class TUGraph:
    """One graph with n nodes and e directed edges (list both directions of an undirected edge).

    Shapes:
        edge_index: (2, e) local node ids from 0; node_labels: (n,) or (n, k) int; node_attributes:
        (n, k) float; edge_labels: (e,) or (e, k) int; edge_attributes: (e, k) float;
        graph_label: int; graph_attributes: (k,) float.
    """

    num_nodes: int
    edge_index: np.ndarray
    node_labels: np.ndarray | None = None
    node_attributes: np.ndarray | None = None
    edge_labels: np.ndarray | None = None
    edge_attributes: np.ndarray | None = None
    graph_label: int | None = None
    graph_attributes: np.ndarray | None = None


def write_tu_dataset(raw_dir: Path, name: str, graphs: Sequence[TUGraph]) -> None:
    """Write ``graphs`` as ``raw_dir/NAME_*.txt``; an optional field is given for all graphs or for none."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    offsets = np.concatenate([[0], np.cumsum([g.num_nodes for g in graphs])])
    edges = np.concatenate([g.edge_index.T + 1 + offsets[k] for k, g in enumerate(graphs)])
    _save(raw_dir / f"{name}_A.txt", edges, "%d")
    _save(
        raw_dir / f"{name}_graph_indicator.txt",
        np.repeat(np.arange(1, len(graphs) + 1), [g.num_nodes for g in graphs]),
        "%d",
    )
    for field, fmt, stack in (
        ("node_labels", "%d", np.concatenate),
        ("node_attributes", "%.6g", np.concatenate),
        ("edge_labels", "%d", np.concatenate),
        ("edge_attributes", "%.6g", np.concatenate),
        ("graph_label", "%d", np.array),
        ("graph_attributes", "%.6g", np.stack),
    ):
        values = [getattr(g, field) for g in graphs]
        if all(v is None for v in values):
            continue
        if any(v is None for v in values):
            raise ValueError(f"{field} is given for some graphs only")
        suffix = "graph_labels" if field == "graph_label" else field  # the one file named in the plural
        _save(raw_dir / f"{name}_{suffix}.txt", stack(values), fmt)


def _save(path: Path, values: np.ndarray, fmt: str) -> None:
    """One line per row, columns separated by ", " (as the TU files)."""
    np.savetxt(path, np.asarray(values).reshape(len(values), -1), fmt=fmt, delimiter=", ")
