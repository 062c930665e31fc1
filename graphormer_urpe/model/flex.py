"""URPE attention fused by FlexAttention (``torch.nn.attention.flex_attention``): the attention kernel ``flex``.

FlexAttention computes ``softmax(S + b) V`` in one kernel without storing the (B, H, T, T) probabilities, with any
additive ``score_mod`` b. URPE's multiplicative ``M = C * keep`` (C the scale, keep dropout's multiplier) is not
additive; it is, as a logarithm, where M is positive. With ``s = 2 max(0, -min M)``, ``W = M + s`` is positive
wherever M is, and with ``S' = S + b`` (S the scaled logits, b the bias with its -inf masks):

    softmax(S') M V = softmax(S') W V - s softmax(S') V
                    = exp(lse(S' + log W) - lse(S')) O(S' + log W)  -  s O(S')

where ``O(X) = softmax(X) V`` and ``lse(X)`` is the row's log-sum-exp, both what FlexAttention returns. Two passes,
exact for signed C (``s`` cancels; it is 0, and its pass's output unused, unless some M is negative). An entry with
W = 0 is dropped by ``log W = -inf`` (a dropped key, a padding pair, an entry of C exactly 0 when no M is
negative): its value is right, its gradient to C is 0 (eager's is 0 too for the first two). ``s`` carries no
gradient: the result does not depend on it.

RPE without dropout is one pass. Head sizes below 16 are zero-padded to 16 (FlexAttention's smallest; the logits
keep the true head size's scale). On CUDA the kernel is ``torch.compile(flex_attention)``, or Inductor's own
lowering inside a compiled step; elsewhere torch's unfused reference runs (forward only: torch has no CPU backward),
which is what the tests compare on a CPU. Whether it is faster than the eager kernel is measured by
``bench/speed/train_throughput.py --kernels eager flex`` (docs/throughput.md, "A fused attention: FlexAttention").

Shape letters: B batch, T tokens, H heads, D head dim.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import AuxRequest, flex_attention

#: FlexAttention's smallest head size.
MIN_HEAD_DIM = 16


@functools.cache
def _compiled_flex_attention() -> Callable:
    """FlexAttention compiled once per process (its fused Triton kernels on CUDA); torch's default dynamic-shape rule,
    so that an eager step's many batch shapes share a few compilations."""
    return torch.compile(flex_attention)


def _flex(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score_bias: torch.Tensor, softmax_scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``O = softmax(softmax_scale Q K^T + score_bias) V`` and the rows' log-sum-exps.

    Shapes: query, key, value: (B, H, T, D'); score_bias: (B, H, T, T) float -> O (B, H, T, D'), lse (B, H, T)
    (float32; float64 for float64 inputs)."""

    def add_bias(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> torch.Tensor:
        return score + score_bias[b, h, q, k]

    # Inside a compiled step Inductor lowers flex_attention itself; called eagerly on CUDA, its compiled form runs.
    # Elsewhere torch's unfused reference runs (and warns once that it is unfused).
    fused = query.is_cuda and not torch.compiler.is_compiling()
    attend = _compiled_flex_attention() if fused else flex_attention
    out, aux = attend(query, key, value, score_mod=add_bias, scale=softmax_scale, return_aux=AuxRequest(lse=True))
    return out, aux.lse


def flex_relative_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor,
    multiplier: torch.Tensor | None,
) -> torch.Tensor:
    """``softmax(Q K^T / sqrt(D) + attn_bias) [* multiplier] V`` by FlexAttention (module docstring).

    Shapes: query, key, value: (B, H, T, D); attn_bias: (B, H, T, T) float with -inf masks (each row one visible
    key); multiplier: (B, H, T, T) (URPE's C times dropout's keep), or None -> (B, H, T, D) in value's dtype."""
    head_dim = query.shape[-1]
    softmax_scale = head_dim**-0.5
    if head_dim < MIN_HEAD_DIM:  # zeros add nothing to Q K^T, and give output columns that are cut off below
        padding = (0, MIN_HEAD_DIM - head_dim)
        query, key, value = F.pad(query, padding), F.pad(key, padding), F.pad(value, padding)
    if multiplier is None:
        out, _ = _flex(query, key, value, attn_bias, softmax_scale)
        return out[..., :head_dim]
    compute_dtype = torch.promote_types(value.dtype, torch.float32)  # float32 under mixed precision; float64 stays
    multiplier = multiplier.to(compute_dtype)
    shift = 2.0 * (-multiplier.min()).clamp(min=0.0).detach()  # s: 0 unless some M is negative
    shifted = multiplier + shift  # W >= 0, positive wherever M is
    positive = shifted > 0
    # log W, -inf where W = 0; log reads 1 there so that its gradient (1/W) is never formed at 0
    log_shifted = torch.where(positive, torch.log(torch.where(positive, shifted, 1.0)), float("-inf"))
    out_shifted, lse_shifted = _flex(query, key, value, attn_bias + log_shifted, softmax_scale)
    out_plain, lse_plain = _flex(query, key, value, attn_bias, softmax_scale)
    # exp(lse(S' + log W) - lse(S')): the row's mean of W under softmax(S'); 0 for a row with no positive W
    ratio = torch.exp(lse_shifted - lse_plain).unsqueeze(-1)  # (B, H, T, 1)
    out = ratio * out_shifted.to(compute_dtype) - shift * out_plain.to(compute_dtype)  # (B, H, T, D')
    return out[..., :head_dim].to(value.dtype)
