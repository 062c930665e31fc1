"""Importing official Graphormer checkpoints (``graphormer_urpe.convert.official``), generated here with
random weights in the official key names and shapes and saved in the layouts the official code writes:
fairseq's trainer (v2: ``args`` None, ``cfg['model']`` a Namespace of every argument, ``cfg['task']``
the task's dict), older fairseq (``args``) and PyTorch Lightning 1.3 (v1.0: ``hyper_parameters``).
The imported model run through our pipeline equals the same weights in our own layout bit for bit,
matches a re-implementation of the official forward on molecules, reads every hyper-parameter from
where its format stores it, refuses every malformed file in one line, and starts RPE or URPE (C = 1)
fine-tuning with identical predictions."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from graphormer_urpe.commands.__main__ import main
from graphormer_urpe.convert.common import ConversionError
from graphormer_urpe.convert.mapping import Declared, convert_weights
from graphormer_urpe.convert.official import V1, V2, import_official, read_official
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.data.safe_load import OFFICIAL_NODE_TABLES
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.model.graphormer import Graphormer
from graphormer_urpe.run.checkpoints import CONFIG_KEY
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.testing.commands import refusal
from graphormer_urpe.testing.official_checkpoints import (
    FFN,
    FORMATS,
    HEADS,
    HIDDEN,
    LAYERS,
    official_checkpoint,
    official_weights,
    save_official,
)
from graphormer_urpe.testing.official_reference import ULPS, molecules, official_batch
from graphormer_urpe.testing.runs import start_from
from graphormer_urpe.testing.tolerance import rounding_tolerance


def version_of(fmt: str) -> str:
    return "v1" if fmt == "lightning" else "v2"


# ----------------------------------------------------------------------------- equal to the official model
def official_forward(
    w: dict[str, torch.Tensor],
    batch: dict[str, torch.Tensor],
    version: str,
    num_heads: int,
    num_layers: int,
    multi_hop_max_dist: int,
    pre_layernorm: bool = False,
) -> torch.Tensor:
    """The official model's graph-token prediction (eval mode, multi_hop), transcribed from v2 ``graphormer_layers.py``,
    ``graphormer_graph_encoder(_layer).py`` and ``models/graphormer.py``, and v1.0 ``model.py``."""
    F = torch.nn.functional
    if version == "v2":
        node, bias, layer = (
            "encoder.graph_encoder.graph_node_feature.",
            "encoder.graph_encoder.graph_attn_bias.",
            "encoder.graph_encoder.layers.{}.",
        )
        names = dict(
            q="self_attn.q_proj",
            k="self_attn.k_proj",
            v="self_attn.v_proj",
            o="self_attn.out_proj",
            ln1="self_attn_layer_norm",
            ln2="final_layer_norm",
            fc1="fc1",
            fc2="fc2",
        )
    else:
        node, bias, layer = "", "", "layers.{}."
        names = dict(
            q="self_attention.linear_q",
            k="self_attention.linear_k",
            v="self_attention.linear_v",
            o="self_attention.output_layer",
            ln1="self_attention_norm",
            ln2="ffn_norm",
            fc1="ffn.layer1",
            fc2="ffn.layer2",
        )
    x, spatial_pos, edge_input = batch["x"], batch["spatial_pos"], batch["edge_input"]
    n_graph, n_node = x.shape[:2]
    hidden = w[f"{node}atom_encoder.weight"].shape[1]

    def lin(name: str, t: torch.Tensor) -> torch.Tensor:
        return F.linear(t, w[f"{name}.weight"], w.get(f"{name}.bias"))

    def ln(name: str, t: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(t, (hidden,), w[f"{name}.weight"], w[f"{name}.bias"], 1e-5)

    # GraphAttnBias
    graph_attn_bias = batch["attn_bias"].clone().unsqueeze(1).repeat(1, num_heads, 1, 1)
    spatial_bias = F.embedding(spatial_pos, w[f"{bias}spatial_pos_encoder.weight"])  # (B, N, N, H)
    graph_attn_bias[:, :, 1:, 1:] += spatial_bias.permute(0, 3, 1, 2)
    t = w[f"{bias}graph_token_virtual_distance.weight"].view(1, num_heads, 1)
    graph_attn_bias[:, :, 1:, 0] += t
    graph_attn_bias[:, :, 0, :] += t
    spatial_pos_ = spatial_pos.clone()
    spatial_pos_[spatial_pos_ == 0] = 1
    spatial_pos_ = torch.where(spatial_pos_ > 1, spatial_pos_ - 1, spatial_pos_).clamp(0, multi_hop_max_dist)
    edge_input = edge_input[:, :, :, :multi_hop_max_dist, :]
    edge = F.embedding(edge_input, w[f"{bias}edge_encoder.weight"]).mean(-2)  # (B, N, N, D, H)
    max_dist = edge.shape[-2]
    flat = edge.permute(3, 0, 1, 2, 4).reshape(max_dist, -1, num_heads)
    flat = torch.bmm(flat, w[f"{bias}edge_dis_encoder.weight"].reshape(-1, num_heads, num_heads)[:max_dist])
    edge = flat.reshape(max_dist, n_graph, n_node, n_node, num_heads).permute(1, 2, 3, 0, 4)
    edge = (edge.sum(-2) / spatial_pos_.float().unsqueeze(-1)).permute(0, 3, 1, 2)
    graph_attn_bias[:, :, 1:, 1:] += edge
    graph_attn_bias = graph_attn_bias + batch["attn_bias"].unsqueeze(1)

    # GraphNodeFeature
    h = F.embedding(x, w[f"{node}atom_encoder.weight"]).sum(-2)
    h = h + F.embedding(batch["in_degree"], w[f"{node}in_degree_encoder.weight"])
    h = h + F.embedding(batch["in_degree"], w[f"{node}out_degree_encoder.weight"])  # both official versions
    h = torch.cat([w[f"{node}graph_token.weight"].unsqueeze(0).repeat(n_graph, 1, 1), h], 1)
    if version == "v2" and "encoder.graph_encoder.emb_layer_norm.weight" in w:
        h = ln("encoder.graph_encoder.emb_layer_norm", h)
    pre = version == "v1" or pre_layernorm
    head_dim = hidden // num_heads
    padding = torch.cat([torch.zeros(n_graph, 1, dtype=torch.bool), x[:, :, 0] == 0], 1)
    for i in range(num_layers):
        p = layer.format(i)
        y = ln(p + names["ln1"], h) if pre else h
        q = lin(p + names["q"], y).view(n_graph, -1, num_heads, head_dim).transpose(1, 2) * head_dim**-0.5
        k = lin(p + names["k"], y).view(n_graph, -1, num_heads, head_dim).transpose(1, 2)
        v = lin(p + names["v"], y).view(n_graph, -1, num_heads, head_dim).transpose(1, 2)
        scores = q @ k.transpose(2, 3) + graph_attn_bias
        if version == "v2":
            scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        y = lin(p + names["o"], y.transpose(1, 2).reshape(n_graph, -1, hidden))
        h = h + y if pre else ln(p + names["ln1"], h + y)
        y = ln(p + names["ln2"], h) if pre else h
        y = lin(p + names["fc2"], F.gelu(lin(p + names["fc1"], y)))
        h = h + y if pre else ln(p + names["ln2"], h + y)
    if version == "v1":
        h = ln("final_ln", h)
        head = "out_proj" if "out_proj.weight" in w else "downstream_out_proj"
        return lin(head, h[:, 0])
    h = ln("encoder.layer_norm", F.gelu(lin("encoder.lm_head_transform_weight", h)))
    logits = F.linear(h, w["encoder.embed_out.weight"]) + w["encoder.lm_output_learned_bias"]
    return logits[:, 0, :]  # the graph token, as the criteria take it (v2 criterions/l1_loss.py)


VARIANTS = [("lightning", False), ("fairseq", False), ("fairseq", True)]


@pytest.mark.parametrize("fmt,pre_layernorm", VARIANTS, ids=["v1.0", "v2-postLN", "v2-preLN"])
def test_imported_model_predicts_what_the_official_forward_predicts(
    tmp_path: Path, fmt: str, pre_layernorm: bool
) -> None:
    version = version_of(fmt)
    weights = official_weights(version, pre_layernorm)
    source = save_official(tmp_path / "official.pt", fmt, weights, pre_layernorm=pre_layernorm)
    config = import_official(source, tmp_path / "ours.ckpt")
    if version == "v1":
        expected_variant = ("pre", False, True, "linear")
    else:
        expected_variant = ("pre" if pre_layernorm else "post", True, False, "v2")
    assert (config.layer_norm, config.embedding_norm, config.final_norm, config.head) == expected_variant
    assert (config.num_layers, config.hidden_dim, config.ffn_dim, config.num_heads) == (LAYERS, HIDDEN, FFN, HEADS)
    assert (config.spatial_pos_max, config.max_distance, config.max_degree) == (None, 254, 510)

    task = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    graphs, batch = molecules()
    with torch.no_grad():
        ours = task(batch)
        official = official_forward(
            weights,
            official_batch(graphs, multi_hop_max_dist=5),
            version,
            HEADS,
            LAYERS,
            multi_hop_max_dist=5,
            pre_layernorm=pre_layernorm,
        )
    torch.testing.assert_close(ours, official, **rounding_tolerance(ours, official, ulps=ULPS))
    # the path order matters on these molecules: our default paths give another prediction
    with torch.no_grad():
        other = task(molecules("smallest_next")[1])
    assert (other - official).abs().max() > 10 * rounding_tolerance(other, official, ulps=ULPS)["atol"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_model_trained_with_other_distances_predicts_what_official_predicts(tmp_path: Path, fmt: str) -> None:
    """The bug of issue 22: a v2 checkpoint trained with ``multi_hop_max_dist 3`` (and here masking at
    distance 3) imported with the defaults 5 and 1024 and predicted 0.0115 off."""
    version = version_of(fmt)
    weights = official_weights(version)
    settings = dict(multi_hop_max_dist=3) if fmt == "lightning" else dict(multi_hop_max_dist=3, spatial_pos_max=3)
    source = save_official(tmp_path / "official.pt", fmt, weights, **settings)
    options = dict(spatial_pos_max=3) if fmt == "lightning" else {}  # v1.0 keeps it in the datamodule, unsaved
    config = import_official(source, tmp_path / "ours.ckpt", **options)
    assert (config.multi_hop_max_dist, config.spatial_pos_max, config.max_distance) == (3, 3, None)
    task = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    graphs, batch = molecules()
    with torch.no_grad():
        ours = task(batch)
        official = official_forward(
            weights,
            official_batch(graphs, multi_hop_max_dist=3, spatial_pos_max=3),
            version,
            HEADS,
            LAYERS,
            multi_hop_max_dist=3,
        )
        defaults = official_forward(
            weights, official_batch(graphs, multi_hop_max_dist=5), version, HEADS, LAYERS, multi_hop_max_dist=5
        )
    torch.testing.assert_close(ours, official, **rounding_tolerance(ours, official, ulps=ULPS))
    # the settings matter on these molecules: far more than rounding apart
    assert (official - defaults).abs().max() > 10 * rounding_tolerance(official, defaults, ulps=ULPS)["atol"]


def to_official(model: Graphormer, version: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Our weights in the official layout (the inverse mapping, written independently of the importer);
    rows that our featurisation never reaches are random."""
    w = official_weights(version, pre_layernorm=model.config.layer_norm == "pre" and version == "v2", seed=seed)
    node, bias = (
        ("encoder.graph_encoder.graph_node_feature.", "encoder.graph_encoder.graph_attn_bias.")
        if version == "v2"
        else ("", "")
    )
    ours = model.state_dict()
    atom = w[f"{node}atom_encoder.weight"]
    row = 1
    for f, size in enumerate(ATOM_VOCAB):
        atom[512 * f + 2 : 512 * f + 2 + size] = ours["nodes.features.weight"][row : row + size]
        row += size
    edge = w[f"{bias}edge_encoder.weight"]
    row = 1
    for f, size in enumerate(BOND_VOCAB):
        edge[512 * f + 3 : 512 * f + 3 + size] = ours["edge_bias.features.weight"][row : row + size]
        row += size
    w[f"{node}in_degree_encoder.weight"] = ours["nodes.in_degree.weight"].clone()
    w[f"{node}out_degree_encoder.weight"] = ours["nodes.out_degree.weight"].clone()
    w[f"{node}graph_token.weight"] = ours["graph_token.weight"].clone()
    relations = ours["relative_bias.table.weight"]
    w[f"{bias}graph_token_virtual_distance.weight"] = relations[1:2].clone()
    w[f"{bias}spatial_pos_encoder.weight"][1:256] = relations[2:257]
    w[f"{bias}spatial_pos_encoder.weight"][511] = relations[257]
    w[f"{bias}edge_dis_encoder.weight"].view(-1, HEADS, HEADS)[:5] = ours["edge_bias.hop_weight"]
    prefix = "layers.{}." if version == "v1" else "encoder.graph_encoder.layers.{}."
    names = (
        dict(
            q="self_attention.linear_q",
            k="self_attention.linear_k",
            v="self_attention.linear_v",
            o="self_attention.output_layer",
            ln1="self_attention_norm",
            ln2="ffn_norm",
            fc1="ffn.layer1",
            fc2="ffn.layer2",
        )
        if version == "v1"
        else dict(
            q="self_attn.q_proj",
            k="self_attn.k_proj",
            v="self_attn.v_proj",
            o="self_attn.out_proj",
            ln1="self_attn_layer_norm",
            ln2="final_layer_norm",
            fc1="fc1",
            fc2="fc2",
        )
    )
    for i in range(LAYERS):
        p = prefix.format(i)
        for part in ("weight", "bias"):
            for j, key in enumerate("qkv"):
                w[f"{p}{names[key]}.{part}"] = ours[f"layers.{i}.attention.qkv.{part}"][j * HIDDEN : (j + 1) * HIDDEN]
            for mine, theirs in (
                ("attention.out", "o"),
                ("attention_norm", "ln1"),
                ("ffn_norm", "ln2"),
                ("ffn.0", "fc1"),
                ("ffn.3", "fc2"),
            ):
                w[f"{p}{names[theirs]}.{part}"] = ours[f"layers.{i}.{mine}.{part}"]
    for part in ("weight", "bias"):
        if version == "v1":
            w[f"final_ln.{part}"], w[f"out_proj.{part}"] = ours[f"final_norm.{part}"], ours[f"head.{part}"]
        else:
            w[f"encoder.graph_encoder.emb_layer_norm.{part}"] = ours[f"embedding_norm.{part}"]
            w[f"encoder.lm_head_transform_weight.{part}"] = ours[f"head.transform.{part}"]
            w[f"encoder.layer_norm.{part}"] = ours[f"head.norm.{part}"]
    if version == "v2":
        w["encoder.embed_out.weight"], w["encoder.lm_output_learned_bias"] = ours["head.out.weight"], ours["head.bias"]
    return w


@pytest.mark.parametrize("fmt,pre_layernorm", VARIANTS, ids=["v1.0", "v2-postLN", "v2-preLN"])
def test_imported_weights_equal_our_layout_bit_for_bit(tmp_path: Path, fmt: str, pre_layernorm: bool) -> None:
    version = version_of(fmt)
    weights = official_weights(version, pre_layernorm, seed=5)
    converted = convert_weights(
        weights, V1 if version == "v1" else V2, Declared(), node_vocab=ATOM_VOCAB, edge_vocab=BOND_VOCAB
    )
    ours = Graphormer(converted.config).eval()  # the same architecture with other (random) weights in our layout
    with torch.no_grad():
        generator = torch.Generator().manual_seed(3)
        for name, tensor in ours.state_dict().items():
            tensor.copy_(torch.randn(tensor.shape, generator=generator))
            if name in (
                "nodes.features.weight",
                "nodes.in_degree.weight",
                "nodes.out_degree.weight",
                "edge_bias.features.weight",
                "relative_bias.table.weight",
            ):
                tensor[0] = 0.0  # padding rows
    source = save_official(tmp_path / "official.pt", fmt, to_official(ours, version), pre_layernorm=pre_layernorm)
    import_official(source, tmp_path / "ours.ckpt")
    imported = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    for name, tensor in ours.state_dict().items():
        assert torch.equal(imported.model.state_dict()[name], tensor), name
    _, batch = molecules()
    with torch.no_grad():
        assert torch.equal(imported(batch), ours(batch))


# ----------------------------------------------------------------------------- every setting, where it is stored
#: (formats, official name, value, weights to match, the config field it sets and the value it must take).
SETTINGS = [
    (FORMATS, "multi_hop_max_dist", 3, {}, "multi_hop_max_dist", 3),
    (FORMATS[:3], "spatial_pos_max", 20, {}, "spatial_pos_max", 20),
    (FORMATS[:3], "spatial_pos_max", 300, {}, "spatial_pos_max", 255),  # we store distances up to 254
    (FORMATS, "edge_type", "single_hop", dict(multi_hop=False), "edge_encoding", "single_hop"),
    (FORMATS[:3], "pre_layernorm", True, dict(pre_layernorm=True), "layer_norm", "pre"),
    (FORMATS[:3], "encoder_normalize_before", False, dict(embedding_norm=False), "embedding_norm", False),
    (FORMATS[:3], "dropout", 0.2, {}, "dropout", 0.2),
    (FORMATS[:3], "dropout", 0.2, {}, "input_dropout", 0.2),  # v2 applies the one rate after emb_layer_norm too
    (FORMATS[:3], "attention_dropout", 0.25, {}, "attention_dropout", 0.25),
    (FORMATS[:3], "act_dropout", 0.15, {}, "activation_dropout", 0.15),
    (["lightning"], "dropout_rate", 0.2, {}, "dropout", 0.2),
    (["lightning"], "attention_dropout_rate", 0.25, {}, "attention_dropout", 0.25),
    (["lightning"], "intput_dropout_rate", 0.3, {}, "input_dropout", 0.3),
]


@pytest.mark.parametrize(
    "fmt,name,value,weights,field,expected",
    [
        pytest.param(fmt, name, value, weights, field, expected, id=f"{fmt}-{name}-{field}")
        for formats, name, value, weights, field, expected in SETTINGS
        for fmt in formats
    ],
)
def test_every_setting_is_read_where_the_format_stores_it(
    tmp_path: Path, fmt: str, name: str, value: Any, weights: dict[str, bool], field: str, expected: Any
) -> None:
    source = save_official(tmp_path / "official.pt", fmt, official_weights(version_of(fmt), **weights), **{name: value})
    assert getattr(import_official(source, tmp_path / "ours.ckpt"), field) == expected
    if not weights:  # the same weights without the setting give another value: the setting decided
        other = save_official(tmp_path / "default.pt", fmt, official_weights(version_of(fmt)))
        assert getattr(import_official(other, tmp_path / "default.ckpt"), field) != expected


def test_v1_dataset_name_picks_the_head(tmp_path: Path) -> None:
    """v1.0 builds ``out_proj`` for PCQM4M-LSC and ``downstream_out_proj`` for every other dataset."""
    weights = official_weights("v1", head="downstream_out_proj")
    source = save_official(tmp_path / "hiv.ckpt", "lightning", weights, dataset_name="ogbg-molhiv")
    import_official(source, tmp_path / "ours.ckpt")
    state = torch.load(tmp_path / "ours.ckpt", weights_only=True)["state_dict"]
    assert torch.equal(state["model.head.weight"], weights["downstream_out_proj.weight"])
    source = save_official(tmp_path / "pcq.ckpt", "lightning", weights, dataset_name="PCQM4M-LSC")
    with pytest.raises(
        ConversionError,
        match=r"missing keys: out_proj\.weight, out_proj\.bias; unknown keys: "
        r"downstream_out_proj\.bias, downstream_out_proj\.weight$",
    ):
        import_official(source, tmp_path / "other.ckpt")


#: (formats, official name, value, weights, message): settings the weights contradict, or we cannot express.
REFUSED = [
    (
        FORMATS[:3],
        "encoder_layers",
        3,
        {},
        r"encoder_layers'?\]? = 3, but the weights have 2 \(layers under "
        r"encoder\.graph_encoder\.layers\)$",
    ),
    (
        FORMATS[:3],
        "encoder_embed_dim",
        32,
        {},
        r"encoder_embed_dim'?\]? = 32, but the weights have 16 \(the width of "
        r"encoder\.graph_encoder\.graph_node_feature\.atom_encoder\.weight\)$",
    ),
    (
        FORMATS[:3],
        "encoder_ffn_embed_dim",
        32,
        {},
        r"= 32, but the weights have 24 \(the rows of "
        r"encoder\.graph_encoder\.layers\.0\.fc1\.weight\)$",
    ),
    (
        FORMATS[:3],
        "encoder_attention_heads",
        8,
        {},
        r"= 8, but the weights have 4 \(the width of "
        r"encoder\.graph_encoder\.graph_attn_bias\.spatial_pos_encoder",
    ),
    (
        FORMATS[:3],
        "num_classes",
        3,
        {},
        r"num_classes'?\]? = 3, but the weights have 1 \(the rows of "
        r"encoder\.embed_out\.weight\)$",
    ),
    (
        ["lightning"],
        "n_layers",
        3,
        {},
        r"hyper_parameters\['n_layers'\] = 3, but the weights have 2 \(layers under "
        r"layers\)$",
    ),
    (["lightning"], "hidden_dim", 32, {}, r"hyper_parameters\['hidden_dim'\] = 32, but the weights have 16"),
    (["lightning"], "ffn_dim", 32, {}, r"hyper_parameters\['ffn_dim'\] = 32, but the weights have 24"),
    (["lightning"], "num_heads", 8, {}, r"hyper_parameters\['num_heads'\] = 8, but the weights have 4"),
    (
        FORMATS,
        "edge_type",
        "single_hop",
        {},
        r"edge_type'?\]? = 'single_hop', but the file holds \S*edge_dis_encoder"
        r"\.weight, which official v\S+ builds only with edge_type multi_hop$",
    ),
    (
        FORMATS,
        "edge_type",
        "multi_hop",
        dict(multi_hop=False),
        r"edge_type'?\]? = 'multi_hop', but the file has no "
        r"\S*edge_dis_encoder\.weight",
    ),
    (
        FORMATS[:3],
        "pre_layernorm",
        True,
        {},
        r"pre_layernorm'?\]? = True, but the file has no encoder\.graph_encoder"
        r"\.final_layer_norm\.weight, which official v2 builds only with "
        r"pre_layernorm$",
    ),
    (
        FORMATS[:3],
        "encoder_normalize_before",
        False,
        {},
        r"= False, but the file holds encoder\.graph_encoder\."
        r"emb_layer_norm\.weight",
    ),
    (FORMATS[:3], "activation_fn", "relu", {}, r"activation_fn'?\]? = 'relu': only gelu is supported"),
    (
        FORMATS[:3],
        "num_atoms",
        4000,
        {},
        r"atom_encoder\.weight has shape \(4609, 16\), expected 4001 rows \(\S+"
        r"num_atoms'?\]? = 4000\)$",
    ),
    (FORMATS[:3], "num_edges", 1000, {}, r"edge_encoder\.weight has shape \(1537, 4\), expected 1001 rows"),
    (FORMATS[:3], "num_in_degree", 64, {}, r"in_degree_encoder\.weight has shape \(512, 16\), expected 64 rows"),
    (FORMATS[:3], "num_out_degree", 64, {}, r"out_degree_encoder\.weight has shape \(512, 16\), expected 64 rows"),
    (FORMATS[:3], "num_spatial", 40, {}, r"spatial_pos_encoder\.weight has shape \(512, 4\), expected 40 rows"),
    (FORMATS[:3], "num_edge_dis", 40, {}, r"edge_dis_encoder\.weight has shape \(2048, 1\), expected 640 rows"),
    (
        FORMATS,
        "multi_hop_max_dist",
        0,
        {},
        r"multi_hop_max_dist'?\]? = 0: official then uses every hop of the "
        r"longest path in the batch",
    ),
    (
        FORMATS,
        "multi_hop_max_dist",
        129,
        {},
        r"multi_hop_max_dist'?\]? = 129 exceeds the 128 hop matrices of "
        r"official v\S+ \S*edge_dis_encoder\.weight \(shape \(2048, 1\)\)$",
    ),
    (FORMATS[:3], "spatial_pos_max", 0, {}, r"spatial_pos_max'?\]? = 0: masks every pair"),
    (FORMATS[:3], "spatial_pos_max", "far", {}, r"spatial_pos_max'?\]? = 'far': expected int$"),
]


@pytest.mark.parametrize(
    "fmt,name,value,weights,message",
    [
        pytest.param(fmt, name, value, weights, message, id=f"{fmt}-{name}-{value}")
        for formats, name, value, weights, message in REFUSED
        for fmt in formats
    ],
)
def test_settings_the_weights_contradict_are_refused(
    tmp_path: Path, fmt: str, name: str, value: Any, weights: dict[str, bool], message: str
) -> None:
    source = save_official(tmp_path / "official.pt", fmt, official_weights(version_of(fmt), **weights), **{name: value})
    with pytest.raises(ConversionError, match=message):
        import_official(source, tmp_path / "ours.ckpt")
    assert not (tmp_path / "ours.ckpt").exists() and not (tmp_path / "ours.yaml").exists()


def test_the_places_a_fairseq_file_stores_a_setting_must_agree(tmp_path: Path) -> None:
    """The collator reads ``cfg['task']``, the model its copy in ``cfg['model']``."""
    checkpoint = official_checkpoint("fairseq", official_weights("v2"), multi_hop_max_dist=3)
    checkpoint["cfg"]["model"].multi_hop_max_dist = 4
    torch.save(checkpoint, tmp_path / "official.pt")
    with pytest.raises(
        ConversionError,
        match=r"^cfg\['task'\]\['multi_hop_max_dist'\] = 3 but cfg\['model'\]\."
        r"multi_hop_max_dist = 4: the collator and the model were built with "
        r"different values$",
    ):
        import_official(tmp_path / "official.pt", tmp_path / "ours.ckpt")


def test_command_line_settings_fill_in_what_the_file_does_not_store(tmp_path: Path) -> None:
    bare = tmp_path / "bare.pt"
    torch.save({"model": official_weights("v2")}, bare)  # weights only: nothing stored
    config = import_official(bare, tmp_path / "a.ckpt", multi_hop_max_dist=2, spatial_pos_max=7)
    assert (config.multi_hop_max_dist, config.spatial_pos_max) == (2, 7)
    assert import_official(bare, tmp_path / "b.ckpt").multi_hop_max_dist == 5  # official's default
    stored = save_official(tmp_path / "stored.pt", "fairseq", official_weights("v2"), multi_hop_max_dist=3)
    assert import_official(stored, tmp_path / "c.ckpt", multi_hop_max_dist=3).multi_hop_max_dist == 3
    with pytest.raises(
        ConversionError,
        match=r"^--multi_hop_max_dist 4: the file stores cfg\['task'\]\["
        r"'multi_hop_max_dist'\] = 3, which its weights were trained with$",
    ):
        import_official(stored, tmp_path / "d.ckpt", multi_hop_max_dist=4)


# ----------------------------------------------------------------------------- malformed files: one line each
def _replace(key: str, tensor: torch.Tensor) -> Callable[[dict[str, torch.Tensor]], None]:
    return lambda w: w.update({key: tensor})


NODE, BIAS, LAYER0 = (
    "encoder.graph_encoder.graph_node_feature.",
    "encoder.graph_encoder.graph_attn_bias.",
    "encoder.graph_encoder.layers.0.",
)
MALFORMED = [  # (edit, message); the ids name the key
    (
        _replace(f"{LAYER0}self_attn.k_proj.weight", torch.zeros(HIDDEN, HIDDEN - 1)),  # was a torch.cat traceback
        rf"^official v2 {LAYER0}self_attn\.k_proj\.weight has shape \(16, 15\), expected \(16, 16\)$",
    ),
    (
        _replace(f"{BIAS}graph_token_virtual_distance.weight", torch.zeros(1, HEADS - 1)),  # was a torch.cat traceback
        rf"^official v2 {BIAS}graph_token_virtual_distance\.weight has shape \(1, 3\), expected \(1, 4\)$",
    ),
    (
        _replace(f"{BIAS}edge_dis_encoder.weight", torch.zeros(30, 1)),  # was a reshape traceback
        rf"^official v2 {BIAS}edge_dis_encoder\.weight has shape \(30, 1\), expected \(k \* 16, 1\): whole 4 x 4 hop "
        r"matrices$",
    ),
    (
        _replace(f"{LAYER0}fc2.weight", torch.zeros(HIDDEN, FFN + 1)),  # named our layers.0.ffn.3.weight before
        rf"^official v2 {LAYER0}fc2\.weight has shape \(16, 25\), expected \(16, 24\)$",
    ),
    (
        _replace(f"{NODE}out_degree_encoder.weight", torch.zeros(300, HIDDEN)),  # named our nodes.out_degree before
        rf"^official v2 {NODE}out_degree_encoder\.weight has shape \(300, 16\), expected \(512, 16\) like "
        rf"{NODE}in_degree_encoder\.weight \(one max_degree here\)$",
    ),
    (
        _replace(f"{LAYER0}self_attn_layer_norm.bias", torch.zeros(HIDDEN + 1)),
        rf"^official v2 {LAYER0}self_attn_layer_norm\.bias has shape \(17,\), expected \(16,\)$",
    ),
    (
        _replace("encoder.lm_output_learned_bias", torch.zeros(2)),
        r"^official v2 encoder\.lm_output_learned_bias has shape \(2,\), expected \(1,\)$",
    ),
    (
        _replace(f"{BIAS}edge_encoder.weight", torch.zeros(1537, HEADS, 1)),
        rf"^official v2 {BIAS}edge_encoder\.weight has shape \(1537, 4, 1\), expected \(\*, 4\)$",
    ),
    (
        _replace(f"{NODE}atom_encoder.weight", torch.zeros(4609)),
        rf"^official v2 {NODE}atom_encoder\.weight has shape \(4609,\), expected \(\*, \*\)$",
    ),
    (
        _replace(f"{BIAS}spatial_pos_encoder.weight", torch.zeros(512, 5)),
        rf"^official v2 {NODE}atom_encoder\.weight is 16 wide but {BIAS}spatial_pos_encoder\.weight has 5 heads: the "
        r"width must be a multiple of the heads$",
    ),
    (
        _replace(f"{NODE}in_degree_encoder.weight", torch.zeros(1, HIDDEN)),
        rf"^official v2 {NODE}in_degree_encoder\.weight has shape \(1, 16\), expected at least 2 rows",
    ),
    (
        _replace(f"{BIAS}spatial_pos_encoder.weight", torch.zeros(1, HEADS)),
        rf"^official v2 {BIAS}spatial_pos_encoder\.weight has shape \(1, 4\), expected at least 2 rows",
    ),
    (
        _replace(f"{NODE}atom_encoder.weight", torch.zeros(100, HIDDEN)),
        rf"^official v2 {NODE}atom_encoder\.weight has 100 rows, but our featurisation needs row "
        rf"{512 * 8 + ATOM_VOCAB[-1] - 1 + 2}",
    ),
    (
        lambda w: w.update({f"{BIAS}edge_foo.weight": torch.zeros(2)}),
        rf"^not a Graphormer checkpoint in the official v2 layout we can map: unknown keys: {BIAS}edge_foo\.weight$",
    ),
    (
        lambda w: w.pop("encoder.graph_encoder.layers.1.fc1.bias"),
        r"^not a Graphormer checkpoint in the official v2 layout we can map: missing keys: "
        r"encoder\.graph_encoder\.layers\.1\.fc1\.bias$",
    ),
    (
        lambda w: w.pop(f"{NODE}atom_encoder.weight"),
        rf"^no {NODE}atom_encoder\.weight: not a Graphormer checkpoint in the official v2 layout$",
    ),
]


@pytest.mark.parametrize(
    "edit,message",
    MALFORMED,
    ids=[
        "qkv-width",
        "virtual-distance-heads",
        "edge-dis-rows",
        "fc2",
        "out-degree-rows",
        "layer-norm",
        "scalar-bias",
        "table-dims",
        "atom-dims",
        "width-vs-heads",
        "degree-rows",
        "spatial-rows",
        "atom-table-small",
        "unknown-key",
        "missing-key",
        "no-anchor",
    ],
)
def test_malformed_weights_are_refused_naming_the_official_key(tmp_path: Path, edit, message: str) -> None:
    """Weights alone (``{"model": ...}``): the table sizes a fairseq ``cfg`` declares are checked first
    (``test_settings_the_weights_contradict_are_refused``)."""
    weights = official_weights("v2")
    edit(weights)
    torch.save({"model": weights}, tmp_path / "official.pt")
    with pytest.raises(ConversionError, match=message):
        import_official(tmp_path / "official.pt", tmp_path / "ours.ckpt")
    assert not (tmp_path / "ours.ckpt").exists()


def test_v1_shapes_are_named_with_v1_keys(tmp_path: Path) -> None:
    weights = official_weights("v1")
    weights["layers.1.self_attention.linear_v.bias"] = torch.zeros(HIDDEN + 2)
    with pytest.raises(
        ConversionError,
        match=r"^official v1\.0 layers\.1\.self_attention\.linear_v\.bias has shape "
        r"\(18,\), expected \(16,\)$",
    ):
        import_official(save_official(tmp_path / "v1.ckpt", "lightning", weights), tmp_path / "ours.ckpt")


# ----------------------------------------------------------------------------- reading files safely
class Trap:
    """Unpickling this would create ``self.path``: the importer must never run it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def test_foreign_objects_are_read_without_running_them(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    checkpoint = official_checkpoint("fairseq", official_weights("v2"), multi_hop_max_dist=4)
    checkpoint["trap"] = Trap(marker)
    torch.save(checkpoint, tmp_path / "official.pt")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "official.pt", weights_only=True)  # what a plain safe load says
    state, layout, declared = read_official(tmp_path / "official.pt")
    assert layout is V2 and declared.multi_hop_max_dist.value == 4 and not marker.exists()
    assert set(state) == set(official_weights("v2"))


def test_lightning_callbacks_keyed_by_class_are_read_as_placeholders(tmp_path: Path) -> None:
    source = save_official(tmp_path / "v1.ckpt", "lightning", official_weights("v1"), multi_hop_max_dist=3)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(source, weights_only=True)
    state, layout, declared = read_official(source)
    assert layout is V1 and declared.multi_hop_max_dist.value == 3 and set(state) == set(official_weights("v1"))


@pytest.mark.parametrize(
    "content,message",
    [
        (b"\x00not a torch file", r"is not a readable torch file"),
        (
            {"weights": {}},
            r"neither a fairseq checkpoint \('model', official v2\) nor a Lightning checkpoint "
            r"\('state_dict', official v1\.0\); top-level keys: \['weights'\]$",
        ),
        ([1, 2], r"holds a list, not a checkpoint dictionary$"),
        ({"state_dict": {"model.nodes.features.weight": torch.zeros(2, 2)}}, r"is a checkpoint of this project"),
    ],
)
def test_files_in_neither_format_are_refused(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "file.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    with pytest.raises(ConversionError, match=message):
        import_official(path, tmp_path / "ours.ckpt")


def test_command_line(tmp_path: Path) -> None:
    source = save_official(tmp_path / "official.ckpt", "lightning", official_weights("v1"))
    output = tmp_path / "out" / "graphormer.ckpt"
    assert main(["convert", "official", str(source), str(output)]) == 0
    assert (tmp_path / "out" / "graphormer.yaml").is_file()
    assert torch.load(output, weights_only=True)["converted_from"] == {
        "source": str(source),
        "format": "official v1.0",
        "dropped": [],
    }
    before = output.read_bytes()
    assert refusal(["convert", "official", str(source), str(output)]) == (  # an earlier conversion is never overwritten
        f"{output} exists; choose another output path (nothing is overwritten)"
    )
    assert output.read_bytes() == before
    torch.save({"weights": {}}, tmp_path / "other.pt")
    assert "neither a fairseq checkpoint" in refusal(
        ["convert", "official", str(tmp_path / "other.pt"), str(tmp_path / "x.ckpt")]
    )
    assert not (tmp_path / "x.ckpt").exists()


def test_outputs_that_cannot_be_written_are_refused_before_reading(tmp_path: Path) -> None:
    """Each refusal comes before the source is read, and nothing is written; a directory that does not exist is
    named as a name ending with '/', not as a directory (issue 38)."""
    source = str(save_official(tmp_path / "official.pt", "fairseq", official_weights("v2")))
    (tmp_path / "a_file").touch()
    (tmp_path / "out").mkdir()
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o500)
    if unwritable(read_only) is None:  # root writes anywhere; /proc refuses new files even to root
        read_only = Path("/proc")
    refusals = [
        (
            f"{tmp_path / 'new'}/",
            f"{tmp_path / 'new'}/ ends with '/', the name of a directory; name the checkpoint "
            f"file to write, e.g. {tmp_path / 'new' / 'graphormer.ckpt'}",
        ),
        (
            str(tmp_path / "out"),
            f"{tmp_path / 'out'} is a directory; name the checkpoint file to write, e.g. "
            f"{tmp_path / 'out' / 'graphormer.ckpt'}",
        ),
        (
            str(tmp_path / "a_file" / "x.ckpt"),
            f"cannot write {tmp_path / 'a_file' / 'x.ckpt'}: {tmp_path / 'a_file'} is a file, not a directory",
        ),
        (str(read_only / "x.ckpt"), f"cannot write {read_only / 'x.ckpt'}: {read_only} is not writable"),
    ]
    for output, message in refusals:
        assert refusal(["convert", "official", source, output]) == message
    read_only.chmod(0o700)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "official.pt", "out", "read_only"]
    assert not any((tmp_path / "out").iterdir())


def test_a_transformers_directory_or_a_text_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert refusal(["convert", "official", str(tmp_path / "hf"), str(tmp_path / "x.ckpt")]) == (
        f"{tmp_path / 'hf'} is a directory with config.json, a transformers Graphormer: convert it with "
        f"graphormer-urpe convert huggingface {tmp_path / 'hf'} OUT.ckpt"
    )
    (tmp_path / "notes.pt").write_text("hello\n")
    for output in (tmp_path / "x.ckpt", f"{tmp_path / 'out_conv'}/"):  # the source's problem first (issue 38)
        assert refusal(["convert", "official", str(tmp_path / "notes.pt"), str(output)]) == (
            f"{tmp_path / 'notes.pt'} is a text file of 6 bytes ('hello'), not a torch file"
        )
    assert refusal(["convert", "official", str(tmp_path / "nope.pt"), f"{tmp_path / 'out_conv'}/"]) == (
        f"{tmp_path / 'nope.pt'} does not exist"
    )


def test_official_checkpoints_are_recognised_by_the_layouts_node_tables() -> None:
    assert OFFICIAL_NODE_TABLES == (
        ("model", V2.table("atom_encoder"), V2.name),
        ("state_dict", V1.table("atom_encoder"), V1.name),
    )


# ----------------------------------------------------------------------------- fine-tuning an import
def test_imported_checkpoint_starts_rpe_and_urpe_fine_tuning_with_the_same_predictions(tmp_path: Path) -> None:
    source = save_official(tmp_path / "official.pt", "fairseq", official_weights("v2"))
    config = import_official(source, tmp_path / "ours.ckpt")
    imported = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    _, batch = molecules()
    for attention in ("rpe", "urpe"):
        task = GraphRegression(dataclasses.replace(config, attention=attention, dropout=0.3)).eval()
        record = start_from(task, tmp_path / "ours.ckpt", DataSpec(ATOM_VOCAB, BOND_VOCAB, 1, 1))
        assert record["reset_to_ones"] == (["model.relative_scale.weight"] if attention == "urpe" else [])
        assert (record["head"], record["head_reason"]) == (
            "kept",
            "the data's targets are the checkpoint's (it records no target names)",
        )
        with torch.no_grad():
            assert torch.equal(task(batch), imported(batch))
    settings = yaml.safe_load((tmp_path / "ours.yaml").read_text())
    assert settings["data"]["init_args"]["path_order"] == "official"
    encoder = settings["model"]["init_args"]["encoder"]
    assert "attention" not in encoder and "node_vocab" not in encoder  # the user's config and the data decide
    assert encoder["spatial_pos_max"] is None and encoder["layer_norm"] == "post" and encoder["head"] == "v2"


def test_train_fine_tunes_an_imported_checkpoint_as_urpe(tmp_path: Path, qm9_root: Path) -> None:
    """``train.py --config DATA --config IMPORTED.yaml --init_from IMPORTED.ckpt``: one step at the first
    learning rate of the warm-up (0) keeps the imported weights, with C = 1, on official paths; the head
    is kept (one regression target per graph), and with it its target statistics (0 and 1, not QM9's)."""
    import train
    from graphormer_urpe.testing.runs import tiny_run_args

    source = save_official(tmp_path / "official.pt", "fairseq", official_weights("v2"))
    import_official(source, tmp_path / "imported.ckpt")
    train.main(
        tiny_run_args(
            qm9_root,
            tmp_path / "runs",
            "--config",
            str(tmp_path / "imported.yaml"),
            "--model.encoder.attention",
            "urpe",
            "--model.normalize_targets",
            "true",
            "--init_from",
            str(tmp_path / "imported.ckpt"),
            "--trainer.max_steps",
            "1",
            "--run_name",
            "urpe",
        )
    )
    run_dir = tmp_path / "runs" / "urpe"
    imported = torch.load(tmp_path / "imported.ckpt", weights_only=True)["state_dict"]
    tuned = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    scale = tuned.pop("model.relative_scale.weight")
    assert torch.equal(scale[1:], torch.ones_like(scale[1:]))
    assert tuned.keys() == imported.keys() and all(torch.equal(tuned[k], imported[k]) for k in imported)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["data"]["init_args"]["path_order"] == "official"
    assert config["model"]["init_args"]["encoder"]["head"] == "v2"
    # the config embedded in the checkpoint (what evaluate.py rebuilds from) keeps "null": no masking
    embedded = yaml.safe_load(torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)[CONFIG_KEY])
    assert embedded["model"]["init_args"]["encoder"]["spatial_pos_max"] is None


def test_single_hop_and_small_distance_tables_map_row_by_row() -> None:
    """Without ``edge_dis_encoder`` (single_hop) bond rows sit one lower (no extra ``+ 1`` from the
    edge-input padding); a 40-row distance table (v1.0 ZINC) holds distances 0..38 and no unreachable row."""
    weights = official_weights("v1", multi_hop=False)
    weights["spatial_pos_encoder.weight"] = weights["spatial_pos_encoder.weight"][:40].clone()
    converted = convert_weights(weights, V1, Declared(), node_vocab=ATOM_VOCAB, edge_vocab=BOND_VOCAB)
    config, ours = converted.config, converted.weights
    assert (config.edge_encoding, config.spatial_pos_max, config.max_distance) == ("single_hop", 39, None)
    edge, spatial = weights["edge_encoder.weight"], weights["spatial_pos_encoder.weight"]
    bond_rows = [512 * f + v + 2 for f, size in enumerate(BOND_VOCAB) for v in range(size)]
    assert torch.equal(ours["edge_bias.features.weight"][1:], edge[bond_rows])
    assert torch.equal(ours["relative_bias.table.weight"][2:], spatial[1:40])
    assert torch.equal(ours["relative_bias.table.weight"][1], weights["graph_token_virtual_distance.weight"][0])


def test_v2_drops_what_official_never_applies(tmp_path: Path) -> None:
    source = save_official(
        tmp_path / "official.pt", "fairseq", official_weights("v2", pre_layernorm=True), pre_layernorm=True
    )
    import_official(source, tmp_path / "ours.ckpt")
    assert torch.load(tmp_path / "ours.ckpt", weights_only=True)["converted_from"]["dropped"] == [
        "encoder.graph_encoder.final_layer_norm.bias",
        "encoder.graph_encoder.final_layer_norm.weight",
        "encoder.masked_lm_pooler.bias",
        "encoder.masked_lm_pooler.weight",
    ]
