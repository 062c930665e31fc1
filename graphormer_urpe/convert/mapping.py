"""The Graphormer family's weights in our layout: one mapping for official v1.0, v2 and transformers' port, which
keep the same tensors under different names (``docs/official-graphormer.md``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from graphormer_urpe.constants import MAX_SPATIAL_POS_MAX, MAX_STORED_DISTANCE, PAD_ID, PAD_RELATION
from graphormer_urpe.convert.common import ConversionError, Converted, Found
from graphormer_urpe.model.graphormer import GraphormerConfig

log = logging.getLogger(__name__)

OFFICIAL_FEATURE_OFFSET = 512  # convert_to_single_emb's offset between feature columns (official wrapper.py)
OFFICIAL_UNREACHABLE_DISTANCE = 510  # what official algos.pyx stores for unreachable pairs
# their spatial_pos_encoder row, after the collator's 1
OFFICIAL_UNREACHABLE_ROW = OFFICIAL_UNREACHABLE_DISTANCE + 1
OFFICIAL_MULTI_HOP_MAX_DIST = 5  # official default (v1.0 data.py, v2 tasks/graph_prediction.py)
OFFICIAL_SPATIAL_POS_MAX = 1024  # official default of both training pipelines: nothing is masked by distance
#: Row of edge value v of column f is ``512 f + v + shift``: ``convert_to_single_emb``'s 1 and
#: ``preprocess_item``'s 1, and for the multi-hop path input one more from the collator.
SINGLE_HOP_EDGE_SHIFT, MULTI_HOP_EDGE_SHIFT = 2, 3
#: Tables under :attr:`Layout.node`; the others are under :attr:`Layout.bias`.
NODE_TABLES = ("atom_encoder", "in_degree_encoder", "out_degree_encoder", "graph_token")

Shape = tuple[int | None, ...]


@dataclass(frozen=True)
class Layout:
    """Where one family of checkpoints keeps each Graphormer tensor (None: the family has no such part)."""

    name: str
    node: str  # prefix of the node tables (NODE_TABLES)
    bias: str  # prefix of the other tables
    layers: str  # layer i's part (q k v out attention_norm ffn_norm fc1 fc2) is {layers}.{i}.{layer[part]}
    layer: Mapping[str, str]
    # None: pre_layernorm_marker (built only with pre-LN layers) decides
    layer_norm: Literal["pre", "post"] | None
    pre_layernorm_marker: str | None
    embedding_norm: str | None
    final_norm: str | None
    head: Literal["linear", "v2"]
    head_parts: Mapping[str, str]  # their module for each of our head modules
    head_bias: str | None
    never_applied: tuple[str, ...]  # prefixes of tensors the family builds but never applies (dropped)
    node_row_shift: int  # row of node value v of column f is 512 f + v + node_row_shift

    def table(self, name: str) -> str:
        return f"{self.node if name in NODE_TABLES else self.bias}{name}.weight"

    def module(self, i: int, part: str) -> str:
        return f"{self.layers}.{i}.{self.layer[part]}"


@dataclass(frozen=True)
class Declared:
    """Hyper-parameters a file stores, in our terms, each with where it was read (None: not stored)."""

    num_layers: Found | None = None
    hidden_dim: Found | None = None
    ffn_dim: Found | None = None
    num_heads: Found | None = None
    num_outputs: Found | None = None
    edge_type: Found | None = None  # official's meaning, as spatial_pos_max's
    pre_layernorm: Found | None = None
    embedding_norm: Found | None = None
    activation: Found | None = None
    multi_hop_max_dist: Found | None = None
    spatial_pos_max: Found | None = None
    dropout: Found | None = None
    attention_dropout: Found | None = None
    activation_dropout: Found | None = None
    input_dropout: Found | None = None
    num_atoms: Found | None = None  # official's table sizes: num_atoms + 1 .. num_edge_dis * heads^2 rows
    num_edges: Found | None = None
    num_in_degree: Found | None = None
    num_out_degree: Found | None = None
    num_spatial: Found | None = None
    num_edge_dis: Found | None = None


@dataclass(frozen=True)
class Architecture:
    """Sizes read off the weights, and which optional parts they hold."""

    num_layers: int
    hidden_dim: int
    ffn_dim: int
    num_heads: int
    num_outputs: int
    multi_hop: bool
    layer_norm: Literal["pre", "post"]
    embedding_norm: bool


def convert_weights(
    state: Mapping[str, torch.Tensor],
    layout: Layout,
    declared: Declared,
    *,
    node_vocab: Sequence[int],
    edge_vocab: Sequence[int],
) -> Converted:
    """Our RPE Graphormer's config and weights for a checkpoint of the Graphormer family (``node_vocab``,
    ``edge_vocab``: our featurisation's values per column); sizes come from a few shapes, all else is checked."""
    state = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    arch = _architecture(state, layout, declared)
    shapes, copies = _plan(layout, arch)
    dropped = _check_keys_and_shapes(state, layout, shapes)
    _check_tables(state, layout, declared, arch)

    weights = {ours: state[theirs] for ours, theirs in copies.items()}
    weights["nodes.features.weight"] = _feature_table(state, layout, "atom_encoder", node_vocab, layout.node_row_shift)
    for side in ("in", "out"):  # their row d + 1 = ours (min(d, max_degree) + 1), max_degree = rows - 2
        degrees = state[layout.table(f"{side}_degree_encoder")].clone()
        degrees[PAD_ID] = 0.0
        weights[f"nodes.{side}_degree.weight"] = degrees
    distance, weights["relative_bias.table.weight"] = _relations(state, layout, declared)
    edge_shift = MULTI_HOP_EDGE_SHIFT if arch.multi_hop else SINGLE_HOP_EDGE_SHIFT
    weights["edge_bias.features.weight"] = _feature_table(state, layout, "edge_encoder", edge_vocab, edge_shift)
    hops = 1
    if arch.multi_hop:
        hops, weights["edge_bias.hop_weight"] = _hop_matrices(state, layout, declared, arch.num_heads)
    weights.update(_attention_inputs(state, layout, arch))
    if layout.head_bias is not None:
        weights["head.bias"] = state[layout.head_bias].reshape(1)
    _warn_about_padding_rows(state, layout)

    dropouts = {
        name: found.value
        for name in ("dropout", "attention_dropout", "activation_dropout", "input_dropout")
        if (found := getattr(declared, name)) is not None
    }
    config = GraphormerConfig(
        node_vocab=list(node_vocab),
        edge_vocab=list(edge_vocab),
        num_outputs=arch.num_outputs,
        num_layers=arch.num_layers,
        hidden_dim=arch.hidden_dim,
        ffn_dim=arch.ffn_dim,
        num_heads=arch.num_heads,
        attention="rpe",
        max_degree=state[layout.table("in_degree_encoder")].shape[0] - 2,
        edge_encoding="multi_hop" if arch.multi_hop else "single_hop",
        multi_hop_max_dist=hops,
        **distance,
        layer_norm=arch.layer_norm,
        embedding_norm=arch.embedding_norm,
        final_norm=layout.final_norm is not None,
        head=layout.head,
        **dropouts,
    )
    return Converted(config, weights, dropped)


def _shape(shape: Sequence[int | None]) -> str:
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def _present_as_declared(
    state: Mapping[str, torch.Tensor],
    key: str,
    claim: Found | None,
    claims_present: Callable[[Any], bool],
    built_when: str,
    layout: Layout,
) -> bool:
    """Whether an optional part is there (``key`` present), checked against the file's setting."""
    present = key in state
    if claim is not None and claims_present(claim.value) != present:
        raise ConversionError(
            f"{claim}, but the file {'holds' if present else 'has no'} {key}, which {layout.name} builds {built_when}"
        )
    return present


def _architecture(state: Mapping[str, torch.Tensor], layout: Layout, declared: Declared) -> Architecture:
    """Sizes read off the weights, and the optional parts they hold, each checked against ``declared``."""
    # the sizes are read from these
    for key in (layout.table("atom_encoder"), layout.table("spatial_pos_encoder")):
        if key not in state:
            raise ConversionError(f"no {key}: not a Graphormer checkpoint in the {layout.name} layout")
        if state[key].dim() != 2:
            raise ConversionError(f"{layout.name} {key} has shape {_shape(state[key].shape)}, expected (*, *)")
    hidden, heads = (
        state[layout.table("atom_encoder")].shape[1],
        state[layout.table("spatial_pos_encoder")].shape[1],
    )
    if hidden % heads:
        raise ConversionError(
            f"{layout.name} {layout.table('atom_encoder')} is {hidden} wide but "
            f"{layout.table('spatial_pos_encoder')} has {heads} heads: the width must be a "
            "multiple of the heads"
        )
    prefix = f"{layout.layers}."
    indices = {int(i) for k in state if k.startswith(prefix) and (i := k[len(prefix) :].split(".")[0]).isdigit()}
    head_out = f"{layout.head_parts['head.out' if layout.head == 'v2' else 'head']}.weight"  # rows: the outputs
    fc1, out = state.get(f"{layout.module(0, 'fc1')}.weight"), state.get(head_out)
    dims = dict(
        num_layers=max(indices) + 1 if indices else 0,
        hidden_dim=hidden,
        ffn_dim=fc1.shape[0] if fc1 is not None and fc1.dim() == 2 else hidden,
        num_heads=heads,
        num_outputs=out.shape[0] if out is not None and out.dim() == 2 else 1,
    )
    evidence = {
        "num_layers": f"layers under {layout.layers}",
        "hidden_dim": f"the width of {layout.table('atom_encoder')}",
        "ffn_dim": f"the rows of {layout.module(0, 'fc1')}.weight",
        "num_heads": f"the width of {layout.table('spatial_pos_encoder')}",
        "num_outputs": f"the rows of {head_out}",
    }
    for name, what in evidence.items():
        claim = getattr(declared, name)
        if claim is not None and claim.value != dims[name]:
            raise ConversionError(f"{claim}, but the weights have {dims[name]} ({what})")
    if declared.activation is not None and declared.activation.value != "gelu":
        raise ConversionError(f"{declared.activation}: only gelu is supported (the activation of our layers and head)")
    multi_hop = _present_as_declared(
        state,
        layout.table("edge_dis_encoder"),
        declared.edge_type,
        lambda value: value == "multi_hop",
        "only with edge_type multi_hop",
        layout,
    )
    layer_norm = layout.layer_norm
    if layer_norm is None:
        pre = _present_as_declared(
            state, layout.pre_layernorm_marker, declared.pre_layernorm, bool, "only with pre_layernorm", layout
        )
        layer_norm = "pre" if pre else "post"
    embedding_norm = layout.embedding_norm is not None and _present_as_declared(
        state,
        f"{layout.embedding_norm}.weight",
        declared.embedding_norm,
        bool,
        "only with encoder_normalize_before",
        layout,
    )
    return Architecture(**dims, multi_hop=multi_hop, layer_norm=layer_norm, embedding_norm=embedding_norm)


def _plan(layout: Layout, arch: Architecture) -> tuple[dict[str, Shape], dict[str, str]]:
    """Every source key with its expected shape (None: any size), and ours -> theirs for the tensors copied
    as they are (every Linear and LayerNorm but q/k/v, which :func:`_attention_inputs` fuses)."""
    hidden, ffn, heads = arch.hidden_dim, arch.ffn_dim, arch.num_heads
    shapes: dict[str, Shape] = {layout.table(t): (None, hidden) for t in NODE_TABLES[:3]}
    shapes.update(
        {
            layout.table("graph_token"): (1, hidden),
            layout.table("edge_encoder"): (None, heads),
            layout.table("spatial_pos_encoder"): (None, heads),
            layout.table("graph_token_virtual_distance"): (1, heads),
        }
    )
    if arch.multi_hop:
        shapes[layout.table("edge_dis_encoder")] = (None, 1)
    if layout.head_bias is not None:
        shapes[layout.head_bias] = (1,)
    modules: list[tuple[str, Shape, str | None, bool]] = []  # (theirs, weight shape, ours, whether it has a bias)
    for i in range(arch.num_layers):
        parts = [
            ("q", (hidden, hidden), None),
            ("k", (hidden, hidden), None),
            ("v", (hidden, hidden), None),
            ("out", (hidden, hidden), "attention.out"),
            ("attention_norm", (hidden,), "attention_norm"),
            ("ffn_norm", (hidden,), "ffn_norm"),
            ("fc1", (ffn, hidden), "ffn.0"),
            ("fc2", (hidden, ffn), "ffn.3"),
        ]
        modules += [
            (layout.module(i, part), shape, f"layers.{i}.{ours}" if ours else None, True) for part, shape, ours in parts
        ]
    if arch.embedding_norm:
        modules.append((layout.embedding_norm, (hidden,), "embedding_norm", True))
    if layout.final_norm is not None:
        modules.append((layout.final_norm, (hidden,), "final_norm", True))
    head = (
        {"head": (arch.num_outputs, hidden)}
        if layout.head == "linear"
        else {"head.transform": (hidden, hidden), "head.norm": (hidden,), "head.out": (arch.num_outputs, hidden)}
    )
    modules += [(layout.head_parts[ours], shape, ours, ours != "head.out") for ours, shape in head.items()]
    copies = {"graph_token.weight": layout.table("graph_token")}
    for theirs, weight, ours, bias in modules:
        for parameter, shape in (("weight", weight), ("bias", weight[:1]))[: 1 + bias]:
            shapes[f"{theirs}.{parameter}"] = shape
            if ours is not None:
                copies[f"{ours}.{parameter}"] = f"{theirs}.{parameter}"
    return shapes, copies


def _check_keys_and_shapes(state: Mapping[str, torch.Tensor], layout: Layout, shapes: Mapping[str, Shape]) -> list[str]:
    """Refuse missing and unknown keys, then the first misfit shape; returns the keys dropped as never applied."""
    dropped = sorted(k for k in state if k not in shapes and k.startswith(layout.never_applied))
    keys = {
        "missing": [k for k in shapes if k not in state],
        "unknown": sorted(k for k in state if k not in shapes and k not in dropped),
    }
    problems = [f"{kind} keys: {', '.join(listed)}" for kind, listed in keys.items() if listed]
    if problems:
        raise ConversionError(
            f"not a Graphormer checkpoint in the {layout.name} layout we can map: {'; '.join(problems)}"
        )
    for key, expected in shapes.items():
        actual = tuple(state[key].shape)
        if len(actual) != len(expected) or any(e is not None and e != a for e, a in zip(expected, actual)):
            raise ConversionError(f"{layout.name} {key} has shape {_shape(actual)}, expected {_shape(expected)}")
    return dropped


def _check_tables(state: Mapping[str, torch.Tensor], layout: Layout, declared: Declared, arch: Architecture) -> None:
    heads = arch.num_heads
    in_degree, out_degree = layout.table("in_degree_encoder"), layout.table("out_degree_encoder")
    rows = state[in_degree].shape[0]
    if rows < 2:
        raise ConversionError(
            f"{layout.name} {in_degree} has shape {_shape(state[in_degree].shape)}, expected at "
            "least 2 rows (padding and degree 0)"
        )
    if state[out_degree].shape[0] != rows:
        raise ConversionError(
            f"{layout.name} {out_degree} has shape {_shape(state[out_degree].shape)}, expected "
            f"{_shape((rows, arch.hidden_dim))} like {in_degree} (one max_degree here)"
        )
    dis = layout.table("edge_dis_encoder")
    if arch.multi_hop and state[dis].shape[0] % (heads * heads):
        raise ConversionError(
            f"{layout.name} {dis} has shape {_shape(state[dis].shape)}, expected (k * {heads * heads}"
            f", 1): whole {heads} x {heads} hop matrices"
        )
    rows_of = {
        "atom_encoder": (declared.num_atoms, lambda n: n + 1),
        "edge_encoder": (declared.num_edges, lambda n: n + 1),
        "in_degree_encoder": (declared.num_in_degree, int),
        "out_degree_encoder": (declared.num_out_degree, int),
        "spatial_pos_encoder": (declared.num_spatial, int),
    }
    if arch.multi_hop:
        rows_of["edge_dis_encoder"] = (declared.num_edge_dis, lambda n: n * heads * heads)
    for table, (claim, rows_for) in rows_of.items():
        key = layout.table(table)
        if claim is not None and state[key].shape[0] != rows_for(claim.value):
            raise ConversionError(
                f"{layout.name} {key} has shape {_shape(state[key].shape)}, expected "
                f"{rows_for(claim.value)} rows ({claim})"
            )


def _feature_table(
    state: Mapping[str, torch.Tensor], layout: Layout, table: str, vocab: Sequence[int], shift: int
) -> torch.Tensor:
    """Our categorical table: row 0 padding (zero), then their row ``512 f + v + shift`` for value v of column f.

    Shapes:
        their table (R, W) -> (1 + sum(vocab), W).
    """
    key = layout.table(table)
    if any(v > OFFICIAL_FEATURE_OFFSET for v in vocab):
        raise ConversionError(
            f"{key}: official tables hold at most {OFFICIAL_FEATURE_OFFSET} values per column, the "
            f"vocabulary is {list(vocab)}"
        )
    rows = [PAD_ID] + [OFFICIAL_FEATURE_OFFSET * f + v + shift for f, size in enumerate(vocab) for v in range(size)]
    if max(rows) >= state[key].shape[0]:
        raise ConversionError(
            f"{layout.name} {key} has {state[key].shape[0]} rows, but our featurisation needs row "
            f"{max(rows)}: the checkpoint was trained on other features (check --node_vocab / "
            "--edge_vocab)"
        )
    features = state[key][rows]  # a copy
    features[PAD_ID] = 0.0
    return features


def _relations(
    state: Mapping[str, torch.Tensor], layout: Layout, declared: Declared
) -> tuple[dict[str, int | None], torch.Tensor]:
    """Our distance settings and relation table B: padding, the graph token, their row ``d + 1`` for distance d, and
    row 511 for unreachable pairs when nothing masks; a smaller table (v1.0 ZINC: 40 rows) is masked at its end.

    Shapes:
        spatial_pos_encoder: (R, H), graph_token_virtual_distance: (1, H) -> table (num_relations, H).
    """
    key = layout.table("spatial_pos_encoder")
    spatial, virtual = state[key], state[layout.table("graph_token_virtual_distance")]
    claim = declared.spatial_pos_max
    limit = claim.value if claim is not None else OFFICIAL_SPATIAL_POS_MAX
    if limit < 1:
        raise ConversionError(f"{claim}: masks every pair (official masks distance >= spatial_pos_max)")
    rows = spatial.shape[0]
    if limit > OFFICIAL_UNREACHABLE_DISTANCE and rows > OFFICIAL_UNREACHABLE_ROW:
        distance: dict[str, int | None] = dict(spatial_pos_max=None, max_distance=MAX_STORED_DISTANCE)
        spd_rows = [d + 1 for d in range(MAX_STORED_DISTANCE + 1)] + [OFFICIAL_UNREACHABLE_ROW]
    else:
        masked = min(limit, MAX_SPATIAL_POS_MAX, rows - 1)
        if masked < 1:
            raise ConversionError(
                f"{layout.name} {key} has shape {_shape(spatial.shape)}, expected at least 2 rows "
                "(padding and distance 0)"
            )
        distance = dict(spatial_pos_max=masked, max_distance=None)
        spd_rows = [d + 1 for d in range(masked)]
    table = torch.cat([spatial.new_zeros(1, spatial.shape[1]), virtual, spatial[spd_rows]])
    table[PAD_RELATION] = 0.0
    return distance, table


def _hop_matrices(
    state: Mapping[str, torch.Tensor], layout: Layout, declared: Declared, heads: int
) -> tuple[int, torch.Tensor]:
    """Hops K and the first K of ``edge_dis_encoder``'s H x H hop matrices.

    Shapes:
        edge_dis_encoder (M H^2, 1) -> hop_weight (K, H, H).
    """
    claim = declared.multi_hop_max_dist
    hops = claim.value if claim is not None else OFFICIAL_MULTI_HOP_MAX_DIST
    if hops < 1:
        raise ConversionError(
            f"{claim}: official then uses every hop of the longest path in the batch (predictions "
            "depend on the batch); we need 1 or more"
        )
    dis = layout.table("edge_dis_encoder")
    matrices = state[dis].reshape(-1, heads, heads)
    if hops > matrices.shape[0]:
        raise ConversionError(
            f"{claim or f'multi_hop_max_dist {hops}'} exceeds the {matrices.shape[0]} hop "
            f"matrices of {layout.name} {dis} (shape {_shape(state[dis].shape)})"
        )
    return hops, matrices[:hops].clone()


def _attention_inputs(state: Mapping[str, torch.Tensor], layout: Layout, arch: Architecture) -> dict[str, torch.Tensor]:
    """Our fused ``attention.qkv`` per layer: their q, k and v projections, concatenated.

    Shapes:
        q, k, v weights (H*D, H*D) and biases (H*D,) -> qkv weight (3 H*D, H*D), bias (3 H*D,).
    """
    return {
        f"layers.{i}.attention.qkv.{parameter}": torch.cat(
            [state[f"{layout.module(i, part)}.{parameter}"] for part in "qkv"]
        )
        for i in range(arch.num_layers)
        for parameter in ("weight", "bias")
    }


def _warn_about_padding_rows(state: Mapping[str, torch.Tensor], layout: Layout) -> None:
    """Padding rows are zero here; say how large the dropped ones were."""
    tables = ("atom_encoder", "edge_encoder", "spatial_pos_encoder", "in_degree_encoder", "out_degree_encoder")
    padding = {
        name: float(state[layout.table(name)][0].abs().max()) for name in tables if state[layout.table(name)][0].any()
    }
    if padding:
        log.warning(
            "%s padding rows are not zero (%s); they are zero here. Predictions of the source model with the "
            "edge table's padding row != 0 depend on the longest path in the batch",
            layout.name,
            ", ".join(f"{k}: max |w| {v:.3g}" for k, v in padding.items()),
        )
