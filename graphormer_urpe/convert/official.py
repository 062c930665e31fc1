"""Official Graphormer checkpoints (v1.0 Lightning, v2 fairseq) as ours: ``docs/official-graphormer.md``."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from graphormer_urpe.convert.common import (
    ConversionError,
    Found,
    check_output,
    check_source,
    read_torch_file,
    write_checkpoint,
)
from graphormer_urpe.convert.mapping import Declared, Layout, convert_weights
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.model.graphormer import GraphormerConfig

V1 = Layout(
    name="official v1.0",
    node="",
    bias="",
    layers="layers",
    layer=dict(
        q="self_attention.linear_q",
        k="self_attention.linear_k",
        v="self_attention.linear_v",
        out="self_attention.output_layer",
        attention_norm="self_attention_norm",
        ffn_norm="ffn_norm",
        fc1="ffn.layer1",
        fc2="ffn.layer2",
    ),
    layer_norm="pre",
    pre_layernorm_marker=None,
    embedding_norm=None,
    final_norm="final_ln",
    head="linear",
    head_parts={"head": "out_proj"},
    head_bias=None,
    never_applied=(),
    node_row_shift=2,
)
V1_DOWNSTREAM = dataclasses.replace(V1, head_parts={"head": "downstream_out_proj"})  # v1.0 outside PCQM4M-LSC
V2 = Layout(
    name="official v2",
    node="encoder.graph_encoder.graph_node_feature.",
    bias="encoder.graph_encoder.graph_attn_bias.",
    layers="encoder.graph_encoder.layers",
    layer=dict(
        q="self_attn.q_proj",
        k="self_attn.k_proj",
        v="self_attn.v_proj",
        out="self_attn.out_proj",
        attention_norm="self_attn_layer_norm",
        ffn_norm="final_layer_norm",
        fc1="fc1",
        fc2="fc2",
    ),
    layer_norm=None,
    pre_layernorm_marker="encoder.graph_encoder.final_layer_norm.weight",
    embedding_norm="encoder.graph_encoder.emb_layer_norm",
    final_norm=None,
    head="v2",
    head_parts={
        "head.transform": "encoder.lm_head_transform_weight",
        "head.norm": "encoder.layer_norm",
        "head.out": "encoder.embed_out",
    },
    head_bias="encoder.lm_output_learned_bias",
    never_applied=("encoder.graph_encoder.final_layer_norm.", "encoder.masked_lm_pooler."),
    node_row_shift=2,
)

#: Our name <- (fairseq argument, type) the v2 model reads from its arguments (``cfg['model']``,
#: legacy ``args``): ``GraphormerEncoder`` and ``base_architecture`` in ``graphormer/models/graphormer.py``.
FAIRSEQ_MODEL_ARGS = {
    "num_layers": ("encoder_layers", int),
    "hidden_dim": ("encoder_embed_dim", int),
    "ffn_dim": ("encoder_ffn_embed_dim", int),
    "num_heads": ("encoder_attention_heads", int),
    "dropout": ("dropout", float),
    "attention_dropout": ("attention_dropout", float),
    "activation_dropout": ("act_dropout", float),
    "pre_layernorm": ("pre_layernorm", bool),
    "embedding_norm": ("encoder_normalize_before", bool),
    "activation": ("activation_fn", str),
}
#: Our name <- (field, type) of the v2 task (``GraphPredictionConfig``), read by the collator from
#: ``cfg['task']`` and by the model from its copy in ``cfg['model']`` (both must agree).
FAIRSEQ_TASK_ARGS = {
    "multi_hop_max_dist": ("multi_hop_max_dist", int),
    "spatial_pos_max": ("spatial_pos_max", int),
    "edge_type": ("edge_type", str),
    "num_outputs": ("num_classes", int),
    "num_atoms": ("num_atoms", int),
    "num_edges": ("num_edges", int),
    "num_in_degree": ("num_in_degree", int),
    "num_out_degree": ("num_out_degree", int),
    "num_spatial": ("num_spatial", int),
    "num_edge_dis": ("num_edge_dis", int),
}
#: Our name <- (argument, type) of v1.0's ``Graphormer.__init__``, stored in ``hyper_parameters``.
LIGHTNING_HPARAMS = {
    "num_layers": ("n_layers", int),
    "hidden_dim": ("hidden_dim", int),
    "ffn_dim": ("ffn_dim", int),
    "num_heads": ("num_heads", int),
    "dropout": ("dropout_rate", float),
    "attention_dropout": ("attention_dropout_rate", float),
    "input_dropout": ("intput_dropout_rate", float),
    "edge_type": ("edge_type", str),
    "multi_hop_max_dist": ("multi_hop_max_dist", int),
}
V1_PCQM4M = "PCQM4M-LSC"  # the v1.0 dataset whose head is out_proj (every other one: downstream_out_proj)


def _read(sections: Sequence[tuple[str, Any]], fields: Mapping[str, tuple[str, type]]) -> dict[str, Found]:
    """Each field from every section (name, Namespace or mapping) holding it; the sections must agree."""
    out = {}
    for ours, (theirs, kind) in fields.items():
        values = []
        for name, section in sections:
            where = f"{name}.{theirs}" if isinstance(section, argparse.Namespace) else f"{name}['{theirs}']"
            if (value := Found.get(section, theirs, where, kind)) is not None:
                values.append(value)
        for other in values[1:]:
            if other.value != values[0].value:
                raise ConversionError(
                    f"{values[0]} but {other}: the collator and the model were built with different values"
                )
        if values:
            out[ours] = values[0]
    return out


def _fairseq_settings(checkpoint: Mapping[str, Any]) -> Declared:
    """What a fairseq checkpoint stores: ``cfg['model']`` and ``cfg['task']``, or a legacy ``args``."""
    cfg, args = checkpoint.get("cfg"), checkpoint.get("args")
    if isinstance(cfg, Mapping) and (cfg.get("model") is not None or cfg.get("task") is not None):
        model, task = (
            [("cfg['model']", cfg.get("model"))],
            [("cfg['task']", cfg.get("task")), ("cfg['model']", cfg.get("model"))],
        )
    else:
        model = task = [("args", args)] if isinstance(args, argparse.Namespace) else []
    settings = _read(model, FAIRSEQ_MODEL_ARGS) | _read(task, FAIRSEQ_TASK_ARGS)
    return Declared(**settings, input_dropout=settings.get("dropout"))  # v2: one rate after emb_layer_norm too


def read_official(path: Path) -> tuple[dict[str, torch.Tensor], Layout, Declared]:
    """The weights, the layout (:data:`V1`, :data:`V1_DOWNSTREAM` or :data:`V2`) and the settings a file stores."""
    checkpoint = read_torch_file(path)
    if isinstance(checkpoint.get("model"), Mapping):
        state, layout, declared = dict(checkpoint["model"]), V2, _fairseq_settings(checkpoint)
    elif isinstance(checkpoint.get("state_dict"), Mapping):
        state = dict(checkpoint["state_dict"])
        if any(k.startswith("model.") for k in state):
            raise ConversionError(f"{path} is a checkpoint of this project, not an official one: use it directly")
        hparams = checkpoint.get("hyper_parameters")
        declared = Declared(**_read([("hyper_parameters", hparams)], LIGHTNING_HPARAMS))
        dataset = Found.get(hparams, "dataset_name", "hyper_parameters['dataset_name']", str)
        downstream = dataset.value != V1_PCQM4M if dataset is not None else "out_proj.weight" not in state
        layout = V1_DOWNSTREAM if downstream else V1
    else:
        raise ConversionError(
            f"{path}: neither a fairseq checkpoint ('model', official v2) nor a Lightning checkpoint "
            f"('state_dict', official v1.0); top-level keys: {sorted(checkpoint)}"
        )
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, layout, declared


def _option(stored: Found | None, value: int | None, flag: str) -> Found | None:
    if value is None:
        return stored
    if stored is not None and stored.value != value:
        raise ConversionError(f"{flag} {value}: the file stores {stored}, which its weights were trained with")
    return stored or Found(value, flag)


def import_official(
    source: str | Path,
    output: str | Path,
    *,
    node_vocab: Sequence[int] = ATOM_VOCAB,
    edge_vocab: Sequence[int] = BOND_VOCAB,
    multi_hop_max_dist: int | None = None,
    spatial_pos_max: int | None = None,
    task: str = "regression",
) -> GraphormerConfig:
    """Convert an official checkpoint (v1.0 ``.ckpt``, v2 ``.pt``) into ``output`` and its ``.yaml``, as the CLI."""
    source = check_source(source)  # first: a message names the real problem
    output = check_output(output)
    state, layout, declared = read_official(source)
    declared = dataclasses.replace(
        declared,
        multi_hop_max_dist=_option(declared.multi_hop_max_dist, multi_hop_max_dist, "--multi_hop_max_dist"),
        spatial_pos_max=_option(declared.spatial_pos_max, spatial_pos_max, "--spatial_pos_max"),
    )
    converted = convert_weights(state, layout, declared, node_vocab=node_vocab, edge_vocab=edge_vocab)
    write_checkpoint(converted, output, source=source, source_format=layout.name, task=task)
    return converted.config
