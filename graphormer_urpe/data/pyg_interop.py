"""The model in a plain PyTorch Geometric loop: a ``pre_transform`` and a ``Batch`` conversion (``docs/pyg.md``).
Integer (or bool) attributes are categorical, float ones continuous. Shape letters as in
:mod:`graphormer_urpe.data.batch`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.transforms import BaseTransform

from graphormer_urpe.constants import NO_EDGE, NO_TARGET_NODE, UNREACHABLE_SPD
from graphormer_urpe.data.batch import GraphBatch, pad_rows
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import MAX_EDGES, MAX_NODES, PathOrder, check_path_order, graph_structure

#: Attributes :class:`GraphormerStructure` adds (besides ``num_nodes``).
STRUCTURE_ATTRIBUTES = ("spd", "first_edge", "in_degree", "out_degree")
_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def is_categorical(tensor: torch.Tensor) -> bool:
    """Whether a feature tensor is categorical (integer or bool) rather than continuous (float)."""
    return tensor.dtype == torch.bool or not (tensor.is_floating_point() or tensor.is_complex())


def _feature_names(data: Data, names: Sequence[str] | None, default: str) -> list[str]:
    """The feature attributes: ``names`` (each must exist), or ``default`` when ``data`` has it."""
    if names is None:
        return [default] if default in data and isinstance(data[default], torch.Tensor) else []
    for name in names:
        if name not in data or not isinstance(data[name], torch.Tensor):
            raise ValueError(f"the graph has no tensor attribute '{name}'; it has: {', '.join(sorted(data.keys()))}")
    return list(names)


def _as_columns(tensor: torch.Tensor, rows: int, name: str) -> torch.Tensor:
    """A (rows,) or (rows, k) feature tensor as (rows, k); refuses another row count, more dimensions (which
    columns they would be is a guess) and complex values (which float features would drop the imaginary part of)."""
    if tensor.is_complex():
        raise ValueError(
            f"attribute '{name}' is {tensor.dtype}: features are integer categories or real floats "
            "(torch.view_as_real gives the real and imaginary parts as two float columns)"
        )
    if tensor.dim() not in (1, 2) or tensor.shape[0] != rows:
        raise ValueError(f"attribute '{name}' has shape {tuple(tensor.shape)}; expected ({rows},) or ({rows}, columns)")
    return tensor.reshape(rows, math.prod(tensor.shape[1:]))  # not (rows, -1): ambiguous with 0 rows


class GraphormerStructure(BaseTransform):
    r"""Adds shortest-path distances, first edges of shortest paths and degrees to a ``Data`` (a ``pre_transform``);
    a graph it cannot encode is refused with a ``ValueError`` naming the attribute and the value (``docs/pyg.md``).

    Args:
        node_attributes: node-feature attributes to check (those :func:`to_graph_batch` reads); default ``x``.
        edge_attributes: edge-feature attributes to check; default ``edge_attr`` if present.
        path_order: which shortest path ``first_edge`` follows: ``smallest_next`` or ``official`` (official
            Graphormer's Floyd-Warshall paths, for a model imported from official weights).

    Example:
        >>> data = GraphormerStructure()(Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=4))  # 3: isolated
        >>> data.spd.view(4, 4)[0].tolist(), data.first_edge.view(4, 4)[0].tolist(), data.in_degree.tolist()
        ([0, 1, 2, 255], [-1, 0, 0, -1], [0, 1, 1, 0])
    """

    def __init__(
        self,
        node_attributes: Sequence[str] | None = None,
        edge_attributes: Sequence[str] | None = None,
        path_order: PathOrder = "smallest_next",
    ) -> None:
        check_path_order(path_order)
        self.node_attributes = None if node_attributes is None else list(node_attributes)
        self.edge_attributes = None if edge_attributes is None else list(edge_attributes)
        self.path_order = path_order

    def forward(self, data: Data) -> Data:
        """Check ``data`` and add the structure attributes (to a shallow copy, as PyG transforms do)."""
        if not isinstance(data, Data):
            raise TypeError(f"GraphormerStructure takes homogeneous torch_geometric Data, got {type(data).__name__}")
        if (n := data.num_nodes) is None:
            raise ValueError("the graph's node count is unknown: set data.num_nodes (or give it an 'x')")
        n = int(n)
        if not 1 <= n <= MAX_NODES:
            raise ValueError(f"the graph has num_nodes={n}; 1 to {MAX_NODES} nodes are supported")
        edge_index = data.edge_index if data.edge_index is not None else torch.zeros(2, 0, dtype=torch.long)
        if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype not in _INTEGER_DTYPES:
            raise ValueError(
                f"edge_index has shape {tuple(edge_index.shape)} and dtype {edge_index.dtype}; "
                "expected (2, edges) integers"
            )
        e = edge_index.shape[1]
        if e > MAX_EDGES:
            raise ValueError(
                f"the graph has {e} directed edges in edge_index; at most {MAX_EDGES} are supported "
                "(first-edge ids are stored as int16)"
            )
        edges = edge_index.detach().cpu().numpy()  # numpy: checks on tiny arrays cost microseconds, not tens
        if e and (edges.min() < 0 or edges.max() >= n):
            row, column = np.argwhere((edges < 0) | (edges >= n))[0]
            raise ValueError(
                f"edge_index[{row}, {column}] = {edges[row, column]} is not a node of a graph "
                f"with num_nodes={n} (0 .. {n - 1})"
            )
        for names, default, rows in ((self.node_attributes, "x", n), (self.edge_attributes, "edge_attr", e)):
            for name in _feature_names(data, names, default):
                _check_values(_as_columns(data[name], rows, name), name)

        data.edge_index = edge_index
        data.num_nodes = n
        for name, array in graph_structure(n, edges, self.path_order)._asdict().items():
            data[name] = torch.from_numpy(array.reshape(-1))  # pair attributes as flat (n * n,) blocks
        return data

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(node_attributes={self.node_attributes}, "
            f"edge_attributes={self.edge_attributes}, path_order={self.path_order!r})"
        )


def _check_values(values: torch.Tensor, name: str) -> None:
    """Refuse negative categorical values and non-finite continuous ones. values: (rows, k)"""
    array, categorical = values.detach().cpu().numpy(), is_categorical(values)
    bad = array < 0 if categorical else ~np.isfinite(array)
    rule = (
        "a negative category (categories are 0, 1, 2 ...; store continuous values as floats)"
        if categorical
        else "not finite (NaN or inf)"
    )
    if bad.any():
        row, column = np.argwhere(bad)[0]
        raise ValueError(f"attribute '{name}' row {row} column {column} is {array[row, column].item()}: {rule}")


def _features(
    batch: Batch, names: list[str], rows: int, what: str
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[str, int]]]:
    """Categorical (rows, F) int64 (one zero column when there is none), continuous (rows, Fc)
    float32, and the (attribute, column) that every categorical column comes from."""
    categorical, continuous, origin = [], [], []
    for name in names:
        columns = _as_columns(batch[name], rows, name)
        if is_categorical(columns):
            categorical.append(columns.long())
            origin += [(name, c) for c in range(columns.shape[1])]
        else:
            continuous.append(columns.float())
    device = batch.edge_index.device
    if not categorical:
        categorical = [torch.zeros(rows, 1, dtype=torch.long, device=device)]
        origin = [(f"(no categorical {what} attribute: constant 0)", 0)]
    values = torch.cat(continuous, dim=1) if continuous else torch.zeros(rows, 0, device=device)
    return torch.cat(categorical, dim=1), values, origin


def to_graph_batch(
    batch: Batch | Data,
    spec: DataSpec | None = None,
    *,
    node_attributes: Sequence[str] | None = None,
    edge_attributes: Sequence[str] | None = None,
    target: str = "y",
    target_level: Literal["graph", "node"] | None = None,
) -> GraphBatch:
    """The :class:`~graphormer_urpe.data.batch.GraphBatch` of a PyG batch (or ``Data``) of graphs that went through
    :class:`GraphormerStructure`, on its device: field for field what ``collate_graphs`` makes of the same graphs,
    except ``index`` (the position in the batch). Stale structure or wrong features raise a ``ValueError``.

    Args:
        spec: when given, the feature widths must match it and every categorical value must be below its
            vocabulary (checked here, not by an opaque index error on the GPU).
        node_attributes: node-feature attributes (integer: categorical, float: continuous); default ``x``.
        edge_attributes: edge-feature attributes; default ``edge_attr`` if present.
        target: the target attribute; a batch without it gets ``y`` of shape (B, 0).
        target_level: ``graph`` (``y`` (B, Y)) or ``node`` (``y`` (B, N, Y), NaN at padding); default
            ``spec.target_level``, else ``graph``.

    Molecule-level features come from a graph-level attribute ``molecule_features`` of shape (1, M) per graph
    (``(B, M)`` in the batch, NaN where missing); without it the batch has (B, 0), and a ``spec`` with molecule
    features refuses it.

    Example:
        >>> structure = GraphormerStructure()
        >>> path = structure(Data(x=torch.tensor([[1], [2], [3]]), edge_index=torch.tensor([[0, 1], [1, 2]])))
        >>> pair = structure(Data(x=torch.tensor([[4], [5]]), edge_index=torch.tensor([[0, 1], [1, 0]])))
        >>> graphs = to_graph_batch(Batch.from_data_list([path, pair]))
        >>> graphs.node_mask.tolist(), graphs.first_edge[1].tolist()  # the pair's edges are the batch's 2 and 3
        ([[True, True, True], [True, True, False]], [[-1, 2, -1], [3, -1, -1], [-1, -1, -1]])
    """
    if not isinstance(batch, Data):
        raise TypeError(f"to_graph_batch takes a torch_geometric Batch (or Data), got {type(batch).__name__}")
    if not isinstance(batch, Batch):
        batch = Batch.from_data_list([batch])
    if missing := [name for name in STRUCTURE_ATTRIBUTES if name not in batch]:
        raise ValueError(
            f"the batch has no {', '.join(missing)}: build the dataset with "
            "pre_transform=GraphormerStructure() (delete its processed/ directory first: PyG does "
            "not re-process a dataset whose pre_transform changed)"
        )
    if spec is not None and spec.target_level == "target_node":
        raise ValueError(
            "readout='target_node' reads GraphBatch.target_node, which PyG batches do not carry; "
            "use readout='nodes' (a prediction for every node) or 'graph_token'"
        )
    if target_level is None:
        target_level = spec.target_level if spec is not None else "graph"
    if target_level not in ("graph", "node"):
        raise ValueError(f"target_level={target_level!r}; expected 'graph' or 'node'")

    device = batch.edge_index.device
    num_graphs, num_total, num_edges = batch.num_graphs, batch.num_nodes, batch.edge_index.shape[1]
    num_nodes = batch.ptr.diff()  # (B,)
    node_start = batch.ptr[:-1]  # (B,)
    edge_graph = batch.batch[batch.edge_index[0]]  # (E,)
    edges_per_graph = torch.bincount(edge_graph, minlength=num_graphs)  # (B,)
    edge_start = torch.cumsum(edges_per_graph, 0) - edges_per_graph  # (B,) first edge of each graph
    x, x_continuous, node_origin = _features(batch, _feature_names(batch, node_attributes, "x"), num_total, "node")
    edge_attr, edge_continuous, edge_origin = _features(
        batch, _feature_names(batch, edge_attributes, "edge_attr"), num_edges, "edge"
    )
    if spec is not None:
        _check_widths(spec, x, x_continuous, edge_attr, edge_continuous)

    stale = "apply every transform that changes nodes or edges before GraphormerStructure, not after it"
    if len(batch.in_degree) != num_total or len(batch.out_degree) != num_total:
        raise ValueError(f"the batch has {num_total} nodes but {len(batch.in_degree)} in-degrees: {stale}")
    degree_mismatch = (torch.bincount(batch.edge_index[0], minlength=num_total) != batch.out_degree).sum()
    # a transform applied after GraphormerStructure (at every access) can make NaN or inf that it never saw
    non_finite = (~torch.isfinite(x_continuous)).sum() + (~torch.isfinite(edge_continuous)).sum()
    checks = [num_nodes.max(), (num_nodes * num_nodes).sum(), degree_mismatch, non_finite]  # one sync for all
    if spec is not None:
        checks += [_outside(x, spec.node_vocab).sum(), _outside(edge_attr, spec.edge_vocab).sum()]
    n_max, num_pairs, mismatched, not_finite, *outside = torch.stack([c.reshape(()).long() for c in checks]).tolist()
    if not_finite:
        nodes_bad = not torch.isfinite(x_continuous).all()
        what, values = ("node", x_continuous) if nodes_bad else ("edge", edge_continuous)
        row, column = (int(i) for i in torch.nonzero(~torch.isfinite(values))[0])
        raise ValueError(
            f"the batch's continuous {what} features hold {not_finite} values that are not finite (NaN "
            f"or inf), the first at {what} {row} of the batch, column {column}: "
            f"{values[row, column].item()}; GraphormerStructure refuses them, so a transform applied "
            "after it made them"
        )
    if num_pairs != batch.spd.numel() or num_pairs != batch.first_edge.numel() or mismatched:
        raise ValueError(
            f"the structure attributes do not fit the batch's graphs ({num_pairs} node pairs, spd "
            f"holds {batch.spd.numel()}; {mismatched} nodes whose out_degree disagrees with edge_index): "
            f"{stale}"
        )
    if any(outside):
        _raise_outside(x, spec.node_vocab, node_origin, "node_vocab")
        _raise_outside(edge_attr, spec.edge_vocab, edge_origin, "edge_vocab")

    node_mask = torch.arange(n_max, device=device) < num_nodes[:, None]  # (B, N)
    pair_mask = node_mask[:, :, None] & node_mask[:, None, :]  # (B, N, N): row-major blocks, graph after graph
    local = pad_rows(pair_mask, batch.first_edge, NO_EDGE).long()  # (B, N, N) ids within each graph
    first_edge = torch.where(local >= 0, local + edge_start[:, None, None], NO_EDGE)  # (B, N, N) batch edge ids
    return GraphBatch(  # shapes as documented in GraphBatch
        x=pad_rows(node_mask, x, 0),
        x_continuous=pad_rows(node_mask, x_continuous, 0),
        node_mask=node_mask,
        in_degree=pad_rows(node_mask, batch.in_degree.long(), 0),
        out_degree=pad_rows(node_mask, batch.out_degree.long(), 0),
        spd=pad_rows(pair_mask, batch.spd, UNREACHABLE_SPD),
        first_edge=first_edge,
        edge_attr=edge_attr,
        edge_continuous=edge_continuous,
        # position in its graph
        edge_dst=batch.edge_index[1] - node_start[edge_graph],
        y=_targets(batch, target, target_level, node_mask, num_graphs, num_total),
        index=torch.arange(num_graphs, device=device),
        target_node=torch.full((num_graphs,), NO_TARGET_NODE, dtype=torch.long, device=device),
        molecule_features=_molecule_features(batch, spec, num_graphs),
    )


def _molecule_features(batch: Batch, spec: DataSpec | None, num_graphs: int) -> torch.Tensor:
    """(B, M) float32 from the graph-level attribute ``molecule_features`` ((1, M) per graph), or (B, 0)."""
    width = None if spec is None else len(spec.molecule_features)
    if "molecule_features" not in batch:
        if width:
            raise ValueError(
                f"the model reads {width} molecule-level features ({', '.join(spec.molecule_features[:3])}"
                " ...): give each graph an attribute molecule_features of shape (1, M)"
            )
        return torch.zeros(num_graphs, 0, device=batch.edge_index.device)
    values = batch.molecule_features
    if (
        not isinstance(values, torch.Tensor)
        or values.dim() != 2
        or values.shape[0] != num_graphs
        or (width is not None and values.shape[1] != width)
    ):
        shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        expected = "M" if width is None else str(width)
        raise ValueError(
            f"attribute 'molecule_features' has shape {shape} in a batch of {num_graphs} graphs; give "
            f"each graph a (1, {expected}) tensor"
        )
    return values.float()


def _targets(
    batch: Batch, target: str, level: str, node_mask: torch.Tensor, num_graphs: int, num_total: int
) -> torch.Tensor:
    """(B, Y) float32 graph targets, (B, N, Y) node targets (NaN at padding), or (B, 0) without any."""
    if target not in batch:
        return torch.zeros(num_graphs, 0, device=node_mask.device)
    rows = num_graphs if level == "graph" else num_total
    y = batch[target]
    if not isinstance(y, torch.Tensor) or y.dim() == 0 or y.shape[0] != rows:
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(
            f"target '{target}' has shape {shape}; {level}-level targets need {rows} rows "
            f"({'graphs' if level == 'graph' else 'nodes'} of the batch): set target_level"
        )
    y = y.reshape(rows, -1).float()
    return y if level == "graph" else pad_rows(node_mask, y, float("nan"))


def _check_widths(
    spec: DataSpec, x: torch.Tensor, x_continuous: torch.Tensor, edge_attr: torch.Tensor, edge_continuous: torch.Tensor
) -> None:
    """Refuse feature widths that differ from the model's (instead of a silent drop or a deep failure)."""
    for what, ids, values, vocab, width, field in (
        ("node", x, x_continuous, spec.node_vocab, spec.continuous_node_dim, "continuous_node_dim"),
        ("edge", edge_attr, edge_continuous, spec.edge_vocab, spec.continuous_edge_dim, "continuous_edge_dim"),
    ):
        if ids.shape[1] != len(vocab):
            raise ValueError(
                f"the batch has {ids.shape[1]} categorical {what}-feature column(s), the model's "
                f"{what}_vocab has {len(vocab)} entries ({list(vocab)}); one entry per column"
            )
        if values.shape[1] != width:
            raise ValueError(
                f"the batch has {values.shape[1]} continuous (float) {what}-feature column(s), the "
                f"model has {field}={width}: set {field}={values.shape[1]}, or store categorical "
                f"{what} features as integers"
            )


def _outside(ids: torch.Tensor, vocab: Sequence[int]) -> torch.Tensor:
    """Which values lie outside 0 .. vocab[c] - 1 of their column c. ids: (rows, F) -> (rows, F) bool"""
    return (ids < 0) | (ids >= torch.as_tensor(list(vocab), device=ids.device))


def _raise_outside(ids: torch.Tensor, vocab: Sequence[int], origin: list[tuple[str, int]], field: str) -> None:
    """Name the first value outside its column's vocabulary (error path only)."""
    bad = _outside(ids, vocab)
    if bad.any():
        row, column = (int(k) for k in torch.nonzero(bad)[0])
        name, attribute_column = origin[column]
        raise ValueError(
            f"attribute '{name}' column {attribute_column} has value {int(ids[row, column])} (batch row "
            f"{row}), outside the model's {field}[{column}] = {vocab[column]} categories "
            f"(0 .. {vocab[column] - 1}): raise {field}[{column}]"
        )
