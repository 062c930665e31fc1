"""Neighbour sampling around MAG240M papers (numpy, vectorised over the batch, in the DataLoader workers) into
an unpadded :class:`CompactGraphBatch`, padded on the training device; the rules are in docs/ogb-lsc.md.

Shape letters: B graphs (target papers), N nodes of the largest graph, V nodes, P node pairs (sum of n * n)
and E edges of the batch, F node-feature columns, Fc continuous node-feature width, Fe edge-feature columns,
Fec continuous edge-feature width, Y targets.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data.batch import GraphBatch, TensorFields, pad_rows
from graphormer_urpe.data.mag240m.derived import MAG240MGraph
from graphormer_urpe.data.mag240m.release import RELATIONS, REVERSE, NodeType
from graphormer_urpe.data.mag240m.slots import SlotRing, Specs, empty_tensors, release
from graphormer_urpe.data.mag240m.structure import (
    BatchStructure,
    batched_first_edges,
    batched_graph_structure,
    edge_id_dtype,
    torch_dtype,
)

#: Relations each node type is expanded along, in a fixed order (ids of :data:`RELATIONS`).
EXPANSIONS = {t: tuple(r.id for r in RELATIONS if r.source is t) for t in NodeType}
#: Node type reached by each relation.
_TARGET_TYPE = np.array([r.target for r in RELATIONS], dtype=np.int64)
#: Largest relation id + 1: packs (edge key, relation) into one sortable integer.
_RELATION_SLOTS = 8


@dataclass
class CompactGraphBatch(TensorFields):
    """A batch of graphs without padding (fewer bytes to hand over), padded on the training device by :meth:`pad`;
    fields as in :class:`GraphBatch`, integers in the smallest dtype that holds them, nodes graph after graph
    (V nodes, E edges and P node pairs in all).
    """

    num_nodes: torch.Tensor  # (B,) int64: nodes of each graph
    x: torch.Tensor  # (V, F) integer
    x_continuous: torch.Tensor  # (V, Fc) float16/32
    in_degree: torch.Tensor  # (V,) integer
    out_degree: torch.Tensor  # (V,) integer
    spd: torch.Tensor  # (P,) uint8: each graph's (n, n) block, row-major
    edge_attr: torch.Tensor  # (E, Fe) integer
    edge_continuous: torch.Tensor  # (E, Fec) float32
    edge_dst: torch.Tensor  # (E,) integer: each edge's target in its graph, ascending within each graph
    y: torch.Tensor  # (B, Y) float32
    index: torch.Tensor  # (B,) int64
    target_node: torch.Tensor  # (B,) int64
    # (1,) uint8 or None: the lease of the worker's slot (:mod:`.slots`) holding the tensors; kept on the host
    lease: torch.Tensor | None = field(default=None, metadata={"host": True})

    def pad(self) -> GraphBatch:
        """The padded :class:`GraphBatch`, on this batch's device, in new memory (so this one can be released)."""
        n_max = int(self.num_nodes.max())  # one host sync on a GPU
        node_mask = torch.arange(n_max, device=self.num_nodes.device) < self.num_nodes[:, None]  # (B, N)
        pair_mask = node_mask[:, :, None] & node_mask[:, None, :]  # (B, N, N)
        spd = pad_rows(pair_mask, self.spd, UNREACHABLE_SPD)  # (B, N, N)
        first_edge = batched_first_edges(spd, self.num_nodes, self.out_degree, self.edge_dst)  # (V, N)
        return GraphBatch(  # node fields (V, ...) padded to (B, N, ...); the others copied
            x=pad_rows(node_mask, self.x.long(), 0),
            x_continuous=pad_rows(node_mask, self.x_continuous, 0),
            in_degree=pad_rows(node_mask, self.in_degree.long(), 0),
            out_degree=pad_rows(node_mask, self.out_degree.long(), 0),
            node_mask=node_mask,
            spd=spd,
            first_edge=pad_rows(node_mask, first_edge, NO_EDGE),
            edge_attr=self.edge_attr.to(torch.long, copy=True),
            edge_dst=self.edge_dst.to(torch.long, copy=True),
            edge_continuous=self.edge_continuous.clone(),
            y=self.y.clone(),
            index=self.index.clone(),
            target_node=self.target_node.clone(),
            molecule_features=torch.zeros(len(self.index), 0, device=self.index.device),
        )  # no molecule features

    def release(self) -> None:
        """Give the worker's slot back, once the batch has been copied onward (by :meth:`pad` or a move)."""
        release(self.lease)


@dataclass
class SampledSubgraphs:
    """The raw sample of a batch, flat over its subgraphs. Shapes: node_graph, node_type, node_id (V,): subgraph,
    type and id of each node, targets first; edge_parent, edge_child, edge_relation (S,): expanded node, drawn
    neighbour and relation of each draw."""

    node_graph: np.ndarray
    node_type: np.ndarray
    node_id: np.ndarray
    edge_parent: np.ndarray
    edge_child: np.ndarray
    edge_relation: np.ndarray


def sample_without_replacement(rng: np.random.Generator, population: np.ndarray, k: int) -> np.ndarray:
    """For each row, ``k`` distinct values of ``range(population[row])`` (Floyd's algorithm,
    vectorised over rows); requires ``population >= k``. ((R,), k) -> (R, k)"""
    rows = len(population)
    chosen = np.empty((rows, k), dtype=np.int64)
    for i in range(k):
        top = population - k + i  # (R,): draw from 0..top inclusive
        draw = np.floor(rng.random(rows) * (top + 1)).astype(np.int64)
        taken = (chosen[:, :i] == draw[:, None]).any(axis=1)
        chosen[:, i] = np.where(taken, top, draw)
    return chosen


class NeighbourSampler:
    """Samples subgraphs around papers of a :class:`MAG240MGraph`; ``fanouts``: neighbours per node at each hop."""

    def __init__(self, graph: MAG240MGraph, fanouts: Sequence[int]) -> None:
        if any(f < 0 for f in fanouts):
            raise ValueError(f"fanouts must be >= 0, got {list(fanouts)}")
        self.graph = graph
        self.fanouts = [int(f) for f in fanouts]
        counts = [graph.num_nodes[t] for t in NodeType]
        self.type_offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.total_nodes = int(sum(counts))

    def _expand(
        self, rng: np.random.Generator, node_type: NodeType, ids: np.ndarray, fanout: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw neighbours of nodes of one type: (owner, relation, neighbour) of every draw, owner
        being the position in ``ids`` of the expanded node. Shapes: (S,) each."""
        relations, indptr, indices = (
            EXPANSIONS[node_type],
            self.graph.arrays["indptr"],
            self.graph.arrays["indices"],
        )
        starts = np.stack([np.asarray(indptr[r][ids]) for r in relations], axis=1)  # (m, R)
        degree = np.stack([np.asarray(indptr[r][ids + 1]) for r in relations], axis=1) - starts
        total = degree.sum(axis=1)
        draws = np.minimum(total, fanout)
        owner = np.repeat(np.arange(len(ids)), draws)
        first = np.concatenate([[0], np.cumsum(draws)[:-1]])
        position = np.arange(len(owner)) - np.repeat(first, draws)  # take everything of small nodes
        crowded = np.flatnonzero(total > fanout)
        if len(crowded) and fanout > 0:
            slots = (first[crowded, None] + np.arange(fanout)).ravel()
            position[slots] = sample_without_replacement(rng, total[crowded], fanout).ravel()
        bounds = np.cumsum(degree, axis=1)[owner]  # (S, R)
        which = (position[:, None] >= bounds).sum(axis=1)  # index into relations
        offset = position - np.where(which > 0, bounds[np.arange(len(owner)), np.maximum(which - 1, 0)], 0)
        relation = np.asarray(relations, dtype=np.int64)[which]
        neighbour = np.empty(len(owner), dtype=np.int64)
        for k, r in enumerate(relations):
            mask = which == k
            neighbour[mask] = indices[r][starts[owner[mask], k] + offset[mask]]
        return owner, relation, neighbour

    def sample(self, targets: np.ndarray, rng: np.random.Generator) -> SampledSubgraphs:
        """Sample one subgraph around each target paper. Shapes: targets (B,) paper ids."""
        targets = np.asarray(targets, dtype=np.int64)
        batch = len(targets)
        # flat node list of the whole batch, targets first: subgraph, type and id of each node
        flat_graph, flat_type, flat_id = np.arange(batch), np.full(batch, int(NodeType.PAPER)), targets
        keys = flat_graph * self.total_nodes + targets  # (subgraph, global node) of known nodes, sorted
        sorted_flat = np.argsort(keys)
        sorted_keys = keys[sorted_flat]
        frontier, num_nodes = np.arange(batch), batch
        edges = [(np.zeros(0, dtype=np.int64),) * 3]  # (parent, child, relation) of each hop
        for fanout in self.fanouts:
            draws = []  # (parent, relation, neighbour) of each node type's draws
            for t in NodeType:
                members = frontier[flat_type[frontier] == t]
                if len(members):
                    owner, relation, neighbour = self._expand(rng, t, flat_id[members], fanout)
                    draws.append((members[owner], relation, neighbour))
            if not draws:
                break
            parent, relation, neighbour = (np.concatenate(column) for column in zip(*draws))
            child_type = _TARGET_TYPE[relation]
            graph_of = flat_graph[parent]
            key = graph_of * self.total_nodes + self.type_offset[child_type] + neighbour
            # known nodes keep their flat id; new ones get ids in order of first appearance
            where = np.minimum(np.searchsorted(sorted_keys, key), len(sorted_keys) - 1)
            known = sorted_keys[where] == key
            child = np.where(known, sorted_flat[where], -1)
            fresh_keys, first_seen, inverse = np.unique(key[~known], return_index=True, return_inverse=True)
            by_appearance = np.argsort(first_seen, kind="stable")
            new_flat = np.empty(len(fresh_keys), dtype=np.int64)
            new_flat[by_appearance] = num_nodes + np.arange(len(fresh_keys))
            child[~known] = new_flat[inverse]
            new_positions = np.flatnonzero(~known)[first_seen[by_appearance]]
            flat_graph = np.concatenate([flat_graph, graph_of[new_positions]])
            flat_type = np.concatenate([flat_type, child_type[new_positions]])
            flat_id = np.concatenate([flat_id, neighbour[new_positions]])
            merged = np.concatenate([sorted_keys, fresh_keys])
            order = np.argsort(merged, kind="stable")
            sorted_keys = merged[order]
            sorted_flat = np.concatenate([sorted_flat, new_flat])[order]
            edges.append((parent, child, relation))
            frontier = num_nodes + np.arange(len(fresh_keys))
            num_nodes += len(fresh_keys)
        parent, child, relation = (np.concatenate(column) for column in zip(*edges))
        return SampledSubgraphs(
            node_graph=flat_graph,
            node_type=flat_type.astype(np.int64),
            node_id=flat_id,
            edge_parent=parent,
            edge_child=child,
            edge_relation=relation,
        )

    def batch(self, targets: np.ndarray, rng: np.random.Generator, slots: SlotRing | None = None) -> CompactGraphBatch:
        """Sample subgraphs around ``targets`` (B,) into a :class:`CompactGraphBatch` (in ``slots`` if given):
        ``x`` node type, ``edge_attr`` relation, ``y`` label (NaN if unknown), ``index`` paper id."""
        targets = np.asarray(targets, dtype=np.int64)
        sample = self.sample(targets, rng)
        batch, graph = len(targets), sample.node_graph
        num_nodes = np.bincount(graph, minlength=batch)
        n_max = max(int(num_nodes.max(initial=1)), 1)
        by_graph = np.argsort(graph, kind="stable")  # flat ids grouped by subgraph, sampling order kept
        node_start = np.concatenate([[0], np.cumsum(num_nodes)[:-1]])
        local = np.empty(len(graph), dtype=np.int64)
        local[by_graph] = np.arange(len(graph)) - node_start[graph[by_graph]]

        # both directions of every sampled edge; one edge per ordered pair (lowest relation id)
        src = np.concatenate([sample.edge_parent, sample.edge_child])
        dst = np.concatenate([sample.edge_child, sample.edge_parent])
        relation = np.concatenate([sample.edge_relation, REVERSE[sample.edge_relation]])
        pair = (graph[src] * n_max + local[src]) * n_max + local[dst]
        pair, relation = np.divmod(np.unique(pair * _RELATION_SLOTS + relation), _RELATION_SLOTS)
        first = np.diff(pair, prepend=-1) != 0  # pairs are sorted, each first with its lowest relation
        pair, relation = pair[first], relation[first]
        edge_graph, rest = np.divmod(pair, n_max * n_max)
        edge_src, edge_dst = np.divmod(rest, n_max)
        edge_ptr = np.concatenate([[0], np.cumsum(np.bincount(edge_graph, minlength=batch))])

        specs = self._specs(batch, len(graph), int(num_nodes @ num_nodes), len(relation), n_max)
        tensors, lease = slots.allocate(specs) if slots is not None else (empty_tensors(specs), None)
        arrays = {name: t.numpy() for name, t in tensors.items()}
        batched_graph_structure(
            num_nodes,
            np.stack([edge_src, edge_dst]),
            edge_ptr,
            out=BatchStructure(spd=arrays["spd"], in_degree=arrays["in_degree"], out_degree=arrays["out_degree"]),
        )
        node_type, node_id = sample.node_type[by_graph], sample.node_id[by_graph]  # (V,) subgraph by subgraph
        for t in NodeType:
            rows = np.flatnonzero(node_type == t)
            if len(rows):  # np.take: a fast row gather from the memory map
                arrays["x_continuous"][rows] = np.take(self.graph.features(t), node_id[rows], axis=0)
        arrays["num_nodes"][:] = num_nodes
        arrays["x"][:, 0] = node_type
        arrays["edge_attr"][:, 0] = relation
        arrays["edge_dst"][:] = edge_dst
        arrays["y"][:, 0] = self.graph.labels(targets)
        arrays["index"][:] = targets
        arrays["target_node"][:] = 0
        return CompactGraphBatch(**tensors, lease=lease)

    def _specs(self, batch: int, nodes: int, pairs: int, edges: int, n_max: int) -> Specs:
        """Shapes and dtypes of a :class:`CompactGraphBatch`'s tensors (small integer types)."""
        # degree <= E
        degree, width = torch_dtype(edge_id_dtype(edges)), self.graph.features(NodeType.PAPER).shape[1]
        return {
            "num_nodes": ((batch,), torch.int64),
            "y": ((batch, 1), torch.float32),
            "index": ((batch,), torch.int64),
            "target_node": ((batch,), torch.int64),
            "x": ((nodes, 1), torch.int8),
            "x_continuous": ((nodes, width), torch.float16),
            "in_degree": ((nodes,), degree),
            "out_degree": ((nodes,), degree),
            "spd": ((pairs,), torch.uint8),
            "edge_attr": ((edges, 1), torch.int8),
            "edge_continuous": ((edges, 0), torch.float32),
            "edge_dst": ((edges,), torch_dtype(np.min_scalar_type(-n_max))),
        }  # the smallest signed type


class SubgraphCollator:
    """``collate_fn`` of the MAG240M loaders: ``[(epoch, paper), ...]`` -> :class:`CompactGraphBatch`, sampled
    with randomness ``(seed, epoch, target papers)``, in one of ``slots`` per worker (0: none)."""

    def __init__(self, graph: MAG240MGraph, fanouts: Sequence[int], seed: int, slots: int = 4) -> None:
        self.sampler = NeighbourSampler(graph, fanouts)
        self.seed = seed
        self.slots = SlotRing(slots) if slots else None

    def __call__(self, items: Sequence[tuple[int, int]]) -> CompactGraphBatch:
        epoch = int(items[0][0])
        targets = np.array([paper for _, paper in items], dtype=np.int64)
        rng = np.random.default_rng([self.seed, epoch, zlib.crc32(targets.tobytes())])
        return self.sampler.batch(targets, rng, self.slots)
