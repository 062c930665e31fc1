"""Peak tensor memory of a training step: the tracker on hand-counted allocations, fake equals real."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.run.memory import PeakMemory, TrainingStep, estimate_step_memory
from tests.conftest import make_record


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


@pytest.mark.parametrize("precision", ["32", "16-mixed", "bf16-mixed"])
def test_estimate_on_fake_tensors_equals_the_count_on_real_tensors(rng: np.random.Generator, precision: str) -> None:
    batch = collate_graphs([make_record(rng, n, i) for i, n in enumerate([5, 17, 9, 30])])
    torch.manual_seed(0)
    model = Graphormer(GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    estimate = estimate_step_memory(model, batch, precision)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the model is not trained

    real = PeakMemory()
    step = TrainingStep(model, precision, torch.device("cpu"))
    real.track(dict(model.named_parameters()), dict(model.named_buffers()), batch.__dict__)
    with real:
        step(batch)
        persistent = real.current
        real.reset_peak()
        step(batch)
    assert (estimate.peak, estimate.persistent) == (real.peak, persistent)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert persistent >= 3 * params  # weights plus AdamW's two moments
    assert estimate.peak > persistent + params  # activations and gradients on top
