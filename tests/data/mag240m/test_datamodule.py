"""MAG240MDataModule on the shared loader layer: global batches, contiguous evaluation shards, exact
resume, epochs and workers; links and checks."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.lsc_formats import MAG240M
from graphormer_urpe.data.mag240m.datamodule import (
    EvaluationTargets,
    MAG240MDataModule,
    TargetPapers,
    TrainingTargets,
)
from graphormer_urpe.data.mag240m.sampler import CompactGraphBatch
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.testing.mag240m_release import copy_release


def _positions(sampler) -> list[int]:
    return [position for _, position in sampler]


def test_training_shards_are_disjoint_padded_and_reshuffled_each_epoch() -> None:
    dataset = TargetPapers(np.arange(103) * 10)
    samplers = [TrainingTargets(dataset, 4, 4, rank, seed=3) for rank in range(4)]
    shards = [_positions(s) for s in samplers]
    assert len({len(shard) for shard in shards}) == 1  # equal lengths: DDP ranks stay in step
    assert set().union(*shards) == set(range(103))
    assert sum(len(s) for s in shards) - 103 < 4  # padding only
    for sampler in samplers:
        sampler.set_epoch(1)
    assert [_positions(s) for s in samplers] != shards
    assert {epoch for epoch, _ in samplers[0]} == {1}  # the epoch travels to the collator


@pytest.mark.parametrize("world", [2, 4])
def test_every_step_sees_the_same_target_papers_whatever_the_number_of_processes(world: int) -> None:
    """The shared global-batch order: step s of W processes trains on the targets of step s of one
    process (the last, short batch of 103 % 8 = 7 papers is padded to a multiple of W)."""
    dataset = TargetPapers(np.arange(103) * 10)

    def steps(world: int) -> list[list[tuple[int, int]]]:
        per_rank = []
        for rank in range(world):
            sampler = TrainingTargets(dataset, 8, world, rank, seed=3)
            sampler.set_epoch(2)
            items = [dataset[key] for key in sampler]
            per_rank.append([items[i : i + 8 // world] for i in range(0, len(items), 8 // world)])
        return [sum((r[s] for r in per_rank), []) for s in range(len(per_rank[0]))]

    single, multi = steps(1), steps(world)
    assert len(single) == len(multi) == 13
    assert multi[:-1] == single[:-1]
    assert multi[-1][: len(single[-1])] == single[-1] and {e for e, _ in sum(multi, [])} == {2}


def test_evaluation_shards_are_contiguous_and_cover_each_target_once_with_fixed_subgraphs() -> None:
    dataset = TargetPapers(np.arange(103))
    samplers = [EvaluationTargets(dataset, 4, rank) for rank in range(4)]
    for sampler in samplers:
        sampler.set_epoch(5)
    shards = [_positions(s) for s in samplers]
    assert sorted(sum(shards, [])) == list(range(103))
    assert sum(shards, []) == list(range(103))  # contiguous: rank after rank, in the split's order
    assert all({epoch for epoch, _ in s} == {0} for s in samplers)
    assert [len(s) for s in samplers] == [len(shard) for shard in shards]


def _all_batches(module: MAG240MDataModule, epochs: range) -> list[GraphBatch]:
    loader = module.train_dataloader()
    batches = []
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        batches += [module.on_after_batch_transfer(b, 0) for b in loader]
    return batches


def _same(a: GraphBatch, b: GraphBatch) -> bool:
    fields = ("x", "x_continuous", "node_mask", "spd", "first_edge", "edge_attr", "y", "index")
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in fields)


def test_training_batches_are_the_same_with_0_or_2_workers_and_new_each_epoch(synthetic_mag) -> None:
    modules = []
    for workers in (0, 2):
        module = MAG240MDataModule(
            root=str(synthetic_mag), batch_size=300, num_workers=workers, num_classes=8, fanouts=[3, 2], seed=4
        )
        module.setup()
        modules.append(module)
    serial, parallel = (_all_batches(m, range(2)) for m in modules)
    assert len(serial) == len(parallel) == 2 * -(-len(modules[0].splits["train"]) // 300)
    assert all(_same(a, b) for a, b in zip(serial, parallel))
    half = len(serial) // 2
    assert not torch.equal(serial[0].index, serial[half].index)  # a new order each epoch

    # the same targets in another epoch get other subgraphs
    def nodes_per_target(batches: list[GraphBatch]) -> dict[int, int]:
        return {int(p): int(n) for b in batches for p, n in zip(b.index, b.node_mask.sum(dim=1))}

    epoch0, epoch1 = nodes_per_target(serial[:half]), nodes_per_target(serial[half:])
    assert epoch0.keys() == epoch1.keys() and epoch0 != epoch1


@pytest.mark.parametrize("consumed", [0, 2, 4])  # of 5 batches (1,433 papers in batches of 300)
def test_training_loader_resumes_at_the_exact_next_batch_with_the_same_subgraphs(synthetic_mag, consumed: int) -> None:
    module = MAG240MDataModule(
        root=str(synthetic_mag), batch_size=300, num_workers=0, num_classes=8, fanouts=[3, 2], seed=4
    )
    module.setup()
    expected = _all_batches(module, range(2))
    per_epoch = len(expected) // 2
    original = module.train_dataloader()
    original.sampler.set_epoch(1)
    iterator = iter(original)
    for _ in range(consumed):
        next(iterator)
    state = original.state_dict()
    resumed = module.train_dataloader()
    resumed.load_state_dict(state)
    rest = [module.on_after_batch_transfer(b, 0) for b in resumed]
    assert len(rest) == per_epoch - consumed
    assert all(_same(a, b) for a, b in zip(rest, expected[per_epoch + consumed :]))


def test_setup_checks_the_class_count_and_the_spec(synthetic_mag) -> None:
    module = MAG240MDataModule(root=str(synthetic_mag), batch_size=8, num_workers=0, num_classes=153)
    assert module.spec == DataSpec(
        node_vocab=(3,),
        edge_vocab=(6,),
        num_targets=1,
        num_outputs=153,
        continuous_node_dim=768,
        target_level="target_node",
        target_kind="multiclass",
        submission=MAG240M,
    )
    assert module.spec.readout == "target_node"
    with pytest.raises(ValueError, match="--data.num_classes 8"):
        module.setup()
    module = MAG240MDataModule(root=str(synthetic_mag), batch_size=8, num_workers=0, num_classes=8, fanouts=[2])
    module.setup()
    compact = next(iter(module.train_dataloader()))  # workers hand over unpadded batches
    assert isinstance(compact, CompactGraphBatch)
    batch = module.on_after_batch_transfer(compact, 0)  # Lightning's hook after the move to the device
    assert isinstance(batch, GraphBatch) and torch.equal(batch.spd, compact.pad().spd)
    assert batch.num_graphs == 8 and batch.x.shape[-1] == 1
    assert set(module.describe()["splits"]) == {"train", "valid", "test-dev", "test-challenge"}
    module.predict_on("nonsense")
    with pytest.raises(ValueError, match="unknown split 'nonsense'"):
        module.predict_dataloader()


def test_invalid_training_labels_stop_before_training(synthetic_mag, tmp_path) -> None:
    raw = copy_release(synthetic_mag, tmp_path)
    shutil.copytree(synthetic_mag / "mag240m_kddcup2021/graphormer", raw.directory / "graphormer")
    path = raw.directory / "processed/paper/node_label.npy"
    labels = np.load(path)
    paper = int(raw.splits()["train"][3])
    labels[paper] = 11.0  # 8 classes
    np.save(path, labels)
    module = MAG240MDataModule(root=str(tmp_path), batch_size=8, num_workers=0, num_classes=8)
    message = f"1 train papers have no valid label in 0..7 \\(first: paper {paper}, label 11.0"
    with pytest.raises(ValueError, match=message):
        module.setup()


def test_lightning_device_move_keeps_the_lease_and_the_hook_releases_the_workers_slot(synthetic_mag) -> None:
    from lightning_fabric.utilities.apply_func import move_data_to_device

    module = MAG240MDataModule(root=str(synthetic_mag), batch_size=8, num_workers=1, num_classes=8, fanouts=[2])
    module.setup()
    compact = next(iter(module.train_dataloader()))  # built in a worker's shared-memory slot
    assert compact.lease is not None and int(compact.lease) == 1
    moved = move_data_to_device(compact, torch.device("meta"))  # what the trainer does before the hook
    assert moved.spd.device == torch.device("meta") and moved.lease is compact.lease
    padded = module.on_after_batch_transfer(compact, 0)
    assert isinstance(padded, GraphBatch) and int(compact.lease) == 0  # the worker may reuse the slot


def test_handover_slots_reach_the_collator_and_must_not_be_negative(synthetic_mag) -> None:
    module = MAG240MDataModule(root=str(synthetic_mag), batch_size=8, num_workers=0, num_classes=8, handover_slots=0)
    module.setup()
    assert module.train_dataloader().collate_fn.slots is None and module.describe()["handover_slots"] == 0
    module = MAG240MDataModule(root=str(synthetic_mag), batch_size=8, num_workers=0, num_classes=8, handover_slots=2)
    module.setup()
    assert module.val_dataloader().collate_fn.slots.slots == 2
    with pytest.raises(ConfigError, match=r"data\.handover_slots=-1: must be an integer >= 0"):
        MAG240MDataModule(root=str(synthetic_mag), handover_slots=-1)


@pytest.mark.device
def test_batch_padded_on_the_device_holds_each_subgraphs_structure_and_equals_the_cpu_batch(
    synthetic_mag, device: torch.device
) -> None:
    """What ``on_after_batch_transfer`` builds on the device after Lightning's move, at the paper's fanouts."""
    module = MAG240MDataModule(
        root=str(synthetic_mag), batch_size=8, num_workers=0, num_classes=8, fanouts=[25, 15], handover_slots=0
    )
    module.setup()
    compact = next(iter(module.train_dataloader()))
    on_cpu = compact.pad()
    padded = module.on_after_batch_transfer(compact.to(device), 0)
    assert padded.spd.device == device
    for field in dataclasses.fields(GraphBatch):
        expected, got = getattr(on_cpu, field.name), getattr(padded, field.name)
        assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected), field.name
    # the reference: every subgraph's own SPD, first edges and degrees, from its edges alone
    sizes, out_degree = compact.num_nodes.numpy(), compact.out_degree.numpy().astype(np.int64)
    node_ptr = np.concatenate([[0], np.cumsum(sizes)])
    edge_ptr = np.concatenate([[0], np.cumsum(out_degree)])
    assert sizes.max() > 30  # two hops of [25, 15]: shortest paths of several edges
    for b, n in enumerate(sizes):
        src = np.repeat(np.arange(n), out_degree[node_ptr[b] : node_ptr[b + 1]])
        dst = compact.edge_dst.numpy()[edge_ptr[node_ptr[b]] : edge_ptr[node_ptr[b + 1]]]
        reference = graph_structure(int(n), np.stack([src, dst]))
        first = reference.first_edge.astype(np.int64)
        np.testing.assert_array_equal(padded.spd[b, :n, :n].cpu().numpy(), reference.spd)
        np.testing.assert_array_equal(
            padded.first_edge[b, :n, :n].cpu().numpy(), np.where(first >= 0, first + edge_ptr[node_ptr[b]], -1)
        )
        np.testing.assert_array_equal(padded.out_degree[b, :n].cpu().numpy(), reference.out_degree)
