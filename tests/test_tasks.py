"""The training step: what is logged, which parameters learn, dropout and precision settings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

import train
from graphormer_urpe.cli import GraphormerCLI
from graphormer_urpe.data.batch import GraphBatch, collate_graphs
from graphormer_urpe.data.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.tasks import GraphRegression
from tests.conftest import make_record, run_on_processes, tiny_run_args

SMALL = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)


def small_and_large(rng: np.random.Generator) -> GraphBatch:
    """A 1-node graph padded to 40 nodes next to a 40-node graph: almost every row is padding."""
    return collate_graphs([make_record(rng, 1, index=0), make_record(rng, 40, index=1)])


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_every_parameter_gets_a_gradient(rng: np.random.Generator, attention: str) -> None:
    """DDP with find_unused_parameters=False needs every parameter in every backward pass."""
    task = GraphRegression(dataclasses.replace(SMALL, attention=attention))
    for batch in (small_and_large(rng), collate_graphs([make_record(rng, 1), make_record(rng, 1)])):  # no edges
        task.zero_grad(set_to_none=True)
        task.log = lambda *args, **kwargs: None
        task.training_step(batch, 0).backward()
        unused = [name for name, p in task.named_parameters() if p.grad is None]
        assert unused == []
        assert all(torch.isfinite(p.grad).all() for p in task.parameters())


def ddp_training_steps(rank: int, world: int, attention: str) -> None:
    """Three optimiser steps of a DDP-wrapped task, each process on different graphs."""
    torch.manual_seed(0)
    task = GraphRegression(dataclasses.replace(SMALL, attention=attention))
    task.log = lambda *args, **kwargs: None
    model = DistributedDataParallel(task, find_unused_parameters=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(rank)
    for step in range(3):
        sizes = [1, 40] if step == 0 else rng.integers(1, 12, 3)
        batch = collate_graphs([make_record(rng, int(n)) for n in sizes])
        model(batch).sum().backward()  # raises at the next step if a parameter got no gradient
        optimizer.step()
        optimizer.zero_grad()
    reference = [p.detach().clone() for p in task.parameters()]
    gathered = [[torch.empty_like(p) for p in reference] for _ in range(world)]
    for i, p in enumerate(reference):
        torch.distributed.all_gather([g[i] for g in gathered], p)
    assert all(torch.equal(a, b) for a, b in zip(gathered[0], gathered[1]))  # replicas stayed in sync


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_both_attention_kinds_train_under_ddp_without_unused_parameters(attention: str) -> None:
    run_on_processes(ddp_training_steps, 2, attention)


def test_metrics_are_logged_per_graph_not_per_node(rng: np.random.Generator) -> None:
    task = GraphRegression(SMALL)
    logged = {}
    task.log = lambda name, value, **kwargs: logged.update({name: kwargs["batch_size"]})
    batch = small_and_large(rng)  # 2 graphs, 41 nodes
    task.training_step(batch, 0)
    task._evaluate(batch, task.val_mae, "val/mae")
    assert logged == {"train/loss": 2, "val/mae": 2}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_keeps_loss_and_gradients_finite(rng: np.random.Generator, dtype: torch.dtype) -> None:
    task = GraphRegression(dataclasses.replace(SMALL, num_layers=4))
    batch = small_and_large(rng)
    task.log = lambda *args, **kwargs: None
    full = task.training_step(batch, 0)
    with torch.autocast("cpu", dtype=dtype):
        attn_bias, attn_scale = task.model.attention_inputs(batch)
        prediction = task.model(batch)
        loss = task.training_step(batch, 0)
    loss.backward()
    assert attn_bias.dtype == attn_scale.dtype == prediction.dtype == loss.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(prediction).all()
    assert all(torch.isfinite(p.grad).all() for p in task.parameters())
    assert loss.item() == pytest.approx(full.item(), rel=0.05)


DROPOUT_PLACES = {
    "input_dropout": lambda m: [m.input_dropout.p],
    "attention_dropout": lambda m: [layer.attention.attention_dropout.p for layer in m.layers],
    "dropout": lambda m: [layer.dropout.p for layer in m.layers],
    "activation_dropout": lambda m: [layer.ffn[2].p for layer in m.layers],
    "drop_path": lambda m: [layer.drop_path for layer in m.layers],
}


@pytest.mark.parametrize("place", sorted(DROPOUT_PLACES))
def test_each_dropout_place_is_configurable_and_acts_in_training_only(
        qm9_root: Path, tmp_path: Path, rng: np.random.Generator, place: str) -> None:
    cli = GraphormerCLI(tiny_run_args(qm9_root, tmp_path, "--model.encoder.dropout", "0",
                                      "--model.encoder.attention_dropout", "0", f"--model.encoder.{place}", "0.4"))
    model = cli.model.model
    expected = [0.0, 0.4] if place == "drop_path" else [0.4] * len(DROPOUT_PLACES[place](model))  # 0 -> rate
    assert DROPOUT_PLACES[place](model) == pytest.approx(expected)
    for other in set(DROPOUT_PLACES) - {place}:
        assert not any(DROPOUT_PLACES[other](model)), other
    batch = collate_graphs([make_record(rng, n, index=n, node_vocab=ATOM_VOCAB, edge_vocab=BOND_VOCAB)
                            for n in (3, 7, 12, 5)])
    model.eval()
    reference = model(batch)
    assert torch.equal(model(batch), reference)
    model.train()
    torch.manual_seed(0)
    assert not torch.equal(model(batch), reference)


def test_accumulation_and_clipping_reach_the_trainer(qm9_root: Path, tmp_path: Path) -> None:
    cli = GraphormerCLI(tiny_run_args(qm9_root, tmp_path, "--trainer.accumulate_grad_batches", "4",
                                      "--trainer.gradient_clip_val", "0.5"))
    assert cli.trainer.accumulate_grad_batches == 4
    assert cli.trainer.gradient_clip_val == 0.5


def test_bf16_mixed_training_runs_on_cpu(qm9_root: Path, tmp_path: Path) -> None:
    metrics = train.main(tiny_run_args(qm9_root, tmp_path, "--trainer.precision", "bf16-mixed",
                                       "--trainer.accelerator", "cpu", "--run_name", "bf16"))
    assert metrics["global_step"] == 6
    assert np.isfinite(metrics["validation"]["val/mae"]) and np.isfinite(metrics["test"]["test/mae"])
    assert json.loads((tmp_path / "bf16" / "run.json").read_text())["precision"] == "bf16-mixed"
