"""Neighbour sampling: fanouts, edges that exist, types, SPD, determinism, isolated papers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.mag240m.derived import MAG240MGraph
from graphormer_urpe.data.mag240m.release import RELATIONS, REVERSE, MAG240MRaw, NodeType
from graphormer_urpe.data.mag240m.sampler import (
    NeighbourSampler,
    SampledSubgraphs,
    SubgraphCollator,
    sample_without_replacement,
)
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.testing.tolerance import rounding_tolerance

FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def graph(synthetic_mag) -> MAG240MGraph:
    raw = MAG240MRaw(synthetic_mag)
    return MAG240MGraph(raw.directory, raw.directory / "graphormer", {t: raw.num_nodes(t) for t in NodeType})


@pytest.fixture(scope="module")
def neighbours(synthetic_mag) -> list[dict[int, set[int]]]:
    """Neighbour sets of every relation, straight from the raw edge files."""
    raw = MAG240MRaw(synthetic_mag)
    result = []
    for relation in RELATIONS:
        edges = np.asarray(raw.edge_index(relation.raw))
        src, dst = (edges[1], edges[0]) if relation.transposed else (edges[0], edges[1])
        table: dict[int, set[int]] = {}
        for s, d in zip(src.tolist(), dst.tolist()):
            table.setdefault(s, set()).add(d)
        result.append(table)
    return result


def _degree(neighbours, node_type: int, node: int) -> int:
    return sum(len(neighbours[r.id].get(node, ())) for r in RELATIONS if r.source == node_type)


def test_sample_without_replacement_is_distinct_and_uniform() -> None:
    rng = np.random.default_rng(0)
    draws = sample_without_replacement(rng, np.array([5, 9, 3] * 4000), 3)
    assert ((draws >= 0) & (draws < np.array([5, 9, 3] * 4000)[:, None])).all()
    assert all(len(set(row)) == 3 for row in draws.tolist())
    counts = np.bincount(draws[0::3].ravel(), minlength=5) / 4000  # each of 5 values: probability 3/5
    np.testing.assert_allclose(counts, 0.6, atol=0.04)


def test_subgraphs_respect_fanouts_and_contain_real_edges(graph, neighbours, synthetic_mag) -> None:
    targets = MAG240MRaw(synthetic_mag).splits()["train"][:64]
    sample = NeighbourSampler(graph, FANOUTS).sample(targets, np.random.default_rng(0))
    np.testing.assert_array_equal(sample.node_id[:64], targets)  # targets first, as papers
    assert (sample.node_type[:64] == NodeType.PAPER).all() and (sample.node_graph[:64] == np.arange(64)).all()
    hop = np.full(len(sample.node_id), -1)
    hop[:64] = 0
    for parent, child, relation in zip(sample.edge_parent, sample.edge_child, sample.edge_relation):
        rel = RELATIONS[relation]
        assert sample.node_graph[parent] == sample.node_graph[child]
        assert sample.node_type[parent] == rel.source and sample.node_type[child] == rel.target
        assert sample.node_id[child] in neighbours[relation][int(sample.node_id[parent])]
        if hop[child] < 0:
            hop[child] = hop[parent] + 1
    assert (hop >= 0).all() and hop.max() <= len(FANOUTS)
    # every node first reached at hop h < len(FANOUTS) drew exactly min(degree, fanout) distinct neighbours
    drawn = np.bincount(sample.edge_parent, minlength=len(hop))
    for node in range(len(hop)):
        if hop[node] < len(FANOUTS):
            expected = min(_degree(neighbours, sample.node_type[node], int(sample.node_id[node])), FANOUTS[hop[node]])
            assert drawn[node] == expected
        else:
            assert drawn[node] == 0
    pairs = set(zip(sample.edge_parent.tolist(), sample.edge_child.tolist(), sample.edge_relation.tolist()))
    assert len(pairs) == len(sample.edge_parent)  # without replacement
    sizes = np.bincount(sample.node_graph)
    assert sizes.max() <= 1 + FANOUTS[0] + FANOUTS[0] * FANOUTS[1]
    keys = sample.node_graph * 10**9 + sample.node_type * 10**7 + sample.node_id
    assert len(np.unique(keys)) == len(keys)  # a node reached twice is one node


def test_batch_has_correct_types_features_spd_and_edges(graph, synthetic_mag) -> None:
    targets = MAG240MRaw(synthetic_mag).splits()["valid"][:24]
    sampler = NeighbourSampler(graph, FANOUTS)
    sample = sampler.sample(targets, np.random.default_rng(5))
    batch = sampler.batch(targets, np.random.default_rng(5)).pad()
    assert torch.equal(batch.index, torch.as_tensor(targets)) and (batch.target_node == 0).all()
    assert batch.x_continuous.dtype == torch.float16 and batch.x_continuous.shape[-1] == 768
    labels = np.asarray(graph.arrays["labels"])[targets]
    np.testing.assert_array_equal(batch.y[:, 0].numpy(), labels)
    relation_of = batch.edge_attr[:, 0].numpy()
    edge_dst = batch.edge_dst.numpy()
    for b in range(len(targets)):
        nodes = np.flatnonzero(sample.node_graph == b)  # flat ids in local order
        n = len(nodes)
        assert batch.node_mask[b].sum() == n
        np.testing.assert_array_equal(batch.x[b, :n, 0].numpy(), sample.node_type[nodes])
        for t in NodeType:
            local = np.flatnonzero(sample.node_type[nodes] == t)
            expected = graph.features(t)[sample.node_id[nodes[local]]]
            np.testing.assert_array_equal(batch.x_continuous[b, local].numpy(), expected)
        assert (batch.x_continuous[b, n:] == 0).all()
        # the expected subgraph: sampled edges in both directions, one per ordered pair
        local_of = {int(f): i for i, f in enumerate(nodes)}
        mine = np.flatnonzero(sample.node_graph[sample.edge_parent] == b)
        pairs = {}
        for e in mine:
            p, c = local_of[int(sample.edge_parent[e])], local_of[int(sample.edge_child[e])]
            r = int(sample.edge_relation[e])
            for key, rel in (((p, c), r), ((c, p), int(REVERSE[r]))):
                pairs[key] = min(pairs.get(key, rel), rel)
        edges = np.array(sorted(pairs), dtype=np.int64).T.reshape(2, -1)
        expected = graph_structure(n, edges)
        np.testing.assert_array_equal(batch.spd[b, :n, :n].numpy(), expected.spd)
        assert (batch.spd[b, n:] == UNREACHABLE_SPD).all()
        assert expected.spd.max() <= 2 * len(FANOUTS)  # everything within two hops of the target
        # first edges: the batch edge from i is an edge (i -> k) of the right relation, k one step closer
        first = batch.first_edge[b, :n, :n].numpy()
        for i, j in zip(*np.nonzero(first != NO_EDGE)):
            k = edge_dst[first[i, j]]
            assert (i, k) in pairs and relation_of[first[i, j]] == pairs[(i, k)]
            assert expected.spd[k, j] == expected.spd[i, j] - 1
        assert ((first == NO_EDGE) == ((expected.spd == 0) | (expected.spd == UNREACHABLE_SPD))).all()
        np.testing.assert_array_equal(batch.in_degree[b, :n].numpy(), expected.in_degree)


def test_isolated_paper_gives_a_valid_one_node_subgraph(graph, neighbours, synthetic_mag) -> None:
    lonely = next(p for p in range(graph.num_nodes[NodeType.PAPER]) if _degree(neighbours, NodeType.PAPER, p) == 0)
    sampler = NeighbourSampler(graph, [25, 15])
    alone = sampler.batch(np.array([lonely]), np.random.default_rng(0)).pad()
    assert alone.node_mask.shape == (1, 1) and alone.spd.tolist() == [[[0]]]
    assert alone.first_edge.tolist() == [[[NO_EDGE]]] and alone.edge_attr.shape == (0, 1)
    mixed = sampler.batch(
        np.array([lonely, MAG240MRaw(synthetic_mag).splits()["train"][0]]), np.random.default_rng(0)
    ).pad()
    assert mixed.node_mask[0].sum() == 1 and mixed.node_mask[1].sum() > 1
    model = Graphormer(
        GraphormerConfig(
            node_vocab=[3],
            edge_vocab=[6],
            num_outputs=8,
            continuous_node_dim=768,
            readout="target_node",
            num_layers=2,
            hidden_dim=16,
            ffn_dim=16,
            num_heads=4,
        )
    )
    model.eval()
    for batch in (alone, mixed):
        assert torch.isfinite(model(batch)).all()
    in_batch, single = model(mixed)[0].detach(), model(alone)[0].detach()
    torch.testing.assert_close(in_batch, single, **rounding_tolerance(in_batch, single))


def test_seeded_per_epoch_and_independent_of_workers(graph, synthetic_mag) -> None:
    targets = MAG240MRaw(synthetic_mag).splits()["train"][:16].tolist()
    collate = SubgraphCollator(graph, FANOUTS, seed=7)
    first, again = collate([(0, t) for t in targets]), collate([(0, t) for t in targets])
    other_epoch = collate([(1, t) for t in targets])
    other_seed = SubgraphCollator(graph, FANOUTS, seed=8)([(0, t) for t in targets])
    assert torch.equal(first.spd, again.spd) and torch.equal(first.x_continuous, again.x_continuous)
    assert first.spd.shape != other_epoch.spd.shape or not torch.equal(first.spd, other_epoch.spd)
    assert first.spd.shape != other_seed.spd.shape or not torch.equal(first.spd, other_seed.spd)
    items = [(0, t) for t in targets]
    loaders = [torch.utils.data.DataLoader(items, batch_size=4, collate_fn=collate, num_workers=w) for w in (0, 2)]
    for serial, parallel in zip(*loaders):  # workers map the files themselves; same batches
        assert torch.equal(serial.spd, parallel.spd) and torch.equal(serial.edge_dst, parallel.edge_dst)
        assert torch.equal(serial.x_continuous, parallel.x_continuous)


def _padded_as_before(graph: MAG240MGraph, sample: SampledSubgraphs, targets: np.ndarray) -> GraphBatch:
    """The padded batch as workers built it before the unpadded hand-over: the sampler's former
    padding code, with ``graph_structure`` graph by graph for SPD and first edges."""
    batch, sizes = len(targets), np.bincount(sample.node_graph, minlength=len(targets))
    n_max = int(sizes.max())
    local = np.zeros(len(sample.node_graph), dtype=np.int64)
    for b in range(batch):
        local[sample.node_graph == b] = np.arange(sizes[b])
    pairs: dict[tuple[int, int, int], int] = {}  # (graph, src, dst) -> lowest relation
    for parent, child, relation in zip(sample.edge_parent, sample.edge_child, sample.edge_relation):
        b, p, c = int(sample.node_graph[parent]), int(local[parent]), int(local[child])
        for key, rel in (((b, p, c), int(relation)), ((b, c, p), int(REVERSE[relation]))):
            pairs[key] = min(pairs.get(key, rel), rel)
    edges = sorted(pairs)
    edge_dtype = np.result_type(np.min_scalar_type(-max(len(edges), 1)), np.int16)
    spd = np.full((batch, n_max, n_max), UNREACHABLE_SPD, dtype=np.uint8)
    first_edge = np.full((batch, n_max, n_max), NO_EDGE, dtype=edge_dtype)
    degrees = np.zeros((2, batch, n_max), dtype=np.int64)
    x = np.zeros((batch, n_max, 1), dtype=np.int64)
    features = np.zeros((batch, n_max, 768), dtype=np.float16)
    offset = 0
    for b in range(batch):
        n, mine = sizes[b], np.array([e[1:] for e in edges if e[0] == b], dtype=np.int64).reshape(-1, 2).T
        structure = graph_structure(n, mine)
        spd[b, :n, :n] = structure.spd
        first_edge[b, :n, :n] = np.where(structure.first_edge >= 0, structure.first_edge + offset, NO_EDGE)
        degrees[:, b, :n] = structure.in_degree, structure.out_degree
        offset += mine.shape[1]
        nodes = np.flatnonzero(sample.node_graph == b)
        x[b, :n, 0] = sample.node_type[nodes]
        for t in NodeType:
            rows = np.flatnonzero(sample.node_type[nodes] == t)
            features[b, rows] = graph.features(t)[sample.node_id[nodes[rows]]]
    return GraphBatch(
        x=torch.from_numpy(x),
        x_continuous=torch.from_numpy(features),
        node_mask=torch.arange(n_max)[None] < torch.from_numpy(sizes)[:, None],
        in_degree=torch.from_numpy(degrees[0]),
        out_degree=torch.from_numpy(degrees[1]),
        spd=torch.from_numpy(spd),
        first_edge=torch.from_numpy(first_edge),
        edge_attr=torch.tensor([[pairs[e]] for e in edges], dtype=torch.long).reshape(-1, 1),
        edge_continuous=torch.zeros((len(edges), 0)),
        edge_dst=torch.tensor([e[2] for e in edges], dtype=torch.long),
        y=torch.from_numpy(graph.labels(targets).reshape(-1, 1)),
        index=torch.as_tensor(targets, dtype=torch.long),
        target_node=torch.zeros(batch, dtype=torch.long),
        molecule_features=torch.zeros((batch, 0)),
    )


@pytest.mark.parametrize("split, seed, fanouts", [("train", 0, FANOUTS), ("valid", 3, FANOUTS), ("train", 1, [6])])
def test_unpadded_batch_pads_to_the_former_padded_batch(graph, synthetic_mag, split, seed, fanouts) -> None:
    targets = MAG240MRaw(synthetic_mag).splits()[split][:20]
    sampler = NeighbourSampler(graph, fanouts)
    compact = sampler.batch(targets, np.random.default_rng(seed))
    sizes = compact.num_nodes.numpy()
    assert compact.x_continuous.shape == (sizes.sum(), 768) and compact.spd.shape == ((sizes * sizes).sum(),)
    padded = compact.pad()
    expected = _padded_as_before(graph, sampler.sample(targets, np.random.default_rng(seed)), targets)
    for field in dataclasses.fields(GraphBatch):  # same tensors bit for bit (NaN labels too), dtypes, shapes
        got, want = getattr(padded, field.name), getattr(expected, field.name)
        assert got.dtype == want.dtype and got.shape == want.shape, field.name
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), field.name


def _devices_of_operations(function: Callable[[], GraphBatch]) -> tuple[GraphBatch, set[torch.device]]:
    """Run ``function``, recording the device of every tensor its aten operations take or return."""
    devices: set[torch.device] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, op, types, args=(), kwargs=None):
            result = op(*args, **(kwargs or {}))
            for value in pytree.tree_leaves((args, kwargs, result)):
                if isinstance(value, torch.Tensor):
                    devices.add(value.device)
            return result

    with Record():
        return function(), devices


def test_padding_runs_on_the_batch_device(graph, synthetic_mag) -> None:
    # every tensor pad() makes must follow the batch: with the default device set to "meta", any
    # factory call that forgot device= would create a meta tensor and show up in the record
    targets = MAG240MRaw(synthetic_mag).splits()["train"][:8]
    compact = NeighbourSampler(graph, FANOUTS).batch(targets, np.random.default_rng(0))
    with torch.device("meta"):
        padded, devices = _devices_of_operations(compact.pad)
    assert devices == {torch.device("cpu")}
    assert {getattr(padded, f.name).device for f in dataclasses.fields(padded)} == devices


def _storage_spans(batch) -> list[tuple[int, int]]:
    """(start, end) addresses of the storages behind every tensor field of a batch."""
    spans = []
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes():
            storage = value.untyped_storage()
            spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return spans


def test_padded_batch_shares_no_memory_with_the_handed_over_one(graph, synthetic_mag) -> None:
    # the worker reuses the compact batch's memory once it is released, right after pad()
    targets = MAG240MRaw(synthetic_mag).splits()["train"][:8]
    compact = NeighbourSampler(graph, FANOUTS).batch(targets, np.random.default_rng(0))
    padded = compact.pad()
    for start, end in _storage_spans(padded):
        assert all(end <= s or start >= e for s, e in _storage_spans(compact))


def test_device_moves_keep_the_lease_on_the_host(graph, synthetic_mag) -> None:
    targets = MAG240MRaw(synthetic_mag).splits()["train"][:4]
    compact = NeighbourSampler(graph, FANOUTS).batch(targets, np.random.default_rng(0))
    compact.lease = torch.ones(1, dtype=torch.uint8)
    moved = compact.to("meta")
    assert moved.spd.device == torch.device("meta") and moved.lease is compact.lease
    moved.release()
    assert int(compact.lease) == 0


def test_batches_built_in_worker_slots_equal_batches_built_in_process(graph, synthetic_mag) -> None:
    # 12 batches through 3 slots (enough for the 2 prefetched batches and the one being padded):
    # slots are reused several times, and each batch is padded (copied onward) and released as
    # the datamodule does, while the worker builds the next ones
    items = [(0, t) for t in MAG240MRaw(synthetic_mag).splits()["train"][:48].tolist()]
    collate = SubgraphCollator(graph, FANOUTS, seed=3, slots=3)
    slots_used = set()
    loader = torch.utils.data.DataLoader(items, batch_size=4, collate_fn=collate, num_workers=1)
    for k, handed_over in enumerate(loader):
        assert handed_over.lease is not None and handed_over.x_continuous.is_shared()
        slots_used.add(handed_over.lease.storage_offset())
        padded = handed_over.pad()
        handed_over.release()
        expected = collate(items[4 * k : 4 * k + 4]).pad()
        for f in dataclasses.fields(GraphBatch):
            assert torch.equal(getattr(padded, f.name).view(torch.uint8), getattr(expected, f.name).view(torch.uint8))
    assert slots_used <= {0, 1, 2}
