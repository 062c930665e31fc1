"""Multi-head self-attention with relative positional encodings: RPE and URPE (Luo et al., 2022).

    A   = softmax(Q K^T / sqrt(D) + B) * C        (* is the elementwise product)
    out = A V

``B`` and ``C`` are looked up from integer *relation ids* (shortest-path distances, sequence offsets). RPE has no
``C``, so every row sums to one; URPE's ``C`` breaks that and makes the Transformer universal (paper, Theorem 3).

Shape letters: B batch, T tokens, H heads, D head dim, R relation ids.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

import torch
from torch import nn

from graphormer_urpe.constants import PAD_RELATION
from graphormer_urpe.errors import check_choice
from graphormer_urpe.model.dropout import Dropout
from graphormer_urpe.model.flex import flex_relative_attention

#: How :class:`MultiHeadAttention` computes ``softmax(...) [* C] V``: ``eager`` (the (B, H, T, T) matrices in memory,
#: the default) or ``flex`` (fused by FlexAttention, CUDA only: :mod:`graphormer_urpe.model.flex`).
AttentionKernel = Literal["eager", "flex"]
ATTENTION_KERNELS = ("eager", "flex")


class AttentionKind(str, Enum):
    """Which relative positional encoding the attention uses.

    Example:
        >>> AttentionKind("urpe") is AttentionKind.URPE, AttentionKind.RPE.value
        (True, 'rpe')
    """

    NONE = "none"  # no positional information (only for the synthetic sequence baselines)
    RPE = "rpe"  # additive bias B inside the softmax
    URPE = "urpe"  # B plus a multiplicative scale C after the softmax


def lookup_by_relation(table: torch.Tensor, relation: torch.Tensor) -> torch.Tensor:
    """Per-head table entry of every pair, head-major: ``out[b, h, i, j] = table[relation[b, i, j], h]``.

    Row :data:`PAD_RELATION` reads as zero, without gradient. One ``gather`` (``docs/throughput.md``); on CUDA its
    backward uses atomics, bitwise reproducible only with ``--trainer.deterministic true``.

    Shapes: table: (R, H) float; relation: (B, T, T) ids in [0, R) -> (B, H, T, T) float, contiguous."""
    batch, queries, keys = relation.shape
    num_relations, heads = table.shape
    table = table.clone()
    table[PAD_RELATION] = 0.0  # (R, H); the padding row's gradient stops here
    per_head = table.t().unsqueeze(0).expand(batch, heads, num_relations)  # (B, H, R)
    index = relation.reshape(batch, 1, queries * keys).expand(batch, heads, queries * keys)  # (B, H, T*T)
    return per_head.gather(2, index).view(batch, heads, queries, keys)


class RelativeBias(nn.Module):
    """The additive table B: one learned scalar per (relation id, head); row :data:`PAD_RELATION` stays zero."""

    def __init__(self, num_relations: int, num_heads: int) -> None:
        super().__init__()
        self.table = nn.Embedding(num_relations, num_heads, padding_idx=PAD_RELATION)

    def forward(self, relation: torch.Tensor) -> torch.Tensor:
        """Shapes: relation: (B, T, T) integer ids -> (B, H, T, T) float, contiguous."""
        return lookup_by_relation(self.table.weight, relation)


class RelativeScale(nn.Module):
    """The URPE table C: one learned scalar per (relation id, head), shared by all layers, initialised to ones (so
    URPE computes exactly what RPE computes until C is trained); row :data:`PAD_RELATION` is fixed at zero."""

    def __init__(self, num_relations: int, num_heads: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_relations, num_heads))
        self.reset_to_ones()

    def forward(self, relation: torch.Tensor) -> torch.Tensor:
        """Shapes: relation: (B, T, T) integer ids -> (B, H, T, T) float, contiguous."""
        return lookup_by_relation(self.weight, relation)

    @torch.no_grad()
    def reset_to_ones(self) -> None:
        """Set C back to ones (padding row zero): turns a trained RPE model into URPE exactly."""
        self.weight.fill_(1.0)
        self.weight[PAD_RELATION] = 0.0


class _ScaleAndDrop(torch.autograd.Function):
    """``A * C * keep`` in one buffer; see :func:`scale_and_drop`."""

    @staticmethod
    def forward(ctx, probabilities: torch.Tensor, scale: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        weights = probabilities * scale
        if keep is not None:
            weights.mul_(keep)
        ctx.save_for_backward(probabilities, scale, keep)
        return weights

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        probabilities, scale, keep = ctx.saved_tensors
        grad_scaled = grad if keep is None else grad * keep  # gradient of A * C
        grad_probabilities = grad_scaled * scale if ctx.needs_input_grad[0] else None
        grad_scale = None
        if ctx.needs_input_grad[1]:  # reuse the buffer of grad * keep (the incoming grad is not ours)
            grad_scale = grad_scaled * probabilities if keep is None else grad_scaled.mul_(probabilities)
        return grad_probabilities, grad_scale, None


def scale_and_drop(probabilities: torch.Tensor, scale: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """URPE's ``(A * C) * keep`` with three ``(B, H, T, T)`` buffers instead of five (``docs/throughput.md``).

    Shapes: A, C: (B, H, T, T); keep: (B, H, T, T) multiplier 0 or 1 / P(keep), or None -> (B, H, T, T)."""
    return _ScaleAndDrop.apply(probabilities, scale, keep)


class MultiHeadAttention(nn.Module):
    """Self-attention ``softmax(QK^T/sqrt(D) + bias) [* scale] V`` over padded token sets.

    Masks are ``-inf`` entries of the bias (each row needs one visible key); softmax and ``* C`` run in float32.

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> attention = MultiHeadAttention(hidden_dim=8, num_heads=2)
        >>> x, bias = torch.randn(1, 3, 8), torch.randn(1, 2, 3, 3)
        >>> torch.equal(attention(x, bias, torch.ones(1, 2, 3, 3)), attention(x, bias))  # URPE with C = 1 is RPE
        True
        >>> weights, _ = attention.attention_weights(x, bias, torch.full((1, 2, 3, 3), 2.0))  # C = 2 doubles rows
        >>> torch.allclose(weights.sum(-1), torch.full((1, 2, 3), 2.0))
        True
    """

    def __init__(self, hidden_dim: int, num_heads: int, attention_dropout: float = 0.0) -> None:
        super().__init__()
        if hidden_dim % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide hidden_dim={hidden_dim}")
        self.num_heads = num_heads
        self.head_dim = hidden_dim // num_heads
        self.qkv = nn.Linear(hidden_dim, 3 * hidden_dim)
        self.out = nn.Linear(hidden_dim, hidden_dim)
        self.attention_dropout = Dropout(attention_dropout)
        #: how this machine computes the attention (:data:`AttentionKernel`); not a weight, not saved
        self.kernel: AttentionKernel = "eager"

    def extra_repr(self) -> str:
        return f"kernel={self.kernel}"

    def queries_keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of every head. Shapes: x: (B, T, H*D) -> three (B, H, T, D) views."""
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).view(batch, tokens, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, D)
        return q, k, v

    def attention_weights(
        self, x: torch.Tensor, attn_bias: torch.Tensor | None, attn_scale: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention matrix A (before dropout) and the values V; the logits are one fused ``baddbmm``.

        Shapes: x: (B, T, H*D); attn_bias, attn_scale: (B, H, T, T) contiguous, or None
            -> A (B, H, T, T) float32 (float64 for a float64 model), V (B, H, T, D)."""
        batch, tokens, _ = x.shape
        q, k, v = self.queries_keys_values(x)
        q = q.reshape(batch * self.num_heads, tokens, self.head_dim)  # (B*H, T, D)
        k_t = k.reshape(batch * self.num_heads, tokens, self.head_dim).transpose(1, 2)  # (B*H, D, T)
        if attn_bias is None:
            logits = (q @ k_t) * self.head_dim**-0.5  # (B*H, T, T)
        else:
            bias = attn_bias.reshape(batch * self.num_heads, tokens, tokens)
            logits = torch.baddbmm(bias, q, k_t, alpha=self.head_dim**-0.5)  # (B*H, T, T)
        # at least float32 (half-precision logits under autocast), float64 stays float64
        softmax_dtype = torch.promote_types(logits.dtype, torch.float32)
        weights = torch.softmax(logits.to(softmax_dtype), dim=-1).view(batch, self.num_heads, tokens, tokens)
        if attn_scale is not None:
            weights = weights * attn_scale  # URPE: rows no longer sum to 1
        return weights, v

    def forward(
        self, x: torch.Tensor, attn_bias: torch.Tensor | None = None, attn_scale: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Shapes: x: (B, T, H*D); attn_bias (with -inf masks), attn_scale: (B, H, T, T) or None -> (B, T, H*D)."""
        if self.kernel == "flex":
            mixed = self.flex_mixed(x, attn_bias, attn_scale)  # (B, H, T, D)
        else:
            mixed = self.eager_mixed(x, attn_bias, attn_scale)
        batch, heads, tokens, head_dim = mixed.shape
        mixed = mixed.transpose(1, 2)  # (B, T, H, D)
        return self.out(mixed.reshape(batch, tokens, heads * head_dim))

    def eager_mixed(
        self, x: torch.Tensor, attn_bias: torch.Tensor | None, attn_scale: torch.Tensor | None
    ) -> torch.Tensor:
        """The heads' ``A V`` with A in memory. Shapes: as :meth:`forward` -> (B, H, T, D)."""
        probabilities, v = self.attention_weights(x, attn_bias, None)  # softmax, (B, H, T, T)
        if attn_scale is None:
            weights = self.attention_dropout(probabilities)
        else:  # URPE: A * C, then dropout
            weights = scale_and_drop(probabilities, attn_scale, self.attention_dropout.keep_mask(probabilities))
        weights = weights.to(v.dtype)
        batch, heads, tokens, head_dim = v.shape
        # A V with A as the left factor: the gradient of A comes out contiguous for the backward passes
        # of dropout, URPE product and softmax (V^T A^T would hand them a transposed one; docs/benchmarks.md)
        mixed = torch.bmm(weights.view(batch * heads, tokens, tokens), v.reshape(batch * heads, tokens, head_dim))
        return mixed.view(batch, heads, tokens, head_dim)

    def flex_mixed(
        self, x: torch.Tensor, attn_bias: torch.Tensor | None, attn_scale: torch.Tensor | None
    ) -> torch.Tensor:
        """The heads' ``A V`` by FlexAttention, dropout's keep mask folded into URPE's multiplier (drawn as the eager
        kernel draws it: the same mask from the same generator state). Shapes: as :meth:`forward` -> (B, H, T, D)."""
        q, k, v = self.queries_keys_values(x)
        batch, heads, tokens, _ = q.shape
        if attn_bias is None:
            attn_bias = q.new_zeros(batch, heads, tokens, tokens, dtype=torch.float32)
        keep = self.attention_dropout.keep_mask(attn_bias)  # (B, H, T, T) like the float32 probabilities, or None
        if keep is None:
            multiplier = attn_scale  # C, or None for RPE: one pass
        elif attn_scale is None:
            multiplier = keep  # RPE in training: dropout alone multiplies
        else:
            multiplier = attn_scale * keep
        return flex_relative_attention(q, k, v, attn_bias, multiplier)


def use_attention_kernel(module: nn.Module, kernel: AttentionKernel) -> None:
    """Make every :class:`MultiHeadAttention` inside ``module`` compute with ``kernel`` (:data:`AttentionKernel`)."""
    check_choice("attention kernel", kernel, ATTENTION_KERNELS)
    for attention in module.modules():
        if isinstance(attention, MultiHeadAttention):
            attention.kernel = kernel
