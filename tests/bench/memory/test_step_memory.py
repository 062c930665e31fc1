"""Peak tensor memory of a task's training step: the tracker on hand-counted allocations, the step is
Lightning's step of the task, and fake equals real."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from bench.memory.step_memory import PeakMemory, TrainingStep, estimate_step_memory
from graphormer_urpe.data.batch import GraphBatch, collate_graphs
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.tasks import Classification, GraphormerTask, GraphRegression, OptimConfig
from graphormer_urpe.testing.graphs import make_record

SMALL = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)


def test_peak_counts_live_storages_once_until_freed() -> None:
    tracker = PeakMemory()
    existing = torch.zeros(250)  # 1,000 bytes made before the context
    tracker.track(existing, [existing[:10]])  # a view: the same storage, counted once
    with tracker:
        a = torch.ones(1000)  # 4,000 bytes
        b = a[::2].clone()  # 2,000
        view = a.view(10, 100)  # no new storage
        a.add_(1.0)  # in place: no new storage
        del a, view  # 4,000 freed
        c = torch.ones(2000, dtype=torch.float64)  # 16,000
    assert tracker.peak == 1000 + 2000 + 16000  # > 1000 + 4000 + 2000 before the free
    assert tracker.current == 1000 + 2000 + 16000
    del b, c
    assert tracker.current == 1000


def task_and_batch(rng: np.random.Generator, kind: str) -> tuple[GraphormerTask, GraphBatch]:
    """A small regression or 3-class task and a batch of four graphs whose targets are all known."""
    batch = collate_graphs([make_record(rng, n, i) for i, n in enumerate([5, 17, 9, 30])])
    torch.manual_seed(0)
    if kind == "regression":
        return GraphRegression(GraphormerConfig(**SMALL), OptimConfig(lr=1e-3, warmup_steps=0)), batch
    batch.y = torch.tensor([[0.0], [2.0], [1.0], [2.0]])
    task = Classification(
        GraphormerConfig(num_outputs=3, **SMALL), OptimConfig(lr=1e-3, warmup_steps=0), target_kind="multiclass"
    )
    return task, batch


@pytest.mark.parametrize("kind", ["regression", "multiclass"])
def test_the_step_is_the_update_lightning_makes_with_the_tasks_loss_and_optimiser(
    rng: np.random.Generator, kind: str
) -> None:
    task, batch = task_and_batch(rng, kind)
    fitted, initial = copy.deepcopy(task), copy.deepcopy(task.state_dict())
    step = TrainingStep(task, "32", torch.device("cpu"), gradient_clip=1.0)
    assert type(step.optimizer) is torch.optim.AdamW and step.optimizer.defaults["eps"] == task.optim.adam_eps
    step(batch)
    trainer = pl.Trainer(
        max_steps=1,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(fitted, train_dataloaders=torch.utils.data.DataLoader([batch], batch_size=None))
    state, expected = task.state_dict(), fitted.state_dict()
    assert not torch.equal(state["model.head.weight"], initial["model.head.weight"])  # the step trained
    assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in expected)


@pytest.mark.parametrize(
    ("precision", "kind"),
    [
        ("32", "regression"),  # the quick loop's case; the others with the slow tests
        *[
            pytest.param(precision, kind, marks=pytest.mark.slow)
            for precision in ("32", "16-mixed", "bf16-mixed")
            for kind in ("regression", "multiclass")
            if (precision, kind) != ("32", "regression")
        ],
    ],
)
def test_estimate_on_fake_tensors_equals_the_count_on_real_tensors(
    rng: np.random.Generator, precision: str, kind: str
) -> None:
    task, batch = task_and_batch(rng, kind)
    before = {k: v.clone() for k, v in task.state_dict().items()}
    estimate = estimate_step_memory(task, batch, precision)
    assert all(torch.equal(v, before[k]) for k, v in task.state_dict().items())  # the task is not trained

    real = PeakMemory()
    step = TrainingStep(task, precision, torch.device("cpu"))
    real.track(dict(task.named_parameters()), dict(task.named_buffers()), batch.__dict__)
    with real:
        step(batch)
        persistent = real.current
        real.reset_peak()
        step(batch)
    assert (estimate.peak, estimate.persistent) == (real.peak, persistent)
    params = sum(p.numel() * 4 for p in task.parameters())
    assert persistent >= 3 * params  # weights plus AdamW's two moments
    assert estimate.peak > persistent + params  # activations and gradients on top
