"""The one attention module: RPE/URPE equivalence, row sums, masks, NaN safety."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from graphormer_urpe.constants import PAD_RELATION
from graphormer_urpe.model.attention import (
    MultiHeadAttention,
    RelativeBias,
    RelativeScale,
    lookup_by_relation,
    scale_and_drop,
)
from graphormer_urpe.testing.tolerance import rounding_tolerance

B, T, H, D = 3, 6, 4, 8


def masked(bias: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """Fold a (B, T, T) visibility mask into a (B, H, T, T) bias as -inf, contiguous."""
    return bias.masked_fill(~key_mask.unsqueeze(1), float("-inf")).contiguous()


def inputs(seed: int = 0, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, H * D, generator=g)
    relation = torch.randint(1, 5, (B, T, T), generator=g)
    key_mask = torch.ones(B, T, T, dtype=torch.bool)
    key_mask[1, :, 4:] = False  # graph 1 has 4 real tokens
    relation[1, :, 4:] = PAD_RELATION
    relation[1, 4:, :] = PAD_RELATION
    return x.to(device), relation.to(device), key_mask.to(device)


@pytest.mark.device
def test_urpe_with_ones_equals_rpe_exactly(device: torch.device) -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(H * D, H).eval().to(device)
    bias, scale = RelativeBias(5, H).to(device), RelativeScale(5, H).to(device)
    x, relation, key_mask = inputs(device=device)
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


@pytest.mark.device
def test_relation_lookup_equals_a_padded_embedding_in_value_and_gradient(device: torch.device) -> None:
    """The gather reads what ``F.embedding(..., padding_idx)`` reads, head-major, and its gradient is
    the embedding's: per (relation, head) the sum of the pairs' gradients, none for the padding row."""
    g = torch.Generator().manual_seed(1)
    table = torch.randn(7, H, generator=g, dtype=torch.float64)
    table[PAD_RELATION] = 0.0
    relation = torch.randint(0, 7, (B, T, T), generator=g)
    relation[0, 0, 0] = PAD_RELATION
    upstream = torch.randn(B, H, T, T, generator=g, dtype=torch.float64)
    ours, reference = (table.clone().to(device).requires_grad_() for _ in range(2))
    looked_up = lookup_by_relation(ours, relation.to(device))
    expected = F.embedding(relation.to(device), reference, padding_idx=PAD_RELATION).permute(0, 3, 1, 2)
    assert looked_up.is_contiguous() and looked_up.shape == (B, H, T, T)
    assert torch.equal(looked_up, expected)
    (looked_up * upstream.to(device)).sum().backward()
    (expected * upstream.to(device)).sum().backward()
    torch.testing.assert_close(ours.grad, reference.grad)
    assert (ours.grad[PAD_RELATION] == 0).all() and (ours.grad[1:] != 0).any()
    by_hand = torch.zeros(7, H, dtype=torch.float64)
    for b, i, j in torch.cartesian_prod(torch.arange(B), torch.arange(T), torch.arange(T)).tolist():
        if relation[b, i, j] != PAD_RELATION:
            by_hand[relation[b, i, j]] += upstream[b, :, i, j]
    torch.testing.assert_close(ours.grad.cpu(), by_hand)


def test_relation_lookup_reads_the_padding_row_as_zero_whatever_it_holds() -> None:
    table = torch.ones(3, H)
    relation = torch.full((1, 2, 2), PAD_RELATION)
    assert (lookup_by_relation(table, relation) == 0).all()


@pytest.mark.parametrize("dropout", [False, True])
@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
def test_scale_and_drop_equals_the_written_out_product(dropout: bool, needs: tuple[bool, bool]) -> None:
    """Bit for bit the values and gradients of ``(A * C) * keep`` as autograd computes them."""
    g = torch.Generator().manual_seed(2)
    a, c, upstream = (torch.rand(B, H, T, T, generator=g) for _ in range(3))
    keep = torch.where(torch.rand(B, H, T, T, generator=g) < 0.3, 0.0, 1 / 0.7) if dropout else None
    fused = [a.clone().requires_grad_(needs[0]), c.clone().requires_grad_(needs[1])]
    plain = [a.clone().requires_grad_(needs[0]), c.clone().requires_grad_(needs[1])]
    out = scale_and_drop(*fused, keep)
    expected = plain[0] * plain[1] if keep is None else plain[0] * plain[1] * keep
    assert torch.equal(out, expected)
    out.backward(upstream)
    expected.backward(upstream)
    for ours, theirs, needed in zip(fused, plain, needs):
        assert (ours.grad is None) == (not needed)
        if needed:
            assert torch.equal(ours.grad, theirs.grad)


def test_scale_and_drop_passes_gradcheck() -> None:
    g = torch.Generator().manual_seed(3)
    a, c = (torch.rand(2, 2, 3, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    keep = torch.where(torch.rand(2, 2, 3, 3, generator=g) < 0.3, 0.0, 2.0).double()
    assert torch.autograd.gradcheck(lambda a, c: scale_and_drop(a, c, keep), (a, c))
    assert torch.autograd.gradcheck(lambda a, c: scale_and_drop(a, c, None), (a, c))


def test_urpe_training_step_drops_the_scaled_weights_with_the_dropout_mask() -> None:
    """In training, URPE attends with (A * C) * keep, keep being exactly the module's dropout mask."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(H * D, H, attention_dropout=0.3).train()
    x, relation, key_mask = inputs()
    bias, scale = masked(torch.randn(B, H, T, T), key_mask), RelativeScale(5, H)(relation) * 1.5
    probabilities, v = attention.attention_weights(x, bias, None)
    torch.manual_seed(7)
    keep = attention.attention_dropout.keep_mask(probabilities)
    mixed = (probabilities * scale * keep) @ v  # (B, H, T, D)
    expected = attention.out(mixed.transpose(1, 2).reshape(B, T, H * D))
    torch.manual_seed(7)
    assert torch.equal(attention(x, bias, scale), expected)
    assert (keep == 0).any() and (keep != 0).any()


def test_reset_to_ones() -> None:
    scale = RelativeScale(5, H)
    with torch.no_grad():
        scale.weight.mul_(3.0)
    scale.reset_to_ones()
    assert (scale.weight[1:] == 1).all() and (scale.weight[PAD_RELATION] == 0).all()


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_runs_in_float32_without_nan_under_half_precision(device: torch.device, dtype: torch.dtype) -> None:
    attention = MultiHeadAttention(H * D, H).to(device)
    x, relation, key_mask = inputs(device=device)
    with torch.autocast(device.type, dtype=dtype):
        bias = masked(RelativeBias(5, H).to(device)(relation), key_mask)
        weights, _ = attention.attention_weights(x, bias, None)
        out = attention(x, bias, None)
    assert weights.dtype == torch.float32 and out.dtype == dtype and torch.isfinite(out).all()


def test_heads_must_divide_width() -> None:
    with pytest.raises(ValueError, match="num_heads=32"):
        MultiHeadAttention(80, 32)


def test_urpe_equals_the_formula_written_out_by_hand() -> None:
    """out_i = W_o concat_h( sum_j softmax_j(q_i.k_j / sqrt(D) + B[r_ij, h]) * C[r_ij, h] * v_j ) + b_o,
    loop by loop in float64 on a 3-token, 2-head case (a wrong scale, head split or order fails)."""
    torch.manual_seed(3)
    heads, head_dim, tokens = 2, 3, 3
    attention = MultiHeadAttention(heads * head_dim, heads).double().eval()
    bias_table = torch.randn(4, heads, dtype=torch.float64)
    scale_table = torch.rand(4, heads, dtype=torch.float64) + 0.5
    relation = torch.tensor([[1, 2, 3], [2, 1, 2], [3, 2, 1]])  # (T, T)
    x = torch.randn(tokens, heads * head_dim, dtype=torch.float64)

    w, b = attention.qkv.weight, attention.qkv.bias  # rows: q (all heads), k, v
    width = heads * head_dim
    expected_heads = []
    for h in range(heads):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        q = [x[i] @ w[:width][cols].T + b[:width][cols] for i in range(tokens)]
        k = [x[j] @ w[width : 2 * width][cols].T + b[width : 2 * width][cols] for j in range(tokens)]
        v = [x[j] @ w[2 * width :][cols].T + b[2 * width :][cols] for j in range(tokens)]
        rows = []
        for i in range(tokens):
            logits = [
                float(q[i] @ k[j]) / math.sqrt(head_dim) + float(bias_table[relation[i, j], h]) for j in range(tokens)
            ]
            top = max(logits)
            exp = [math.exp(value - top) for value in logits]
            weights = [e / sum(exp) * float(scale_table[relation[i, j], h]) for j, e in enumerate(exp)]
            rows.append(sum(weight * v[j] for j, weight in enumerate(weights)))
        expected_heads.append(torch.stack(rows))  # (T, D)
    expected = torch.cat(expected_heads, dim=-1) @ attention.out.weight.T + attention.out.bias  # (T, H*D)

    attn_bias = bias_table[relation].permute(2, 0, 1).unsqueeze(0).contiguous()  # (1, H, T, T)
    attn_scale = scale_table[relation].permute(2, 0, 1).unsqueeze(0).contiguous()
    out = attention(x.unsqueeze(0), attn_bias, attn_scale)[0]
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_rpe_equals_torch_scaled_dot_product_attention() -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(H * D, H).eval()
    x, relation, key_mask = inputs()
    bias = masked(RelativeBias(5, H)(relation), key_mask)
    q, k, v = attention.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # each (B, H, T, D)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, T, D)
    expected = attention.out(reference.transpose(1, 2).reshape(B, T, H * D))
    out = attention(x, bias, None)
    torch.testing.assert_close(out, expected, **rounding_tolerance(out, expected))  # SDPA sums in its own order


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_autocast_stays_close_to_float32(device: torch.device, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(H * D, H).to(device)
    x, relation, key_mask = inputs(device=device)
    bias = masked(RelativeBias(5, H).to(device)(relation), key_mask)
    scale = RelativeScale(5, H).to(device)
    with torch.no_grad():
        scale.weight[1:] = torch.rand(4, H) + 0.5
    reference = attention(x, bias, scale(relation).contiguous())
    with torch.autocast(device.type, dtype=dtype):
        mixed = attention(x, bias, scale(relation).contiguous())
    relative_error = (mixed.float() - reference).norm() / reference.norm()
    assert relative_error < 2e-2
