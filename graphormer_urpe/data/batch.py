"""The batch contract between data and model, and the collate function that builds it.

A :class:`GraphRecord` is one preprocessed graph as the cache stores it (small-integer numpy
arrays). :func:`collate_graphs` pads a list of them to the largest graph of the batch and returns
a :class:`GraphBatch`, the only input :class:`~graphormer_urpe.model.graphormer.Graphormer` takes.

Node-level tasks (MAG240M) sample subgraphs in the DataLoader workers
(:mod:`graphormer_urpe.data.mag240m.sampler`), with continuous node features and a target node;
the workers hand them over as a :class:`CompactGraphBatch` (no padding), which the training
process pads into a :class:`GraphBatch` on its device (:meth:`CompactGraphBatch.pad`).
Datasets with per-node targets (``PygDataset`` with ``target_level: node``) cache one target row
per node, and their batches carry ``y`` of shape (B, N, Y).

Shape letters: B graphs, N nodes of the largest graph (no graph token), E edges of the whole
batch, F node-feature columns, Fc continuous node-feature width, Fe edge-feature columns, Fec
continuous edge-feature width, Y targets per graph (or per node); unpadded: V nodes and P node
pairs (sum of n * n) of the whole batch.
"""

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
        x: (n, F) int; edge_index: (2, e) int; edge_attr: (e, Fe) int;
        y: (Y,) float32 graph-level targets, or (n, Y) node-level ones (NaN where unknown);
        x_continuous: (n, Fc) float or None; edge_continuous: (e, Fec) float or None (None when
        the dataset has no continuous features).
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    y: np.ndarray
    x_continuous: np.ndarray | None = None
    edge_continuous: np.ndarray | None = None


class GraphRecord(NamedTuple):
    """One preprocessed graph with n nodes and e directed edges (numpy arrays, maybe memory-mapped).

    Shapes:
        x: (n, F) int; edge_index: (2, e) int, local node ids; edge_attr: (e, Fe) int;
        spd: (n, n) uint8; first_edge: (n, n) int16; in_degree, out_degree: (n,) int;
        y: (Y,) float32 graph-level targets or (n, Y) node-level ones, NaN where unknown;
        index: position of the graph in its dataset; x_continuous: (n, Fc) float32 and
        edge_continuous: (e, Fec) float32, or None when the dataset has no continuous features.
    """

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

    @classmethod
    def from_graph(cls, x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, y: np.ndarray,
                   index: int = 0) -> GraphRecord:
        """The record of a graph, its structure computed by
        :func:`~graphormer_urpe.data.structure.graph_structure` (as the cache does).

        Example:
            A path 0 - 1 - 2 (both directions of each edge), one node-feature column, one edge one:

            >>> import numpy as np
            >>> edges = np.array([[0, 1, 1, 2], [1, 0, 2, 1]])
            >>> record = GraphRecord.from_graph(np.array([[1], [2], [3]]), edges, np.ones((4, 1), int),
            ...                                 np.array([0.5], np.float32))
            >>> record.spd.tolist(), record.first_edge[0].tolist()
            ([[0, 1, 2], [1, 0, 1], [2, 1, 0]], [-1, 0, 0])
        """
        structure = graph_structure(len(x), edge_index)
        return cls(x=x, edge_index=edge_index, edge_attr=edge_attr, spd=structure.spd,
                   first_edge=structure.first_edge, in_degree=structure.in_degree,
                   out_degree=structure.out_degree, y=y, index=index)


class TensorFields:
    """Device moves of a dataclass whose fields are tensors (what Lightning and the DataLoader call).

    A field declared with ``metadata={"host": True}`` (a handle on host shared memory, or None)
    is carried over as it is.
    """

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Self:
        """A copy with every tensor on ``device``."""
        return self.map_tensors(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Self:
        """A copy in page-locked memory (called by ``DataLoader(pin_memory=True)``)."""
        return self.map_tensors(torch.Tensor.pin_memory)

    def map_tensors(self, move: Callable[[torch.Tensor], torch.Tensor]) -> Self:
        """A copy with ``move`` applied to every tensor field."""
        return type(self)(**{
            f.name: getattr(self, f.name) if f.metadata.get("host") else move(getattr(self, f.name))
            for f in dataclasses.fields(self)
        })


@dataclass
class GraphBatch(TensorFields):
    """A padded batch of graphs: the model's whole input.

    Fields (padding positions hold 0 unless stated; ``node_mask`` says which nodes are real):

    ===============  =========  ================  ==================================================
    field            dtype      shape             meaning
    ===============  =========  ================  ==================================================
    x                int64      (B, N, F)         categorical node features (raw values, >= 0)
    x_continuous     float16/32 (B, N, Fc)        continuous node features (Fc = 0 when the dataset
                                                  has none); 0 at padding
    node_mask        bool       (B, N)            True for real nodes
    in_degree        int64      (B, N)            in-degree of each node
    out_degree       int64      (B, N)            out-degree of each node
    spd              uint8      (B, N, N)         shortest-path distance, 255 = unreachable/padding
    first_edge       int64      (B, N, N)         batch edge id of the first edge of a shortest path
                                                  from i to j, -1 if none (i == j, unreachable, pad);
                                                  int16/int32 in batches of sampled subgraphs (fewer
                                                  bytes to move), widened by the model
    edge_attr        int64      (E, Fe)           categorical edge features of every batch edge
    edge_continuous  float32    (E, Fec)          continuous edge features (Fec = 0 when the dataset
                                                  has none)
    edge_dst         int64      (E,)              target node (position in its graph) of each edge
    y                float32    (B, Y)            targets, NaN where unknown; (B, N, Y) for per-node
                                                  targets (NaN at padding and unlabelled nodes)
    index            int64      (B,)              dataset position of each graph (MAG240M: the
                                                  target paper's id)
    target_node      int64      (B,)              node whose label ``y`` is (node-level tasks), or
                                                  -1 (:data:`NO_TARGET_NODE`) for graph-level ones
    ===============  =========  ================  ==================================================

    Example:
        Made by :func:`collate_graphs` from cached records, or by
        :func:`~graphormer_urpe.data.pyg_interop.to_graph_batch` from a PyG batch:

        >>> import numpy as np
        >>> edges = np.array([[0, 1], [1, 0]])
        >>> record = GraphRecord.from_graph(np.array([[3], [4]]), edges, np.ones((2, 1), int), np.zeros(1, np.float32))
        >>> batch = collate_graphs([record, record])
        >>> batch.num_graphs, tuple(batch.spd.shape), batch.first_edge[1].tolist()  # graph 1 owns edges 2, 3
        (2, (2, 2, 2), [[-1, 2], [3, -1]])
    """

    x: torch.Tensor
    x_continuous: torch.Tensor
    node_mask: torch.Tensor
    in_degree: torch.Tensor
    out_degree: torch.Tensor
    spd: torch.Tensor
    first_edge: torch.Tensor
    edge_attr: torch.Tensor
    edge_continuous: torch.Tensor
    edge_dst: torch.Tensor
    y: torch.Tensor
    index: torch.Tensor
    target_node: torch.Tensor

    @property
    def num_graphs(self) -> int:
        """B, the number of graphs (what metrics use as ``batch_size``)."""
        return self.x.shape[0]


def pad_rows(mask: torch.Tensor, values: torch.Tensor, fill: float) -> torch.Tensor:
    """``values`` at the True positions of ``mask`` (in row-major order), ``fill`` elsewhere: unpadded
    rows into a padded batch (MAG240M's compact batches, PyG batches).

    Shapes:
        mask (*S) with K True, values (K, *R) -> (*S, *R).
    """
    out = values.new_full((*mask.shape, *values.shape[1:]), fill)
    whole_rows = mask.reshape(*mask.shape, *[1] * (values.dim() - 1)).expand_as(out)
    return out.masked_scatter_(whole_rows, values)  # 7x faster than out[mask] = values on a CPU


def collate_graphs(records: Sequence[GraphRecord]) -> GraphBatch:
    """Pad graphs to the largest one of the batch and renumber their edges batch-wide.

    Args:
        records: B preprocessed graphs (all graph-level or all node-level targets).

    Returns:
        A :class:`GraphBatch`; ``first_edge`` ids index the concatenated ``edge_attr``.

    Example:
        >>> import numpy as np
        >>> path = GraphRecord.from_graph(np.array([[1], [2], [3]]), np.array([[0, 1], [1, 2]]),
        ...                               np.ones((2, 1), int), np.zeros(1, np.float32))
        >>> single = GraphRecord.from_graph(np.array([[4]]), np.zeros((2, 0), int), np.zeros((0, 1), int),
        ...                                 np.ones(1, np.float32))
        >>> batch = collate_graphs([path, single])
        >>> batch.node_mask.tolist(), batch.spd[1].tolist()  # padding pairs hold 255
        ([[True, True, True], [True, False, False]], [[0, 255, 255], [255, 255, 255], [255, 255, 255]])
    """
    batch = len(records)
    sizes = np.array([len(r.in_degree) for r in records])
    num_edges = np.array([r.edge_index.shape[1] for r in records])
    edge_offset = np.concatenate([[0], np.cumsum(num_edges)])
    n_max = int(sizes.max(initial=1))
    num_features = records[0].x.shape[1]
    continuous_width = _width(records[0].x_continuous)
    node_targets = np.ndim(records[0].y) == 2

    x = np.zeros((batch, n_max, num_features), dtype=np.int64)
    x_continuous = np.zeros((batch, n_max, continuous_width), dtype=np.float32)
    node_mask = np.zeros((batch, n_max), dtype=bool)
    in_degree = np.zeros((batch, n_max), dtype=np.int64)
    out_degree = np.zeros((batch, n_max), dtype=np.int64)
    spd = np.full((batch, n_max, n_max), UNREACHABLE_SPD, dtype=np.uint8)
    first_edge = np.full((batch, n_max, n_max), NO_EDGE, dtype=np.int64)
    if node_targets:  # (B, N, Y), NaN at padding
        y = np.full((batch, n_max, records[0].y.shape[1]), np.nan, dtype=np.float32)
    else:
        y = np.stack([np.asarray(r.y, dtype=np.float32) for r in records])  # (B, Y)
    for b, (r, n) in enumerate(zip(records, sizes)):
        x[b, :n] = r.x
        if continuous_width:
            x_continuous[b, :n] = r.x_continuous
        if node_targets:
            y[b, :n] = r.y
        node_mask[b, :n] = True
        in_degree[b, :n] = r.in_degree
        out_degree[b, :n] = r.out_degree
        spd[b, :n, :n] = r.spd
        local = r.first_edge.astype(np.int64)
        first_edge[b, :n, :n] = np.where(local >= 0, local + edge_offset[b], NO_EDGE)

    edge_continuous_width = _width(records[0].edge_continuous)
    if edge_continuous_width:
        edge_continuous = _concat([r.edge_continuous for r in records], np.float32)
    else:
        edge_continuous = np.zeros((int(edge_offset[-1]), 0), dtype=np.float32)
    return GraphBatch(
        x=torch.from_numpy(x),
        x_continuous=torch.from_numpy(x_continuous),
        node_mask=torch.from_numpy(node_mask),
        in_degree=torch.from_numpy(in_degree),
        out_degree=torch.from_numpy(out_degree),
        spd=torch.from_numpy(spd),
        first_edge=torch.from_numpy(first_edge),
        edge_attr=torch.from_numpy(_concat([r.edge_attr for r in records], np.int64)),
        edge_continuous=torch.from_numpy(edge_continuous),
        edge_dst=torch.from_numpy(_concat([r.edge_index[1] for r in records], np.int64)),
        y=torch.from_numpy(y),
        index=torch.tensor([r.index for r in records], dtype=torch.long),
        target_node=torch.full((batch,), NO_TARGET_NODE, dtype=torch.long),
    )


def _width(features: np.ndarray | None) -> int:
    """Columns of an optional (rows, width) feature array; 0 for None."""
    return 0 if features is None else features.shape[1]


def _concat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=dtype) for a in arrays], axis=0)
