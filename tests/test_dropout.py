"""The CPU-friendly dropout: drop rate, exact unbiasedness, identity in eval, gradients, seeding."""

from __future__ import annotations

import pytest
import torch

from graphormer_urpe.model.dropout import Dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_drop_rate_and_scale(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(1000, 1000)
    out = Dropout(p).train()(x)
    kept = out != 0
    levels = round(p * 65536)
    assert abs(1 - kept.float().mean().item() - p) < 3e-3  # 1e6 draws: std 5e-4
    assert torch.all(out[kept] == 65536 / (65536 - levels))  # inverted scaling by the exact P(keep)


def test_identity_when_evaluating_or_p_zero() -> None:
    x = torch.randn(7, 5)
    assert Dropout(0.3).eval()(x) is x and Dropout(0.0).train()(x) is x


def test_gradient_is_the_same_mask() -> None:
    torch.manual_seed(1)
    x = torch.randn(64, 33, requires_grad=True)
    out = Dropout(0.2).train()(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, out.detach() / x.detach())


def test_masks_follow_the_global_seed_and_odd_sizes_work() -> None:
    torch.manual_seed(5)
    a = Dropout(0.4).train()(torch.ones(3, 5, 7))
    torch.manual_seed(5)
    b = Dropout(0.4).train()(torch.ones(3, 5, 7))
    assert torch.equal(a, b) and a.shape == (3, 5, 7)


def test_rejects_impossible_probabilities() -> None:
    with pytest.raises(ValueError, match="not in"):
        Dropout(1.0)
