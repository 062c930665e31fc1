"""The one attention module: RPE/URPE equivalence, row sums, masks, NaN safety."""

from __future__ import annotations

import torch

from graphormer_urpe.constants import PAD_RELATION
from graphormer_urpe.model.attention import MultiHeadAttention, RelativeBias, RelativeScale

B, T, H, D = 3, 6, 4, 8


def masked(bias: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """Fold a (B, T, T) visibility mask into a (B, H, T, T) bias as -inf, contiguous."""
    return bias.masked_fill(~key_mask.unsqueeze(1), float("-inf")).contiguous()


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, H * D, generator=g)
    relation = torch.randint(1, 5, (B, T, T), generator=g)
    key_mask = torch.ones(B, T, T, dtype=torch.bool)
    key_mask[1, :, 4:] = False  # graph 1 has 4 real tokens
    relation[1, :, 4:] = PAD_RELATION
    relation[1, 4:, :] = PAD_RELATION
    return x, relation, key_mask


def test_urpe_with_ones_equals_rpe_exactly() -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(H * D, H).eval()
    bias, scale = RelativeBias(5, H), RelativeScale(5, H)
    x, relation, key_mask = inputs()
    rpe = attention(x, masked(bias(relation), key_mask), None)
    urpe = attention(x, masked(bias(relation), key_mask), scale(relation).contiguous())
    real = key_mask[:, 0, :]  # (B, T) real tokens; padding rows are never read
    assert torch.equal(rpe[real], urpe[real])


def test_rpe_rows_sum_to_one_and_urpe_rows_do_not() -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(H * D, H)
    bias, scale = RelativeBias(5, H), RelativeScale(5, H)
    with torch.no_grad():
        scale.weight[1:] = torch.rand(4, H) + 0.5
    x, relation, key_mask = inputs()
    rpe, _ = attention.attention_weights(x, masked(bias(relation), key_mask), None)
    urpe, _ = attention.attention_weights(x, masked(bias(relation), key_mask), scale(relation).contiguous())
    torch.testing.assert_close(rpe.sum(-1), torch.ones(B, H, T))
    assert (urpe.sum(-1) - 1).abs().max() > 1e-2


def test_padding_keys_get_zero_weight_and_zero_scale() -> None:
    scale = RelativeScale(5, H)
    x, relation, key_mask = inputs()
    assert (scale(relation)[1, :, :, 4:] == 0).all()
    weights, _ = MultiHeadAttention(H * D, H).attention_weights(
        x, masked(torch.zeros(B, H, T, T), key_mask), scale(relation).contiguous()
    )
    assert (weights[1, :, :, 4:] == 0).all()


def test_scale_padding_row_is_frozen_at_zero() -> None:
    scale = RelativeScale(5, H)
    x, relation, _ = inputs()
    scale(relation).sum().backward()
    assert scale.weight.grad[PAD_RELATION].abs().sum() == 0
    assert scale.weight[PAD_RELATION].abs().sum() == 0 and (scale.weight[1:] == 1).all()


def test_reset_to_ones() -> None:
    scale = RelativeScale(5, H)
    with torch.no_grad():
        scale.weight.mul_(3.0)
    scale.reset_to_ones()
    assert (scale.weight[1:] == 1).all() and (scale.weight[PAD_RELATION] == 0).all()


def test_softmax_runs_in_float32_without_nan_under_bf16() -> None:
    attention = MultiHeadAttention(H * D, H)
    x, relation, key_mask = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bias = masked(RelativeBias(5, H)(relation), key_mask)
        weights, _ = attention.attention_weights(x, bias, None)
        out = attention(x, bias, None)
    assert weights.dtype == torch.float32 and torch.isfinite(out).all()


def test_heads_must_divide_width() -> None:
    try:
        MultiHeadAttention(80, 32)
    except ValueError as error:
        assert "num_heads=32" in str(error)
    else:
        raise AssertionError("80 hidden with 32 heads must be rejected")
