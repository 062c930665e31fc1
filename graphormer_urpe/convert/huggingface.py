"""transformers' Graphormer checkpoints (a ``save_pretrained`` directory) as ours: ``docs/official-graphormer.md``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file

from graphormer_urpe.convert.common import ConversionError, Found, check_output, read_torch_file, write_checkpoint
from graphormer_urpe.convert.mapping import Declared, convert_weights
from graphormer_urpe.convert.official import V2
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.model.graphormer import GraphormerConfig

NODE_ROW_SHIFTS = {"transformers": 3, "official": 2}  # node value v of column f at row 512 f + v + shift
#: transformers' layout: official v2's encoder, its own head and node rows.
TRANSFORMERS = dataclasses.replace(
    V2,
    name="transformers",
    head_parts={
        "head.transform": "encoder.lm_head_transform_weight",
        "head.norm": "encoder.layer_norm",
        "head.out": "classifier.classifier",
    },
    head_bias="classifier.lm_output_learned_bias",
    never_applied=("encoder.graph_encoder.final_layer_norm.",),
    node_row_shift=NODE_ROW_SHIFTS["transformers"],
)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # in the order from_pretrained prefers them
ARCHITECTURE = "GraphormerForGraphClassification"  # the class whose checkpoints carry a prediction head

#: Our name <- (config.json key, type, transformers' default where the key is absent)
#: (``configuration_graphormer.py``, ``GraphormerConfig.__init__``).
CONFIG_FIELDS: dict[str, tuple[str, type, Any]] = {
    "num_layers": ("num_hidden_layers", int, 12),
    "hidden_dim": ("embedding_dim", int, 768),
    "ffn_dim": ("ffn_embedding_dim", int, 768),
    "num_heads": ("num_attention_heads", int, 32),
    "num_outputs": ("num_classes", int, 1),
    "edge_type": ("edge_type", str, "multi_hop"),
    "pre_layernorm": ("pre_layernorm", bool, False),
    "embedding_norm": ("encoder_normalize_before", bool, False),
    "activation": ("activation_fn", str, "gelu"),
    "multi_hop_max_dist": ("multi_hop_max_dist", int, 5),
    "dropout": ("dropout", float, 0.1),
    "attention_dropout": ("attention_dropout", float, 0.1),
    "activation_dropout": ("activation_dropout", float, 0.1),
    "num_atoms": ("num_atoms", int, 512 * 9),
    "num_edges": ("num_edges", int, 512 * 3),
    "num_in_degree": ("num_in_degree", int, 512),
    "num_out_degree": ("num_out_degree", int, 512),
    "num_spatial": ("num_spatial", int, 512),
    "num_edge_dis": ("num_edge_dis", int, 128),
}
#: config.json settings that transformers accepts and we do not express: key -> the value we need
#: (absent keys take transformers' default, which is this value).
REQUIRED = {
    "model_type": "graphormer",
    "embed_scale": None,
    "share_input_output_embed": False,
    "bias": True,
    "self_attention": True,
}
TRANSFORMERS_SPATIAL_POS_MAX = 1024  # transformers' default of the collator's argument we read from config.json


def read_config(path: Path) -> dict[str, Any]:
    """``config.json`` as a dictionary, checked for a transformers Graphormer we can express."""
    if not path.is_file():
        raise ConversionError(f"{path} does not exist: a transformers checkpoint directory holds config.json")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"{path} is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConversionError(f"{path} holds a {type(config).__name__}, not a JSON object")
    for key, needed in REQUIRED.items():
        if config.get(key, needed) != needed:
            raise ConversionError(f"{path.name} {key} = {config[key]!r}: only {needed!r} is supported")
    for key in ("kdim", "vdim"):
        if config.get(key) not in (None, config.get("embedding_dim")):
            raise ConversionError(f"{path.name} {key} = {config[key]!r}: only null (= embedding_dim) is supported")
    architectures = config.get("architectures") or [ARCHITECTURE]
    if ARCHITECTURE not in architectures:
        raise ConversionError(
            f"{path.name} architectures = {architectures}: only {ARCHITECTURE} carries a prediction head"
        )
    return config


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``model.safetensors`` or, if absent, ``pytorch_model.bin``."""
    path = next((directory / name for name in WEIGHT_FILES if (directory / name).is_file()), None)
    if path is None:
        present = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
        raise ConversionError(f"{directory} holds neither {' nor '.join(WEIGHT_FILES)} (found: {present})")
    if path.suffix == ".bin":
        return dict(read_torch_file(path))
    try:
        return load_file(path, device="cpu")
    except Exception as error:  # SafetensorError, or an OSError of a truncated file
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConversionError(f"{path} is not a readable safetensors file: {reason}") from None


def declared_settings(config: Mapping[str, Any], spatial_pos_max: int | None) -> Declared:
    """What ``config.json`` says, with transformers' defaults for absent keys; ``spatial_pos_max``:
    the collator's argument (default: config.json's), turned into official's meaning."""
    settings = {}
    for ours, (key, kind, default) in CONFIG_FIELDS.items():
        where = f"config.json {key}" if key in config else f"config.json {key} (absent: transformers' default)"
        settings[ours] = Found.get({key: config.get(key, default)}, key, where, kind)
    if spatial_pos_max is not None:
        limit = Found(spatial_pos_max, "--spatial_pos_max")
    else:
        limit = Found.get(
            {"spatial_pos_max": config.get("spatial_pos_max", TRANSFORMERS_SPATIAL_POS_MAX)},
            "spatial_pos_max",
            "config.json spatial_pos_max",
            int,
        )
    if limit.value < 2:
        raise ConversionError(
            f"{limit}: masks every pair (transformers' collator masks distance + 1 >= spatial_pos_max)"
        )
    masked_from = Found(limit.value - 1, f"{limit.where} {limit.value} (transformers masks distance + 1 >= it)")
    return Declared(**settings, spatial_pos_max=masked_from, input_dropout=settings["dropout"])


def import_huggingface(
    source: str | Path,
    output: str | Path,
    *,
    node_vocab: Sequence[int] = ATOM_VOCAB,
    edge_vocab: Sequence[int] = BOND_VOCAB,
    spatial_pos_max: int | None = None,
    node_rows: Literal["transformers", "official"] = "transformers",
    task: str = "regression",
) -> GraphormerConfig:
    """Convert a transformers Graphormer directory into ``output`` and its ``.yaml``, as the command line does."""
    source = Path(source)  # checked first: a message names the real problem
    if source.is_file():
        raise ConversionError(
            f"{source} is a file; a transformers checkpoint is a directory with config.json (a "
            "torch file of the official code converts with graphormer-urpe convert "
            "official)"
        )
    config = read_config(source / "config.json")
    output = check_output(output)
    state = read_weights(source)
    layout = dataclasses.replace(TRANSFORMERS, node_row_shift=NODE_ROW_SHIFTS[node_rows])
    converted = convert_weights(
        state, layout, declared_settings(config, spatial_pos_max), node_vocab=node_vocab, edge_vocab=edge_vocab
    )
    write_checkpoint(converted, output, source=source, source_format=f"transformers ({node_rows} node rows)", task=task)
    return converted.config
