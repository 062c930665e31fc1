"""Transcriptions of official Graphormer's preprocessing and of transformers' Graphormer data pipeline, written
from their code (not copied) for tests to compare against."""

from __future__ import annotations

import numpy as np
import torch
from ogb.utils import smiles2graph

from graphormer_urpe.data.batch import GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.data.structure import graph_structure

OFFICIAL_UNREACHABLE = 510


def floyd_warshall(adjacency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Official ``floyd_warshall``: distances (510: unreachable) and ``path[i, j]``, the last k that strictly
    shortened (i, j) (-1: none, 510: unreachable)."""
    n = adjacency.shape[0]
    dist = np.where(adjacency, 1, 0).astype(np.int64)
    for i in range(n):
        for j in range(n):
            if i == j:
                dist[i, j] = 0
            elif dist[i, j] == 0:
                dist[i, j] = OFFICIAL_UNREACHABLE
    path = np.full((n, n), -1, dtype=np.int64)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                through = dist[i, k] + dist[k, j]
                if dist[i, j] > through:
                    dist[i, j] = through
                    path[i, j] = k
    far = dist >= OFFICIAL_UNREACHABLE
    path[far] = OFFICIAL_UNREACHABLE
    dist[far] = OFFICIAL_UNREACHABLE
    return dist, path


def all_nodes(path: np.ndarray, i: int, j: int) -> list[int]:
    """Official ``get_all_edges``: the intermediate nodes of the path from i to j."""
    k = int(path[i, j])
    return [] if k == -1 else all_nodes(path, i, k) + [k] + all_nodes(path, k, j)


def official_path(path: np.ndarray, i: int, j: int) -> list[int]:
    """The node sequence official ``gen_edge_input`` walks from i to j."""
    return [i, *all_nodes(path, i, j), j]


# Official preprocessing: v2 ``graphormer/data/wrapper.py``
# (``preprocess_item``), ``graphormer/data/collator.py``.

FEATURE_OFFSET = 512


def convert_to_single_emb(x: np.ndarray) -> np.ndarray:
    """Official ``convert_to_single_emb``: column f gets ``1 + 512 f`` added."""
    return x + 1 + FEATURE_OFFSET * np.arange(x.shape[1])


def gen_edge_input(path: np.ndarray, edge_type: np.ndarray, max_dist: int) -> np.ndarray:
    """Official ``gen_edge_input``: features of the edges along each path, -1 elsewhere. (n, n, D, F)"""
    n = path.shape[0]
    out = -np.ones((n, n, max_dist, edge_type.shape[-1]), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i == j or path[i, j] == OFFICIAL_UNREACHABLE:
                continue
            nodes = official_path(path, i, j)
            for k in range(len(nodes) - 1):
                out[i, j, k] = edge_type[nodes[k], nodes[k + 1]]
    return out


def preprocess_tables(
    x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What official and transformers' ``preprocess_item`` alike compute from one graph of N nodes: adjacency, edge
    types (``convert_to_single_emb(edge_attr) + 1``, 0: no edge), distances and ``gen_edge_input`` of every hop.

    Shapes:
        returns: (N, N) bool, (N, N, E), (N, N), (N, N, max distance, E)."""
    n = x.shape[0]
    adjacency = np.zeros((n, n), dtype=bool)
    adjacency[edge_index[0], edge_index[1]] = True
    edge_type = np.zeros((n, n, edge_attr.shape[1]), dtype=np.int64)
    edge_type[edge_index[0], edge_index[1]] = convert_to_single_emb(edge_attr) + 1
    dist, path = floyd_warshall(adjacency)
    return adjacency, edge_type, dist, gen_edge_input(path, edge_type, int(dist.max()))


def _attn_bias(masked: np.ndarray) -> torch.Tensor:
    """The (N + 1, N + 1) bias of one graph: 0, and -inf at the node pairs ``masked`` (N, N) marks."""
    bias = torch.zeros(masked.shape[0] + 1, masked.shape[0] + 1)
    bias[1:, 1:][torch.from_numpy(masked)] = float("-inf")
    return bias


def _padded(arrays: list[np.ndarray] | list[torch.Tensor], fill: float = 0) -> torch.Tensor:
    """The arrays stacked on a new first axis, each padded with ``fill`` at the end of every axis to the largest."""
    tensors = [torch.as_tensor(a) for a in arrays]
    out = torch.full((len(tensors), *map(max, zip(*(t.shape for t in tensors)))), fill, dtype=tensors[0].dtype)
    for b, t in enumerate(tensors):
        out[(b, *(slice(0, size) for size in t.shape))] = t
    return out


def official_batch(
    graphs: list[tuple[np.ndarray, np.ndarray, np.ndarray]], multi_hop_max_dist: int, spatial_pos_max: int = 1024
) -> dict[str, torch.Tensor]:
    """``preprocess_item`` of every (x, edge_index, edge_attr), then ``collator``."""
    tables = [preprocess_tables(*graph) for graph in graphs]
    attn_bias = _padded([_attn_bias(dist >= spatial_pos_max) for _, _, dist, _ in tables], float("-inf"))
    for b, (x, _, _) in enumerate(graphs):
        attn_bias[b, x.shape[0] + 1 :, : x.shape[0] + 1] = 0.0  # padding nodes' rows see the real tokens
    return dict(
        x=_padded([convert_to_single_emb(x) + 1 for x, _, _ in graphs]),
        attn_bias=attn_bias,
        attn_edge_type=_padded([edge_type for _, edge_type, _, _ in tables]),
        spatial_pos=_padded([dist + 1 for _, _, dist, _ in tables]),
        in_degree=_padded([adjacency.sum(1) + 1 for adjacency, _, _, _ in tables]),
        edge_input=_padded([edges[:, :, :multi_hop_max_dist] + 1 for _, _, _, edges in tables]),
    )


# transformers' ``models/deprecated/graphormer/collating_graphormer.py``; its ``algos_graphormer.pyx`` is v2's.


def transformers_batch(
    graphs: list[tuple[np.ndarray, np.ndarray, np.ndarray]], spatial_pos_max: int = 20, node_shift: int = 1
) -> dict[str, torch.Tensor]:
    """``preprocess_item`` of every (x, edge_index, edge_attr), then ``GraphormerDataCollator(spatial_pos_max)``:
    the keyword inputs of ``GraphormerForGraphClassification``. Node rows are ``convert_to_single_emb(x) + 1``
    and then ``+ 1`` again in ``preprocess_item``; ``node_shift=0`` drops that second 1 (official's rows)."""
    tables = [preprocess_tables(*graph) for graph in graphs]
    in_degree = _padded([adjacency.sum(1) + 1 for adjacency, _, _, _ in tables])
    return dict(
        attn_bias=_padded([_attn_bias(dist + 1 >= spatial_pos_max) for _, _, dist, _ in tables]),
        attn_edge_type=_padded([edge_type for _, edge_type, _, _ in tables]),
        spatial_pos=_padded([dist + 1 for _, _, dist, _ in tables]),
        in_degree=in_degree,
        input_nodes=_padded([convert_to_single_emb(x) + 1 + node_shift for x, _, _ in graphs]),
        input_edges=_padded([edges + 1 for _, _, _, edges in tables]),
        out_degree=in_degree,
    )


#: The import tests' molecules: rings (ties between shortest
#: paths), a salt (unreachable pairs), a chain of > 5 hops
SMILES = ["c1ccc2ccccc2c1", "CC(=O)[O-].[Na+]", "OCCCCCCCC(N)C1CC1", "C1=CC=CC=CC=C1", "OC1=CC(N)CC(Cl)C1"]
#: Float32 ulps (``rounding_tolerance(..., ulps=ULPS)``) between two implementations' predictions on them: other
#: summation orders are a few ulps apart on x86, a real difference (another path order) hundreds of times more.
ULPS = 64


def molecules(path_order: str = "official") -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], GraphBatch]:
    """:data:`SMILES` as (x, edge_index, edge_attr) for the reference pipelines, and as our batch."""
    graphs, records = [], []
    for k, smiles in enumerate(SMILES):
        g = smiles2graph(smiles)
        x, edge_index, edge_attr = g["node_feat"], g["edge_index"], g["edge_feat"]
        graphs.append((x, edge_index, edge_attr))
        s = graph_structure(x.shape[0], edge_index, path_order=path_order)
        records.append(
            GraphRecord(
                x=x,
                edge_index=edge_index,
                edge_attr=edge_attr,
                spd=s.spd,
                first_edge=s.first_edge,
                in_degree=s.in_degree,
                out_degree=s.out_degree,
                y=np.zeros(1, np.float32),
                index=k,
            )
        )
    return graphs, collate_graphs(records)
