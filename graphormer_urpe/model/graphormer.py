"""Graphormer (Ying et al., 2021) with RPE or URPE attention (Luo et al., 2022), top to bottom.

    tokens  = [graph token (+ Linear(molecule features)); node features + degree embeddings]   (B, T, H*D)
    bias    = B[relation] + edge-path bias        shared by all layers        (B, H, T, T)
    scale   = C[relation]                         URPE only, shared           (B, H, T, T)
    layer   : x = x + drop(MHA(LN(x), bias, scale));  x = x + drop(FFN(LN(x)))
    output  = Linear(LN(x)[graph token or target node])                       (B, outputs)
              or Linear(LN(x)[every node])  with ``readout: nodes``           (B, N, outputs)

A pair's relation id is its shortest-path distance (:mod:`graphormer_urpe.constants`); masking and the official
variants are in ``docs/model.md`` and ``docs/official-graphormer.md``. Nothing here imports Lightning.

Shape letters: B graphs, N nodes (largest graph), T = N + 1 tokens (N without graph token), H heads, D head dim,
E edges in the batch, F / Fc node-feature columns / continuous width, Fe / Fec the same for edges, K hops,
M molecule-level features.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from graphormer_urpe.constants import (
    DEFAULT_MULTI_HOP_MAX_DIST,
    DEFAULT_SPATIAL_POS_MAX,
    GRAPH_TOKEN_POS,
    GRAPH_TOKEN_RELATION,
    MAX_SPATIAL_POS_MAX,
    MAX_STORED_DISTANCE,
    NO_EDGE,
    NODE_TOKEN_OFFSET,
    PAD_ID,
    PAD_RELATION,
    SPD_RELATION_OFFSET,
    UNREACHABLE_SPD,
)
from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.spec import READOUT, DataSpec
from graphormer_urpe.errors import ConfigError, check_choice, check_int, check_number
from graphormer_urpe.model.attention import MultiHeadAttention, RelativeBias, RelativeScale
from graphormer_urpe.model.dropout import Dropout

if TYPE_CHECKING:
    from torch_geometric.data import Data


@dataclasses.dataclass
class GraphormerConfig:
    """Hyper-parameters of :class:`Graphormer`, each checked at construction (a ConfigError names
    ``model.encoder.<field>`` and the values it allows); ``docs/official-graphormer.md`` maps them to official code.

    Example:
        >>> GraphormerConfig(num_layers=6, hidden_dim=64, num_heads=8).num_relations  # pad, graph token, SPD 0..19
        22

    Args:
        node_vocab: values of each categorical node-feature column (F entries, each >= 1).
        edge_vocab: values of each categorical edge-feature column (Fe entries, each >= 1).
        num_outputs: width of the prediction: targets (regression, binary labels) or classes.
        continuous_node_dim: Fc, continuous node-feature width projected into every node token (0: none).
        continuous_edge_dim: Fec, continuous edge-feature width projected into the edge encoding (0: none).
        readout: ``graph_token`` (per graph), ``target_node`` (``batch.target_node``) or ``nodes`` (every node).
        num_layers: encoder layers.
        hidden_dim: model width ``H * D``; a multiple of ``num_heads``.
        ffn_dim: inner width of the feed-forward block.
        num_heads: H.
        attention: ``urpe`` (softmax times C[relation]) or ``rpe`` (plain Graphormer).
        max_degree: degrees above this share one embedding.
        spatial_pos_max: mask pairs at SPD ``>=`` this and unreachable pairs (1 to 255); null masks nothing.
        max_distance: own rows of B and C for SPD 0 .. this (farther share the last), unreachable pairs one more.
        edge_encoding: ``multi_hop`` (K path edges, an H x H matrix each), ``single_hop`` (direct edges) or ``none``.
        multi_hop_max_dist: K, path edges used by ``multi_hop`` (official: 5).
        input_dropout: dropout on the input tokens, in [0, 1).
        dropout: dropout on each residual branch output, in [0, 1).
        attention_dropout: dropout on the attention matrix, in [0, 1).
        activation_dropout: dropout after the feed-forward activation, in [0, 1).
        drop_path: stochastic-depth rate of the last layer (linear from 0 at the first), in [0, 1).
        graph_token: prepend the learned graph token; without it (URPE paper, Theorem 2) read nodes.
        layer_norm: ``pre`` (``x + f(LN(x))``, official v1.0) or ``post`` (``LN(x + f(x))``, official v2).
        embedding_norm: LayerNorm on the input tokens before the input dropout (official v2).
        final_norm: LayerNorm on the final token states (official v1.0).
        head: ``linear`` (official v1.0) or ``v2`` (``Linear -> GELU -> LayerNorm -> Linear`` + scalar bias).
        molecule_features: names of the M molecule-level features (set by the data; empty: none); they need
            ``graph_token``.
        molecule_features_into: where the molecule features enter: ``graph_token`` (a zero-initialised
            ``Linear(M, hidden_dim)`` added to the graph token's input, seen by every layer) or ``readout`` (a
            residual feed-forward block on the graph token's final state that reads the state and the features,
            its output layer zero-initialised, trained at the head's rate); see docs/model.md.
    """

    node_vocab: Sequence[int] = dataclasses.field(default_factory=lambda: [28])
    edge_vocab: Sequence[int] = dataclasses.field(default_factory=lambda: [4])
    num_outputs: int = 1
    continuous_node_dim: int = 0
    continuous_edge_dim: int = 0
    readout: Literal["graph_token", "target_node", "nodes"] = "graph_token"
    num_layers: int = 12
    hidden_dim: int = 80
    ffn_dim: int = 80
    num_heads: int = 8
    attention: Literal["urpe", "rpe"] = "urpe"
    max_degree: int = 64
    spatial_pos_max: int | None = DEFAULT_SPATIAL_POS_MAX
    edge_encoding: Literal["multi_hop", "single_hop", "none"] = "multi_hop"
    multi_hop_max_dist: int = DEFAULT_MULTI_HOP_MAX_DIST
    input_dropout: float = 0.0
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation_dropout: float = 0.0
    drop_path: float = 0.0
    graph_token: bool = True
    max_distance: int | None = None
    layer_norm: Literal["pre", "post"] = "pre"
    embedding_norm: bool = False
    final_norm: bool = True
    head: Literal["linear", "v2"] = "linear"
    molecule_features: Sequence[str] = ()
    molecule_features_into: Literal["graph_token", "readout"] = "graph_token"

    #: The fields that shape the weights, taken from the checkpoint by ``graphormer-urpe train --init_from``.
    ARCHITECTURE: ClassVar[tuple[str, ...]] = (
        "num_layers",
        "hidden_dim",
        "ffn_dim",
        "num_heads",
        "max_degree",
        "spatial_pos_max",
        "max_distance",
        "edge_encoding",
        "multi_hop_max_dist",
        "graph_token",
        "layer_norm",
        "embedding_norm",
        "final_norm",
        "head",
    )

    def __post_init__(self) -> None:
        """Check every field; raise :class:`~graphormer_urpe.errors.ConfigError` naming the first that cannot work."""
        key = "model.encoder."
        for name in ("node_vocab", "edge_vocab"):
            vocab = getattr(self, name)
            if isinstance(vocab, str) or not isinstance(vocab, Sequence) or (name == "node_vocab" and not vocab):
                raise ConfigError(
                    key + name,
                    vocab,
                    "must be a list with the number of values of each feature "
                    "column" + (" (at least one column)" if name == "node_vocab" else ""),
                )
            for column, values in enumerate(vocab):
                check_int(f"{key}{name}[{column}]", values, 1)
        for name, minimum in (
            ("num_outputs", 1),
            ("continuous_node_dim", 0),
            ("continuous_edge_dim", 0),
            ("num_layers", 1),
            ("hidden_dim", 1),
            ("ffn_dim", 1),
            ("num_heads", 1),
            ("max_degree", 0),
            ("multi_hop_max_dist", 1),
        ):
            check_int(key + name, getattr(self, name), minimum)
        if self.hidden_dim % self.num_heads:
            raise ConfigError(
                key + "num_heads",
                self.num_heads,
                f"must divide {key}hidden_dim={self.hidden_dim} (each head gets hidden_dim / num_heads dimensions)",
            )
        for name, allowed in (
            ("readout", ("graph_token", "target_node", "nodes")),
            ("attention", ("urpe", "rpe")),
            ("edge_encoding", ("multi_hop", "single_hop", "none")),
            ("layer_norm", ("pre", "post")),
            ("head", ("linear", "v2")),
            ("graph_token", (True, False)),
            ("molecule_features_into", ("graph_token", "readout")),
            ("embedding_norm", (True, False)),
            ("final_norm", (True, False)),
        ):
            check_choice(key + name, getattr(self, name), allowed)
        for name in ("input_dropout", "dropout", "attention_dropout", "activation_dropout", "drop_path"):
            check_number(key + name, getattr(self, name), 0.0, 1.0, include_maximum=False)
        features = self.molecule_features
        if isinstance(features, str) or not isinstance(features, Sequence) or len(set(features)) != len(features):
            raise ConfigError(key + "molecule_features", features, "must be a list of distinct feature names")
        if features and not self.graph_token:
            raise ConfigError(
                key + "graph_token",
                self.graph_token,
                f"must be true to read the {len(features)} "
                "molecule-level features (data.source.descriptors / feature_columns), which enter "
                "through the graph token or its final state; turn them off to train without the graph "
                "token",
            )
        if self.spatial_pos_max is not None:
            check_int(
                key + "spatial_pos_max",
                self.spatial_pos_max,
                1,
                MAX_SPATIAL_POS_MAX,
                hint=f" (distances are stored up to {MAX_STORED_DISTANCE}; {MAX_SPATIAL_POS_MAX} masks only "
                "unreachable pairs), or null to mask nothing by distance (what official Graphormer's "
                "spatial_pos_max 1024 does)",
            )
        if self.max_distance is not None:
            check_int(
                key + "max_distance",
                self.max_distance,
                0,
                MAX_STORED_DISTANCE,
                hint=" (the largest stored distance), or null",
            )
        elif self.spatial_pos_max is None:
            raise ConfigError(
                key + "max_distance",
                None,
                f"{key}spatial_pos_max is null (no masking), so set "
                f"max_distance (0 to {MAX_STORED_DISTANCE}) to give every unmasked distance a row of B",
            )

    @property
    def distance_rows(self) -> int:
        """Rows of B (and C) for reachable distances: 0 .. ``max_distance`` (or ``spatial_pos_max - 1``)."""
        return self.max_distance + 1 if self.max_distance is not None else self.spatial_pos_max

    @property
    def unreachable_relation(self) -> int | None:
        """Relation id of unreachable pairs (the last row), or None in the masked layout."""
        return SPD_RELATION_OFFSET + self.distance_rows if self.max_distance is not None else None

    @property
    def num_relations(self) -> int:
        """Rows of B and C: padding, graph token, SPD 0 .. ``distance_rows - 1``, unreachable (``max_distance``)."""
        return SPD_RELATION_OFFSET + self.distance_rows + (self.max_distance is not None)


def _resolve_config(config: GraphormerConfig | None, options: dict[str, Any]) -> GraphormerConfig:
    """``config`` with ``options`` replacing its fields, or a config of ``options`` alone."""
    fields = [f.name for f in dataclasses.fields(GraphormerConfig)]
    unknown = sorted(set(options) - set(fields))
    if unknown:
        hints = [
            f"'{name}' (did you mean '{close[0]}'?)"
            if (close := difflib.get_close_matches(name, fields, 1))
            else f"'{name}'"
            for name in unknown
        ]
        raise TypeError(
            f"Graphormer got unknown option(s) {', '.join(hints)}; GraphormerConfig fields: {', '.join(fields)}"
        )
    if config is None:
        return GraphormerConfig(**options)
    if not isinstance(config, GraphormerConfig):
        raise TypeError(
            f"Graphormer(config=...) takes a GraphormerConfig, got {type(config).__name__}; "
            "pass hyper-parameters as keyword arguments, e.g. Graphormer(num_layers=6)"
        )
    return dataclasses.replace(config, **options) if options else config


def _categorical_offsets(vocab: Sequence[int]) -> torch.Tensor:
    """Start row of each column in a shared table whose row :data:`PAD_ID` is padding. (F,)"""
    return torch.tensor([PAD_ID + 1 + sum(vocab[:c]) for c in range(len(vocab))], dtype=torch.long)


class NodeEncoder(nn.Module):
    """Node tokens: summed column embeddings, ``Linear`` of the Fc continuous features (if Fc > 0), plus in- and
    out-degree embeddings (degrees clipped at ``max_degree``)."""

    def __init__(self, node_vocab: Sequence[int], max_degree: int, hidden_dim: int, continuous_dim: int = 0) -> None:
        super().__init__()
        self.register_buffer("offsets", _categorical_offsets(node_vocab), persistent=False)
        self.features = nn.Embedding(PAD_ID + 1 + sum(node_vocab), hidden_dim, padding_idx=PAD_ID)
        self.continuous = nn.Linear(continuous_dim, hidden_dim) if continuous_dim > 0 else None
        self.in_degree = nn.Embedding(PAD_ID + 2 + max_degree, hidden_dim, padding_idx=PAD_ID)
        self.out_degree = nn.Embedding(PAD_ID + 2 + max_degree, hidden_dim, padding_idx=PAD_ID)
        self.max_degree = max_degree

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Shapes: batch.x: (B, N, F), batch.x_continuous: (B, N, Fc) -> (B, N, H*D) tokens, zero at padding nodes."""
        mask = batch.node_mask
        features = torch.where(mask.unsqueeze(-1), batch.x + self.offsets, PAD_ID)  # (B, N, F)
        tokens = self.features(features).sum(dim=-2)  # (B, N, H*D)
        if self.continuous is not None:
            projected = self.continuous(batch.x_continuous.to(self.continuous.weight.dtype))  # (B, N, H*D)
            tokens = tokens + torch.where(mask.unsqueeze(-1), projected, 0.0)
        for degree, table in ((batch.in_degree, self.in_degree), (batch.out_degree, self.out_degree)):
            tokens = tokens + table(torch.where(mask, degree.clamp(max=self.max_degree) + PAD_ID + 1, PAD_ID))
        return tokens


class MoleculeFeatureBlock(nn.Module):
    """What both ways of joining molecule-level features share: z, the features standardised by the training split's
    statistics (buffers ``mean``, ``std``, saved in checkpoints) with missing values (NaN) set to 0, and two joins, of
    which a subclass replaces one: into the graph token before the layers (:meth:`join_token`) or into the graph
    token's final state (:meth:`join_readout`). The other join passes its input through, so the model calls both."""

    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("std", torch.ones(num_features))

    def set_statistics(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Standardise with these (M,) statistics from now on (the training split's, set at the start of a fit)."""
        self.mean.copy_(torch.as_tensor(mean, dtype=self.mean.dtype))
        self.std.copy_(torch.as_tensor(std, dtype=self.std.dtype))

    def standardised(self, features: torch.Tensor) -> torch.Tensor:
        """Shapes: features (B, M) with NaN where missing -> (B, M) ``(f - mean) / std``, 0 where missing."""
        z = (features.to(self.mean.dtype) - self.mean) / self.std
        return torch.where(torch.isnan(z), 0.0, z)

    def reset_projection(self) -> None:
        """Start the block so it adds nothing until trained."""
        raise NotImplementedError

    def join_token(self, token: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Shapes: token (B, 1, H*D), features (B, M) -> (B, 1, H*D), the graph token the layers read."""
        return token

    def join_readout(self, state: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Shapes: state (B, H*D), features (B, M) -> (B, H*D), the state the head reads."""
        return state


class MoleculeEncoder(MoleculeFeatureBlock):
    """Molecule-level features into the graph token: ``token + Linear(z)``.

    The projection starts at zero (:meth:`reset_projection`), so a model given features first computes exactly what
    the same weights compute without them; training moves it from there. Why the graph token: docs/model.md."""

    def __init__(self, num_features: int, hidden_dim: int) -> None:
        super().__init__(num_features)
        self.projection = nn.Linear(num_features, hidden_dim)

    def reset_projection(self) -> None:
        """Zero the projection's weight and bias: the features add nothing until trained."""
        nn.init.zeros_(self.projection.weight)
        nn.init.zeros_(self.projection.bias)

    def join_token(self, token: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        projected = self.projection(self.standardised(features).to(self.projection.weight.dtype))  # (B, H*D)
        return token + projected.unsqueeze(1)  # (B, 1, H*D)


class MoleculeReadout(MoleculeFeatureBlock):
    """Molecule-level features joined with the graph token's final state h, as chemprop joins descriptors with its
    readout, but as a residual block so a pretrained head keeps reading the state it was trained on:

        h' = h + W_out GELU(W_in [h ; z] + b_in) + b_out

    with z the standardised features. ``W_out`` and ``b_out`` (``projection``) start at zero, so h' = h until
    trained; ``W_in`` (``inner``) keeps PyTorch's default init (uniform, scale 1 / sqrt(H*D + M)) rather than the
    encoder's small normal one, so the block's gradient is not vanishingly small at the start."""

    def __init__(self, num_features: int, hidden_dim: int) -> None:
        super().__init__(num_features)
        self.inner = nn.Linear(hidden_dim + num_features, hidden_dim)
        self.projection = nn.Linear(hidden_dim, hidden_dim)

    def reset_projection(self) -> None:
        """Zero the output layer (the block adds nothing until trained) and give ``inner`` its default init."""
        nn.init.zeros_(self.projection.weight)
        nn.init.zeros_(self.projection.bias)
        self.inner.reset_parameters()

    def join_readout(self, state: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        joined = torch.cat([state, self.standardised(features).to(state.dtype)], dim=-1)  # (B, H*D + M)
        return state + self.projection(F.gelu(self.inner(joined)))


#: The block of each place molecule-level features enter (``GraphormerConfig.molecule_features_into``).
MOLECULE_FEATURE_BLOCKS: dict[str, type[MoleculeFeatureBlock]] = {
    "graph_token": MoleculeEncoder,
    "readout": MoleculeReadout,
}


class EdgePathBias(nn.Module):
    """Graphormer's edge encoding: a per-head bias from the edges along a shortest path.

    For a pair (i, j) whose shortest path has edges e_1 .. e_L (cut at K = ``max_hops``),

        bias(i, j) = 1/L * sum_{n=1..L} ( mean_f emb(edge features of e_n) ) @ W_n

    with one H x H matrix W_n per hop (``hop_matrices``, ``multi_hop``); ``single_hop`` (K = 1) keeps direct edges
    and no W. Continuous edge features c_e (Fec > 0) add ``Linear(c_e)`` to each edge's vector. The path is
    followed through ``batch.first_edge``, K gathers, never a dense (B, N, N, K, Fe) tensor."""

    def __init__(
        self, edge_vocab: Sequence[int], num_heads: int, max_hops: int, hop_matrices: bool, continuous_dim: int = 0
    ) -> None:
        super().__init__()
        self.register_buffer("offsets", _categorical_offsets(edge_vocab), persistent=False)
        self.features = nn.Embedding(PAD_ID + 1 + sum(edge_vocab), num_heads, padding_idx=PAD_ID)
        self.continuous = nn.Linear(continuous_dim, num_heads) if continuous_dim > 0 else None
        self.hop_weight = nn.Parameter(torch.empty(max_hops, num_heads, num_heads)) if hop_matrices else None
        self.max_hops = max_hops

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Shapes: batch.first_edge (B, N, N), edge_attr (E, Fe), edge_continuous (E, Fec) -> (B, N, N, H) edge bias."""
        per_edge = self.features(batch.edge_attr + self.offsets).mean(dim=-2)  # (E, H)
        if self.continuous is not None:
            # (E, H)
            per_edge = per_edge + self.continuous(batch.edge_continuous.to(self.continuous.weight.dtype))
        num_edges, heads = per_edge.shape
        if self.hop_weight is not None:
            per_hop = torch.einsum("eh,khg->keg", per_edge, self.hop_weight)  # (K, E, H)
        else:
            per_hop = per_edge.unsqueeze(0)  # (1, E, H) for single_hop
        # one zero row per hop for "no edge", then flatten so one lookup serves all hops
        per_hop = torch.cat([per_hop, per_hop.new_zeros(self.max_hops, 1, heads)], dim=1)
        per_hop = per_hop.reshape(-1, heads)  # (K * (E + 1), H)

        first_edge = batch.first_edge.long()  # (B, N, N); narrower ids (sampled subgraphs) widened once
        edge = first_edge  # (B, N, N): current edge on the path from i to j
        if self.hop_weight is None:  # single_hop: direct edges only
            edge = torch.where(batch.spd == 1, edge, NO_EDGE)
        total = per_hop.new_zeros(*edge.shape, heads)  # (B, N, N, H)
        hops = torch.zeros(edge.shape, dtype=per_hop.dtype, device=edge.device)  # L
        for k in range(self.max_hops):
            on_path = edge >= 0
            safe = torch.where(on_path, edge, num_edges)  # (B, N, N), num_edges = zero row
            total = total + per_hop[k * (num_edges + 1) + safe]
            hops = hops + on_path
            if k + 1 < self.max_hops:
                next_node = batch.edge_dst[safe.clamp(max=num_edges - 1)] if num_edges else safe
                edge = torch.where(on_path, first_edge.gather(1, next_node), edge)
        return total / hops.clamp(min=1).unsqueeze(-1)


class EncoderLayer(nn.Module):
    """Transformer layer; ``drop_path`` is the probability of skipping a residual branch for a whole graph.

        pre  (v1.0):  x = x + drop(MHA(LN(x)));  x = x + drop(FFN(LN(x)))
        post (v2):    x = LN(x + drop(MHA(x)));  x = LN(x + drop(FFN(x)))       (``post_norm``)

    official Graphormer v1.0 normalises before each block, v2 after it.
    """

    def __init__(
        self,
        hidden_dim: int,
        ffn_dim: int,
        num_heads: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        drop_path: float,
        post_norm: bool = False,
    ) -> None:
        super().__init__()
        self.post_norm = post_norm
        self.attention_norm = nn.LayerNorm(hidden_dim)
        self.attention = MultiHeadAttention(hidden_dim, num_heads, attention_dropout)
        self.ffn_norm = nn.LayerNorm(hidden_dim)
        self.ffn = nn.Sequential(
            nn.Linear(hidden_dim, ffn_dim), nn.GELU(), Dropout(activation_dropout), nn.Linear(ffn_dim, hidden_dim)
        )
        self.dropout = Dropout(dropout)
        self.drop_path = drop_path

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor, attn_scale: torch.Tensor | None) -> torch.Tensor:
        """Shapes: x: (B, T, H*D); attn_bias (with -inf masks), attn_scale: (B, H, T, T) -> (B, T, H*D)."""
        if self.post_norm:
            x = self.attention_norm(x + self._residual(self.dropout(self.attention(x, attn_bias, attn_scale))))
            return self.ffn_norm(x + self._residual(self.dropout(self.ffn(x))))
        x = x + self._residual(self.dropout(self.attention(self.attention_norm(x), attn_bias, attn_scale)))
        return x + self._residual(self.dropout(self.ffn(self.ffn_norm(x))))

    def _residual(self, branch: torch.Tensor) -> torch.Tensor:
        """Stochastic depth: zero the branch of a random subset of graphs, rescale the rest."""
        if not self.training or self.drop_path == 0.0:
            return branch
        keep = 1.0 - self.drop_path
        alive = branch.new_empty(branch.shape[0], 1, 1).bernoulli_(keep)  # (B, 1, 1)
        return branch * alive / keep


class V2Head(nn.Module):
    """Official Graphormer v2's output head: ``y = Linear_out(LayerNorm(GELU(Linear(x)))) + b``, b one scalar."""

    def __init__(self, hidden_dim: int, num_outputs: int) -> None:
        super().__init__()
        self.transform = nn.Linear(hidden_dim, hidden_dim)
        self.norm = nn.LayerNorm(hidden_dim)
        self.out = nn.Linear(hidden_dim, num_outputs, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x: (..., H*D) -> (..., num_outputs)."""
        return self.out(self.norm(F.gelu(self.transform(x)))) + self.bias


def official_init(module: nn.Module, num_layers: int) -> None:
    """Official Graphormer init, applied once by ``model.apply``: Linear N(0, 0.02/sqrt(layers)), embeddings
    N(0, 0.02) with zero padding rows; the URPE scale C keeps its all-ones init."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02 / math.sqrt(num_layers))
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
        if module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
    elif isinstance(module, EdgePathBias) and module.hop_weight is not None:
        nn.init.normal_(module.hop_weight, std=0.02)


class Graphormer(nn.Module):
    """Graphormer encoder with a prediction read from the graph token, a target node or every node.

    Built from a :class:`GraphormerConfig` and/or its fields as keyword arguments; ``forward`` takes a
    :class:`~graphormer_urpe.data.batch.GraphBatch`, or a PyG ``Batch`` transformed by ``GraphormerStructure``.

    Example:
        >>> import torch
        >>> from torch_geometric.data import Batch, Data
        >>> from graphormer_urpe import GraphormerStructure
        >>> model = Graphormer(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, node_vocab=[5])
        >>> graph = GraphormerStructure()(Data(x=torch.tensor([[1], [2], [3]]),
        ...                                    edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])))
        >>> model.eval()(Batch.from_data_list([graph, graph])).shape  # one prediction per graph
        torch.Size([2, 1])
        >>> Graphormer(model.config, attention="rpe").config.attention  # a config with fields replaced
        'rpe'
    """

    def __init__(self, config: GraphormerConfig | None = None, **options: Any) -> None:
        super().__init__()
        config = _resolve_config(config, options)
        # not in __post_init__: the readout is decided by the data, a config's own value is a placeholder
        if config.readout == "graph_token" and not config.graph_token:
            raise ConfigError(
                "model.encoder.readout",
                config.readout,
                "needs model.encoder.graph_token=true; without the graph token read 'target_node' or 'nodes'",
            )
        if config.molecule_features and config.molecule_features_into == "readout" and config.readout != "graph_token":
            raise ConfigError(
                "model.encoder.molecule_features_into",
                "readout",
                "joins the molecule features with "
                f"the graph token's final state, but this data reads {config.readout}; use graph_token",
            )
        self.config = config
        hidden = config.hidden_dim
        self.nodes = NodeEncoder(config.node_vocab, config.max_degree, hidden, config.continuous_node_dim)
        self.graph_token = nn.Embedding(1, hidden) if config.graph_token else None
        self.molecule: MoleculeFeatureBlock | None = None
        if config.molecule_features:
            block = MOLECULE_FEATURE_BLOCKS[config.molecule_features_into]
            self.molecule = block(len(config.molecule_features), hidden)
        #: Token position of node 0: behind the graph token, or first without it.
        self.first_node = NODE_TOKEN_OFFSET if config.graph_token else 0
        relations, heads = config.num_relations, config.num_heads
        self.relative_bias = RelativeBias(relations, heads)
        self.relative_scale = RelativeScale(relations, heads) if config.attention == "urpe" else None
        multi_hop = config.edge_encoding == "multi_hop"
        if config.edge_encoding != "none":
            max_hops = config.multi_hop_max_dist if multi_hop else 1
            self.edge_bias = EdgePathBias(
                config.edge_vocab,
                heads,
                max_hops=max_hops,
                hop_matrices=multi_hop,
                continuous_dim=config.continuous_edge_dim,
            )
        else:
            self.edge_bias = None
        self.embedding_norm = nn.LayerNorm(hidden) if config.embedding_norm else None
        self.input_dropout = Dropout(config.input_dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(
                hidden,
                config.ffn_dim,
                config.num_heads,
                config.dropout,
                config.attention_dropout,
                config.activation_dropout,
                rate,
                post_norm=config.layer_norm == "post",
            )
            for rate in torch.linspace(0.0, config.drop_path, config.num_layers).tolist()
        )
        self.final_norm = nn.LayerNorm(hidden) if config.final_norm else None
        self.head = V2Head(hidden, config.num_outputs) if config.head == "v2" else nn.Linear(hidden, config.num_outputs)
        self.apply(functools.partial(official_init, num_layers=config.num_layers))
        if self.molecule is not None:
            self.molecule.reset_projection()

    def relations(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Relation id (B, T, T) int64 and attention mask (B, T, T) bool (True = may attend) of every token pair."""
        config = self.config
        node_mask = batch.node_mask
        real_pair = node_mask.unsqueeze(2) & node_mask.unsqueeze(1)  # (B, N, N)
        spd = batch.spd.long()  # (B, N, N); compared as int64: a uint8 tensor would wrap a Python int >= 256
        near = torch.ones_like(real_pair) if config.spatial_pos_max is None else spd < config.spatial_pos_max
        distance = spd.clamp(max=config.distance_rows - 1) + SPD_RELATION_OFFSET
        if config.unreachable_relation is not None:
            distance = torch.where(spd != UNREACHABLE_SPD, distance, config.unreachable_relation)
        relation = torch.where(real_pair & near, distance, PAD_RELATION)
        far = real_pair & ~near  # (B, N, N): masked by distance
        if self.graph_token is None:  # every row keeps a visible key: its own node, or the real nodes
            return relation, node_mask.unsqueeze(1) & ~far

        token_row = torch.where(node_mask, GRAPH_TOKEN_RELATION, PAD_RELATION)  # (B, N)
        token_row = F.pad(token_row, (1, 0), value=GRAPH_TOKEN_RELATION)  # (B, T)
        relation = torch.cat([token_row[:, 1:].unsqueeze(2), relation], dim=2)  # (B, N, T)
        relation = torch.cat([token_row.unsqueeze(1), relation], dim=1)  # (B, T, T)
        real_token = F.pad(node_mask, (1, 0), value=True)  # (B, T)
        return relation, real_token.unsqueeze(1) & ~F.pad(far, (1, 0, 1, 0))  # padding queries see every real key

    def attention_inputs(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Bias B + edge bias with the masks as -inf, and the URPE scale C (or None): once per forward for all layers,
        contiguous, float32 also under mixed precision. Shapes: returns attn_bias, attn_scale (B, H, T, T)."""
        relation, key_mask = self.relations(batch)
        with torch.autocast(relation.device.type, enabled=False):
            attn_bias = self.relative_bias(relation).float()  # (B, H, T, T)
            if self.edge_bias is not None:
                edge_bias = self.edge_bias(batch).float().permute(0, 3, 1, 2)  # (B, H, N, N)
                attn_bias[:, :, self.first_node :, self.first_node :] += edge_bias
            attn_bias.masked_fill_(~key_mask.unsqueeze(1), float("-inf"))
            # (B, H, T, T)
            attn_scale = None if self.relative_scale is None else self.relative_scale(relation).float()
            return attn_bias, attn_scale

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """Final token states (B, T, H*D): the graph token at :data:`GRAPH_TOKEN_POS`, node i at ``first_node + i``."""
        x = self.nodes(batch)  # (B, N, H*D)
        if self.graph_token is not None:
            token = self.graph_token.weight.expand(x.shape[0], 1, -1)  # (B, 1, H*D)
            if self.molecule is not None:
                token = self.molecule.join_token(token, batch.molecule_features)  # (B, 1, H*D)
            x = torch.cat([token, x], dim=1)  # (B, T, H*D)
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        x = self.input_dropout(x)
        attn_bias, attn_scale = self.attention_inputs(batch)
        for layer in self.layers:
            x = layer(x, attn_bias, attn_scale)
        return x if self.final_norm is None else self.final_norm(x)

    def data_spec(self) -> DataSpec:
        """The data this model reads, as its config describes it; a PyG batch is checked against it. The config
        does not tell Y from classes: ``num_targets`` is ``num_outputs`` here."""
        config = self.config
        level = {readout: level for level, readout in READOUT.items()}[config.readout]
        return DataSpec(
            node_vocab=config.node_vocab,
            edge_vocab=config.edge_vocab,
            num_targets=config.num_outputs,
            num_outputs=config.num_outputs,
            continuous_node_dim=config.continuous_node_dim,
            continuous_edge_dim=config.continuous_edge_dim,
            target_level=level,
            molecule_features=tuple(config.molecule_features),
        )

    def forward(self, batch: GraphBatch | Data) -> torch.Tensor:
        """Prediction of each graph, of its target node, or of every node (``readout``); a PyG ``Batch`` is converted
        by :func:`~graphormer_urpe.data.pyg_interop.to_graph_batch`. The head runs outside autocast (full resolution).

        Shapes: returns (B, num_outputs); (B, N, num_outputs) with ``readout="nodes"`` (padding nodes included)."""
        if not isinstance(batch, GraphBatch):
            # PyG is imported here, on first use: a process that never hands the model a PyG batch starts
            # without its import (seconds; docs/contributing.md)
            from graphormer_urpe.data.pyg_interop import to_graph_batch

            batch = to_graph_batch(batch, self.data_spec())
        states = self.encode(batch)  # (B, T, H*D)
        if self.config.readout == "graph_token":
            readout = states[:, GRAPH_TOKEN_POS]  # (B, H*D)
        elif self.config.readout == "nodes":
            readout = states[:, self.first_node :]  # (B, N, H*D)
        else:
            position = batch.target_node + self.first_node  # (B,)
            readout = states[torch.arange(states.shape[0], device=states.device), position]  # (B, H*D)
        with torch.autocast(readout.device.type, enabled=False):
            readout = readout.to(next(self.head.parameters()).dtype)
            if self.molecule is not None:
                readout = self.molecule.join_readout(readout, batch.molecule_features)  # (B, H*D)
            return self.head(readout)
