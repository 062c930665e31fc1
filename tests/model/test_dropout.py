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


def test_keep_mask_is_the_mask_forward_applies() -> None:
    x = torch.randn(5, 9, 11)
    dropout = Dropout(0.25).train()
    torch.manual_seed(3)
    keep = dropout.keep_mask(x)
    torch.manual_seed(3)
    assert torch.equal(dropout(x), x * keep)
    assert torch.equal(keep.unique(), torch.tensor([0.0, 65536 / (65536 - round(0.25 * 65536))]))
    assert Dropout(0.25).eval().keep_mask(x) is None and Dropout(0.0).train().keep_mask(x) is None


@pytest.mark.device
def test_keep_mask_on_any_device_drops_at_the_rate_and_keeps_the_mean(device: torch.device) -> None:
    torch.manual_seed(0)
    keep = Dropout(0.2).train().keep_mask(torch.ones(1000, 1000, device=device))
    assert keep.device.type == device.type and keep.dtype == torch.float32
    assert abs((keep == 0).float().mean().item() - 0.2) < 3e-3
    assert abs(keep.mean().item() - 1.0) < 5e-3


def test_rejects_impossible_probabilities() -> None:
    with pytest.raises(ValueError, match="not in"):
        Dropout(1.0)
