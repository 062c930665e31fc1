"""A small bidirectional Transformer for the paper's synthetic token tasks (section 5.1): no PE, T5 RPE or URPE.
It reuses the Graphormer's pre-LN :class:`~graphormer_urpe.model.graphormer.EncoderLayer`; only relation ids differ:

    tokens  = Embedding(w)                      no absolute position anywhere        (B, T, H*D)
    bias    = B[bucket(j - i)]                  T5 buckets, shared by all layers     (1, H, T, T)
    scale   = C[j - i]                          Toeplitz, URPE only, shared          (1, H, T, T)
    layer   : x = x + MHA(LN(x), bias, scale);  x = x + FFN(LN(x))
    logits  = Linear(LN(x))                     one class distribution per token     (B, T, classes)

``attention: none`` drops both tables (the noPE baseline), ``rpe`` keeps B, ``urpe`` adds C (paper, section 4.2).
Shape letters: B sequences, T tokens (T <= n = ``length``), H heads, D head dim.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import nn

from graphormer_urpe.constants import DEFAULT_T5_MAX_DISTANCE, DEFAULT_T5_NUM_BUCKETS, SEQUENCE_RELATION_OFFSET
from graphormer_urpe.errors import ConfigError, check_choice, check_int, check_number
from graphormer_urpe.model.attention import AttentionKind, RelativeBias, RelativeScale
from graphormer_urpe.model.graphormer import EncoderLayer, official_init


def t5_relative_bucket(offset: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bidirectional relative-position bucket (Raffel et al., 2020, as Hugging Face's ``T5Attention``) of each
    signed offset ``k = j - i``. Half of the buckets serve ``k <= 0``, half ``k > 0`` (ids shifted by
    ``h = num_buckets / 2``); within a half, with ``e = h / 2`` exact buckets:

        bucket(|k|) = |k|                                                   if |k| < e
                    = min(h - 1, e + floor( log(|k| / e) / log(max_distance / e) * (h - e) ))   otherwise

    Shapes: offset: any, integer -> the same shape, int64 in ``[0, num_buckets)``."""
    if num_buckets % 2 or num_buckets < 4:
        raise ValueError(f"num_buckets={num_buckets} must be even and at least 4")
    half = num_buckets // 2
    exact = half // 2
    if max_distance <= exact:
        raise ValueError(f"max_distance={max_distance} must exceed the {exact} exact buckets")
    offset = offset.long()
    distance = offset.abs()
    scaled = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far = (exact + (scaled * (half - exact)).long()).clamp(max=half - 1)
    return torch.where(distance < exact, distance, far) + (offset > 0).long() * half


def bucket_relations(length: int, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Relation ids of B: ``SEQUENCE_RELATION_OFFSET + t5_relative_bucket(j - i)``. (n, n) int64"""
    position = torch.arange(length)
    offset = position.unsqueeze(0) - position.unsqueeze(1)  # (n, n): j - i
    return t5_relative_bucket(offset, num_buckets, max_distance) + SEQUENCE_RELATION_OFFSET


def offset_relations(length: int) -> torch.Tensor:
    """Relation ids of the Toeplitz C (2n - 1 free values): ``SEQUENCE_RELATION_OFFSET + (j - i) + (n - 1)``. (n, n)"""
    position = torch.arange(length)
    return position.unsqueeze(0) - position.unsqueeze(1) + (length - 1) + SEQUENCE_RELATION_OFFSET


@dataclass
class SequenceConfig:
    """Hyper-parameters of :class:`SequenceTransformer` (paper: 3 layers, 768 wide, 12 heads, n = 128), each checked
    at construction (a ConfigError names ``model.encoder.<field>``).

    Args:
        vocab_size: input token values ``0 .. vocab_size - 1``.
        num_classes: output classes per token.
        length: n, the longest sequence; sizes the Toeplitz C (2n - 1 values per head).
        num_layers: encoder layers.
        hidden_dim: model width ``H * D``.
        ffn_dim: inner width of the feed-forward block.
        num_heads: H.
        attention: ``none`` (no positional information), ``rpe`` (T5 bias B) or ``urpe`` (B and C).
        num_buckets: T5 buckets of B (both directions together).
        max_distance: offsets at least this far share T5's last bucket.
        dropout: dropout on each residual branch output (the paper: 0).
        attention_dropout: dropout on the attention matrix (the paper: 0).
    """

    vocab_size: int = 10
    num_classes: int = 128
    length: int = 128
    num_layers: int = 3
    hidden_dim: int = 768
    ffn_dim: int = 3072
    num_heads: int = 12
    attention: Literal["none", "rpe", "urpe"] = "urpe"
    num_buckets: int = DEFAULT_T5_NUM_BUCKETS
    max_distance: int = DEFAULT_T5_MAX_DISTANCE
    dropout: float = 0.0
    attention_dropout: float = 0.0

    #: The fields that shape the weights, taken from the checkpoint by ``graphormer-urpe train --init_from``.
    ARCHITECTURE: ClassVar[tuple[str, ...]] = (
        "num_layers",
        "hidden_dim",
        "ffn_dim",
        "num_heads",
        "num_buckets",
        "max_distance",
    )

    def __post_init__(self) -> None:
        """Check every field; raise :class:`~graphormer_urpe.errors.ConfigError` naming the first that cannot work."""
        key = "model.encoder."
        for name in ("vocab_size", "num_classes", "length", "num_layers", "hidden_dim", "ffn_dim", "num_heads"):
            check_int(key + name, getattr(self, name), 1)
        if self.hidden_dim % self.num_heads:
            raise ConfigError(
                key + "num_heads",
                self.num_heads,
                f"must divide {key}hidden_dim={self.hidden_dim} (each head gets hidden_dim / num_heads dimensions)",
            )
        check_choice(key + "attention", self.attention, ("none", "rpe", "urpe"))
        check_int(key + "num_buckets", self.num_buckets, 4)
        if self.num_buckets % 2:
            raise ConfigError(key + "num_buckets", self.num_buckets, "must be even (half of the buckets per direction)")
        exact = self.num_buckets // 4
        check_int(
            key + "max_distance",
            self.max_distance,
            exact + 1,
            hint=f" (more than the {exact} exact buckets of num_buckets={self.num_buckets})",
        )
        for name in ("dropout", "attention_dropout"):
            check_number(key + name, getattr(self, name), 0.0, 1.0, include_maximum=False)


class SequenceTransformer(nn.Module):
    """Transformer encoder whose only positional information is the relative one chosen by ``attention``."""

    def __init__(self, config: SequenceConfig) -> None:
        super().__init__()
        self.config = config
        kind = AttentionKind(config.attention)
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_dim)
        self.relative_bias = (
            RelativeBias(SEQUENCE_RELATION_OFFSET + config.num_buckets, config.num_heads)
            if kind is not AttentionKind.NONE
            else None
        )
        self.relative_scale = (
            RelativeScale(SEQUENCE_RELATION_OFFSET + 2 * config.length - 1, config.num_heads)
            if kind is AttentionKind.URPE
            else None
        )
        bias_relation = bucket_relations(config.length, config.num_buckets, config.max_distance)
        self.register_buffer("bias_relation", bias_relation, persistent=False)
        self.register_buffer("scale_relation", offset_relations(config.length), persistent=False)
        self.layers = nn.ModuleList(
            EncoderLayer(
                config.hidden_dim,
                config.ffn_dim,
                config.num_heads,
                config.dropout,
                config.attention_dropout,
                activation_dropout=0.0,
                drop_path=0.0,
            )
            for _ in range(config.num_layers)
        )
        self.final_norm = nn.LayerNorm(config.hidden_dim)
        self.head = nn.Linear(config.hidden_dim, config.num_classes)
        self.apply(functools.partial(official_init, num_layers=config.num_layers))

    def attention_inputs(self, tokens: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """B and C (each (1, H, T, T) float32, or None) of the first T = ``tokens`` positions, for every sequence."""
        if tokens > self.config.length:
            raise ValueError(f"sequence of {tokens} tokens is longer than length={self.config.length}")
        tables = ((self.relative_bias, self.bias_relation), (self.relative_scale, self.scale_relation))
        bias, scale = (
            None if table is None else table(ids[:tokens, :tokens].unsqueeze(0)).float() for table, ids in tables
        )
        return bias, scale

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Shapes: tokens: (B, T) int64 in ``[0, vocab_size)`` -> (B, T, num_classes) class logits."""
        batch, length = tokens.shape
        x = self.tokens(tokens)  # (B, T, H*D)
        bias, scale = self.attention_inputs(length)
        # the attention takes one contiguous (B, H, T, T) table each, computed once for all layers
        attn_bias, attn_scale = (None if m is None else m.expand(batch, -1, -1, -1).contiguous() for m in (bias, scale))
        for layer in self.layers:
            x = layer(x, attn_bias, attn_scale)
        return self.head(self.final_norm(x))
