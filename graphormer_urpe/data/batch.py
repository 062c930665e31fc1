"""The batch contract between data and model (:class:`GraphBatch`) and :func:`collate_graphs`, which builds it.
Shape letters: B graphs, N nodes of the largest graph (no graph token), E edges of the whole batch, F / Fc
categorical / continuous node-feature columns, Fe / Fec edge ones, Y targets per graph (or per node), M
molecule-level features per graph."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Self

import numpy as np
import torch

from graphormer_urpe.constants import NO_EDGE, NO_TARGET_NODE, UNREACHABLE_SPD
from graphormer_urpe.data.structure import graph_structure


class RawGraph(NamedTuple):
    """A graph before structural preprocessing (n nodes, e directed edges).

    Shapes:
        x: (n, F) int; edge_index: (2, e) int; edge_attr: (e, Fe) int; y: (Y,) float32 graph-level targets,
        or (n, Y) node-level ones (NaN where unknown); x_continuous: (n, Fc) and edge_continuous: (e, Fec)
        float, or None when the dataset has none; molecule_features: (M,) float32 molecule-level features, NaN
        where missing, or None when the dataset has none (M = 0)."""

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    y: np.ndarray
    x_continuous: np.ndarray | None = None
    edge_continuous: np.ndarray | None = None
    molecule_features: np.ndarray | None = None


class GraphRecord(NamedTuple):
    """One preprocessed graph with n nodes and e directed edges (numpy arrays, maybe memory-mapped).

    Shapes:
        as :class:`RawGraph`, plus spd: (n, n) uint8; first_edge: (n, n) int16; in_degree, out_degree: (n,)
        int; index: position of the graph in its dataset."""

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    spd: np.ndarray
    first_edge: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray
    y: np.ndarray
    index: int
    x_continuous: np.ndarray | None = None
    edge_continuous: np.ndarray | None = None
    molecule_features: np.ndarray | None = None

    @classmethod
    def from_graph(
        cls, x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, y: np.ndarray, index: int = 0
    ) -> GraphRecord:
        """The record of a graph, its structure computed as the cache does.

        Example:
            >>> edges = np.array([[0, 1, 1, 2], [1, 0, 2, 1]])  # a path 0 - 1 - 2, both directions of each edge
            >>> record = GraphRecord.from_graph(np.array([[1], [2], [3]]), edges, np.ones((4, 1), int),
            ...                                 np.array([0.5], np.float32))
            >>> record.spd.tolist(), record.first_edge[0].tolist()
            ([[0, 1, 2], [1, 0, 1], [2, 1, 0]], [-1, 0, 0])
        """
        s = graph_structure(len(x), edge_index)
        return cls(x, edge_index, edge_attr, s.spd, s.first_edge, s.in_degree, s.out_degree, y, index)


class TensorFields:
    """Device moves of a tensor dataclass; a field with ``metadata={"host": True}`` is carried over as it is."""

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Self:
        """A copy with every tensor on ``device``."""
        return self.map_tensors(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Self:
        """A copy in page-locked memory (called by ``DataLoader(pin_memory=True)``)."""
        return self.map_tensors(torch.Tensor.pin_memory)

    def map_tensors(self, move: Callable[[torch.Tensor], torch.Tensor]) -> Self:
        """A copy with ``move`` applied to every tensor field."""
        return type(self)(
            **{
                f.name: getattr(self, f.name) if f.metadata.get("host") else move(getattr(self, f.name))
                for f in dataclasses.fields(self)
            }
        )


@dataclass
class GraphBatch(TensorFields):
    """A padded batch of graphs: the model's whole input, made by :func:`collate_graphs` or
    :func:`~graphormer_urpe.data.pyg_interop.to_graph_batch`.

    Each field's dtype, shape and meaning are on its line below; padding holds 0 unless stated.

    Example:
        >>> edges = np.array([[0, 1], [1, 0]])
        >>> record = GraphRecord.from_graph(np.array([[3], [4]]), edges, np.ones((2, 1), int), np.zeros(1, np.float32))
        >>> batch = collate_graphs([record, record])
        >>> batch.num_graphs, tuple(batch.spd.shape), batch.first_edge[1].tolist()  # graph 1 owns edges 2, 3
        (2, (2, 2, 2), [[-1, 2], [3, -1]])
    """

    x: torch.Tensor  # (B, N, F) int64: categorical node features (raw values, >= 0)
    # (B, N, Fc) float16/32: continuous node features (Fc = 0 when the dataset has none)
    x_continuous: torch.Tensor
    node_mask: torch.Tensor  # (B, N) bool: True for real nodes
    in_degree: torch.Tensor  # (B, N) int64
    out_degree: torch.Tensor  # (B, N) int64
    spd: torch.Tensor  # (B, N, N) uint8: shortest-path distance, 255 = unreachable or padding
    # (B, N, N) int64: batch edge id of the first edge of a shortest path from i to j, -1 if none (i == j,
    # unreachable, padding); int16/int32 in batches of sampled subgraphs, widened by the model
    first_edge: torch.Tensor
    edge_attr: torch.Tensor  # (E, Fe) int64: categorical edge features of every batch edge
    # (E, Fec) float32: continuous edge features (Fec = 0 when the dataset has none)
    edge_continuous: torch.Tensor
    edge_dst: torch.Tensor  # (E,) int64: target node (position in its graph) of each edge
    y: torch.Tensor  # (B, Y) float32 targets, NaN where unknown; or (B, N, Y) per node (NaN at padding)
    index: torch.Tensor  # (B,) int64: dataset position of each graph (MAG240M: the target paper's id)
    # (B,) int64: node whose label ``y`` is, or -1 (NO_TARGET_NODE) for graph-level tasks
    target_node: torch.Tensor
    # (B, M) float32: molecule-level features as the data gives them (NaN where missing; the model standardises
    # them), M = 0 for datasets without them
    molecule_features: torch.Tensor

    @property
    def num_graphs(self) -> int:
        """B, the number of graphs (what metrics use as ``batch_size``)."""
        return self.x.shape[0]


def pad_rows(mask: torch.Tensor, values: torch.Tensor, fill: float) -> torch.Tensor:
    """``values`` at the True positions of ``mask`` (in row-major order), ``fill`` elsewhere: unpadded rows into
    a padded batch. Shapes: mask (*S) with K True, values (K, *R) -> (*S, *R)."""
    out = values.new_full((*mask.shape, *values.shape[1:]), fill)
    whole_rows = mask.reshape(*mask.shape, *[1] * (values.dim() - 1)).expand_as(out)
    return out.masked_scatter_(whole_rows, values)  # 7x faster than out[mask] = values on a CPU


@dataclass(frozen=True)
class BatchShape:
    """Padding beyond a batch's content, so that training batches come in few shapes: a compiled step compiles (and
    a CUDA graph is captured) once per shape (``--data.pad_nodes_to``, docs/throughput.md). Padding changes no
    prediction and no loss: padding nodes are masked, padding graphs have no node and no known target, and no
    shortest path runs through a padding edge.

    Example:
        >>> shape = BatchShape(node_multiple=8, graphs=4, edges_per_node=3)
        >>> shape.nodes(largest=19), shape.edges(nodes=24)  # 19 nodes -> 24; 4 graphs x 24 nodes x 3 edges
        (24, 288)

    Args:
        node_multiple: N, the node count of the batch, rounded up to a multiple of this.
        graphs: B, the graphs of the batch, padded with empty graphs up to this many (a short last batch).
        edges_per_node: E, the edges of the batch, padded to ``graphs * N * edges_per_node``: at least the largest
            ratio of directed edges to nodes of any graph that may be in the batch, so the bound always holds.
    """

    node_multiple: int
    graphs: int
    edges_per_node: int

    def nodes(self, largest: int) -> int:
        """N of a batch whose largest graph has ``largest`` nodes."""
        return -(-max(largest, 1) // self.node_multiple) * self.node_multiple

    def edges(self, nodes: int) -> int:
        """E of a batch of N = ``nodes``."""
        return self.graphs * nodes * self.edges_per_node


def collate_graphs(records: Sequence[GraphRecord], shape: BatchShape | None = None) -> GraphBatch:
    """Pad B records (all graph-level or all node-level targets) to the largest one and renumber their edges
    batch-wide: ``first_edge`` ids index the concatenated ``edge_attr``. With ``shape``, pad further to its
    node count, graph count and edge count (padding graphs: no node, NaN targets, ``index`` -1).

    Example:
        >>> path = GraphRecord.from_graph(np.array([[1], [2], [3]]), np.array([[0, 1], [1, 2]]),
        ...                               np.ones((2, 1), int), np.zeros(1, np.float32))
        >>> single = GraphRecord.from_graph(np.array([[4]]), np.zeros((2, 0), int), np.zeros((0, 1), int),
        ...                                 np.ones(1, np.float32))
        >>> batch = collate_graphs([path, single])
        >>> batch.node_mask.tolist(), batch.spd[1].tolist()  # padding pairs hold 255
        ([[True, True, True], [True, False, False]], [[0, 255, 255], [255, 255, 255], [255, 255, 255]])
        >>> padded = collate_graphs([path, single], BatchShape(node_multiple=4, graphs=3, edges_per_node=1))
        >>> tuple(padded.spd.shape), tuple(padded.edge_attr.shape), padded.index.tolist()
        ((3, 4, 4), (12, 1), [0, 0, -1])
    """
    sizes = np.array([len(r.in_degree) for r in records])
    edge_offset = np.concatenate([[0], np.cumsum(np.array([r.edge_index.shape[1] for r in records]))])
    batch, n_max = len(records), int(sizes.max(initial=1))
    num_edges = int(edge_offset[-1])
    if shape is not None:
        if batch > shape.graphs:
            raise ValueError(f"{batch} graphs do not fit a batch shape of {shape.graphs}")
        batch, n_max = shape.graphs, shape.nodes(n_max)
        if num_edges > shape.edges(n_max):
            raise ValueError(
                f"{num_edges} edges exceed the batch shape's {shape.edges(n_max)} ({shape.graphs} "
                f"graphs x {n_max} nodes x {shape.edges_per_node} edges per node)"
            )
        num_edges = shape.edges(n_max)
    continuous_width = _width(records[0].x_continuous)
    molecule_width = 0 if records[0].molecule_features is None else len(records[0].molecule_features)
    node_targets = np.ndim(records[0].y) == 2
    num_targets = records[0].y.shape[-1]

    x = np.zeros((batch, n_max, records[0].x.shape[1]), dtype=np.int64)
    x_continuous = np.zeros((batch, n_max, continuous_width), dtype=np.float32)
    node_mask = np.zeros((batch, n_max), dtype=bool)
    in_degree, out_degree = np.zeros((2, batch, n_max), dtype=np.int64)
    spd = np.full((batch, n_max, n_max), UNREACHABLE_SPD, dtype=np.uint8)
    first_edge = np.full((batch, n_max, n_max), NO_EDGE, dtype=np.int64)
    y = np.full((batch, n_max, num_targets) if node_targets else (batch, num_targets), np.nan, dtype=np.float32)
    index = np.full(batch, -1, dtype=np.int64)  # padding graphs: -1
    molecule_features = np.full((batch, molecule_width), np.nan, dtype=np.float32)  # padding graphs: missing
    for b, (r, n) in enumerate(zip(records, sizes)):
        x[b, :n] = r.x
        node_mask[b, :n] = True
        if continuous_width:
            x_continuous[b, :n] = r.x_continuous
        if node_targets:
            y[b, :n] = r.y
        else:
            y[b] = r.y
        in_degree[b, :n] = r.in_degree
        out_degree[b, :n] = r.out_degree
        spd[b, :n, :n] = r.spd
        local = r.first_edge.astype(np.int64)
        first_edge[b, :n, :n] = np.where(local >= 0, local + edge_offset[b], NO_EDGE)
        index[b] = r.index
        if molecule_width:
            molecule_features[b] = r.molecule_features

    edge_continuous = (
        _concat([r.edge_continuous for r in records], np.float32)
        if _width(records[0].edge_continuous)
        else np.zeros((int(edge_offset[-1]), 0), dtype=np.float32)
    )
    padding_edges = num_edges - int(edge_offset[-1])  # never on a path: any values do
    arrays = dict(
        x=x,
        x_continuous=x_continuous,
        node_mask=node_mask,
        in_degree=in_degree,
        out_degree=out_degree,
        spd=spd,
        first_edge=first_edge,
        edge_attr=_padded_rows(_concat([r.edge_attr for r in records], np.int64), padding_edges),
        edge_continuous=_padded_rows(edge_continuous, padding_edges),
        edge_dst=_padded_rows(_concat([r.edge_index[1] for r in records], np.int64), padding_edges),
        y=y,
        index=index,
        target_node=np.full(batch, NO_TARGET_NODE, dtype=np.int64),
        molecule_features=molecule_features,
    )
    return GraphBatch(**{name: torch.from_numpy(array) for name, array in arrays.items()})


def _padded_rows(array: np.ndarray, rows: int) -> np.ndarray:
    """``array`` with ``rows`` rows of zeros appended."""
    return np.concatenate([array, np.zeros((rows, *array.shape[1:]), dtype=array.dtype)]) if rows else array


def _width(features: np.ndarray | None) -> int:
    return 0 if features is None else features.shape[1]


def _concat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=dtype) for a in arrays], axis=0)
