"""Importing transformers' Graphormer (``graphormer_urpe.convert.huggingface``): checkpoints written by
``GraphormerForGraphClassification.save_pretrained`` (random weights, small sizes) import into a model
that predicts what transformers' model predicts on the inputs of its own preprocessing and collator
(transcribed in ``graphormer_urpe/testing/official_reference.py``, whose Cython it would otherwise compile), read every
``config.json`` setting, and refuse what we cannot express in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers.models.deprecated.graphormer import GraphormerConfig as TransformersConfig
from transformers.models.deprecated.graphormer import GraphormerForGraphClassification

from graphormer_urpe.commands.__main__ import main
from graphormer_urpe.convert.common import ConversionError
from graphormer_urpe.convert.huggingface import import_huggingface
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.testing.commands import refusal
from graphormer_urpe.testing.official_reference import ULPS, molecules, transformers_batch
from graphormer_urpe.testing.tolerance import rounding_tolerance

HIDDEN, HEADS, LAYERS, FFN, CLASSES = 16, 4, 2, 24, 3
#: Tables whose row 0 transformers keeps at zero (``padding_idx``).
PADDED = (
    "atom_encoder.weight",
    "in_degree_encoder.weight",
    "out_degree_encoder.weight",
    "edge_encoder.weight",
    "spatial_pos_encoder.weight",
)


def transformers_model(seed: int = 0, **settings: Any) -> GraphormerForGraphClassification:
    """transformers' model at small sizes with every weight random (LayerNorm scales near 1, padding rows 0)."""
    config = TransformersConfig(
        **{
            **dict(
                num_hidden_layers=LAYERS,
                embedding_dim=HIDDEN,
                ffn_embedding_dim=FFN,
                num_attention_heads=HEADS,
                num_classes=CLASSES,
                encoder_normalize_before=True,
            ),
            **settings,
        }
    )
    model = GraphormerForGraphClassification(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.5)
            if "layer_norm.weight" in name:
                tensor.add_(1.0)
            if name.endswith(PADDED):
                tensor[0] = 0.0
    return model


def saved(model: GraphormerForGraphClassification, directory: Path, safe: bool = True, **config_edits: Any) -> Path:
    """``save_pretrained``, then ``config_edits`` written into its config.json (None removes a key)."""
    model.save_pretrained(directory, safe_serialization=safe)
    if config_edits:
        config = json.loads((directory / "config.json").read_text())
        config.update(config_edits)
        config = {k: v for k, v in config.items() if v is not None}
        (directory / "config.json").write_text(json.dumps(config))
    return directory


def predictions(tmp_path: Path, source: Path, **options: Any) -> torch.Tensor:
    import_huggingface(source, tmp_path / "ours.ckpt", **options)
    task = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    with torch.no_grad():
        return task(molecules()[1])


def transformers_predictions(model: GraphormerForGraphClassification, **batch_options: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(**transformers_batch(molecules()[0], **batch_options)).logits


# ----------------------------------------------------------------------------- equal to transformers' model
@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        dict(pre_layernorm=True),
        dict(multi_hop_max_dist=3),
        dict(encoder_normalize_before=False, edge_type="single_hop"),
    ],
    ids=["post-LN", "pre-LN", "3-hops", "single-hop-no-embedding-norm"],
)
def test_imported_model_predicts_what_transformers_predicts(
    tmp_path: Path, safe: bool, settings: dict[str, Any]
) -> None:
    model = transformers_model(**settings)
    ours = predictions(tmp_path, saved(model, tmp_path / "hf", safe))
    reference = transformers_predictions(model, spatial_pos_max=1024)  # config.json's, nothing masked
    torch.testing.assert_close(ours, reference, **rounding_tolerance(ours, reference, ulps=ULPS))


def test_node_rows_follow_transformers_preprocessing_or_official(tmp_path: Path) -> None:
    """transformers reads node value v of column f at row ``512 f + v + 3``, official at ``+ 2``."""
    model = transformers_model()
    source = saved(model, tmp_path / "hf")
    official_rows = transformers_predictions(model, spatial_pos_max=1024, node_shift=0)
    (tmp_path / "rows").mkdir()
    ours = predictions(tmp_path / "rows", source, node_rows="official")
    torch.testing.assert_close(ours, official_rows, **rounding_tolerance(ours, official_rows, ulps=ULPS))
    default = transformers_predictions(model, spatial_pos_max=1024)
    # the rows matter: far more than rounding apart
    assert (default - official_rows).abs().max() > 10 * rounding_tolerance(default, official_rows, ulps=ULPS)["atol"]


@pytest.mark.parametrize(
    "config_value,option,collator",
    [(1024, 20, 20), (5, None, 5), (300, None, 300)],
    ids=["collator-default-20", "config-5", "config-300"],
)
def test_masking_follows_the_collator(tmp_path: Path, config_value: int, option: int | None, collator: int) -> None:
    """``GraphormerDataCollator(spatial_pos_max)`` masks distance + 1 >= it; config.json's value is
    used unless ``--spatial_pos_max`` gives the collator's."""
    model = transformers_model(spatial_pos_max=config_value)
    ours = predictions(tmp_path, saved(model, tmp_path / "hf"), spatial_pos_max=option)
    config = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").model.config
    assert (config.spatial_pos_max, config.max_distance) == (min(collator - 1, 255), None)
    reference = transformers_predictions(model, spatial_pos_max=collator)
    torch.testing.assert_close(ours, reference, **rounding_tolerance(ours, reference, ulps=ULPS))
    unmasked = transformers_predictions(model, spatial_pos_max=1024)
    if collator < 20:  # the chain has pairs 11 apart; nothing in these molecules is 19 apart
        assert (unmasked - reference).abs().max() > 10 * rounding_tolerance(unmasked, reference, ulps=ULPS)["atol"]


# ----------------------------------------------------------------------------- every config.json setting
#: (model settings, config.json edits, our field, its value): each setting lands where it belongs.
SETTINGS = [
    (dict(multi_hop_max_dist=3), {}, "multi_hop_max_dist", 3),
    (dict(multi_hop_max_dist=3), dict(multi_hop_max_dist=None), "multi_hop_max_dist", 5),  # absent: transformers' 5
    (dict(edge_type="single_hop"), {}, "edge_encoding", "single_hop"),
    (dict(pre_layernorm=True), {}, "layer_norm", "pre"),
    (dict(), {}, "layer_norm", "post"),
    (dict(encoder_normalize_before=False), {}, "embedding_norm", False),
    (dict(dropout=0.2), {}, "dropout", 0.2),
    (dict(dropout=0.2), {}, "input_dropout", 0.2),  # applied after emb_layer_norm too
    (dict(attention_dropout=0.25), {}, "attention_dropout", 0.25),
    (dict(activation_dropout=0.15), {}, "activation_dropout", 0.15),
    (dict(num_classes=5), {}, "num_outputs", 5),
    (dict(spatial_pos_max=12), {}, "spatial_pos_max", 11),
    (
        dict(),
        dict(
            layerdrop=0.3,
            q_noise=0.1,
            apply_graphormer_init=True,
            num_trans_layers_to_freeze=1,
            freeze_embeddings=False,
            traceable=True,
        ),
        "num_layers",
        LAYERS,
    ),  # training-only settings
]


@pytest.mark.parametrize(
    "settings,edits,field,expected", SETTINGS, ids=[f"{field}-{i}" for i, (_, _, field, _) in enumerate(SETTINGS)]
)
def test_every_setting_is_read_from_config_json(
    tmp_path: Path, settings: dict[str, Any], edits: dict[str, Any], field: str, expected: Any
) -> None:
    source = saved(transformers_model(**settings), tmp_path / "hf", **edits)
    config = import_huggingface(source, tmp_path / "ours.ckpt")
    assert getattr(config, field) == expected


#: (model settings, config.json edits, message): settings the weights contradict, or we cannot express.
REFUSED = [
    (
        {},
        dict(num_hidden_layers=3),
        r"^config\.json num_hidden_layers = 3, but the weights have 2 \(layers under "
        r"encoder\.graph_encoder\.layers\)$",
    ),
    (
        {},
        dict(embedding_dim=32),
        r"^config\.json embedding_dim = 32, but the weights have 16 \(the width of "
        r"encoder\.graph_encoder\.graph_node_feature\.atom_encoder\.weight\)$",
    ),
    ({}, dict(ffn_embedding_dim=32), r"^config\.json ffn_embedding_dim = 32, but the weights have 24"),
    ({}, dict(num_attention_heads=8), r"^config\.json num_attention_heads = 8, but the weights have 4"),
    (
        {},
        dict(num_classes=2),
        r"^config\.json num_classes = 2, but the weights have 3 \(the rows of "
        r"classifier\.classifier\.weight\)$",
    ),
    ({}, dict(num_classes="3"), r"^config\.json num_classes = '3': expected int$"),
    (
        {},
        dict(num_hidden_layers=None),
        r"^config\.json num_hidden_layers \(absent: transformers' default\) = 12, but "
        r"the weights have 2",
    ),
    (
        {},
        dict(edge_type="single_hop"),
        r"^config\.json edge_type = 'single_hop', but the file holds "
        r"encoder\.graph_encoder\.graph_attn_bias\.edge_dis_encoder\.weight, which "
        r"transformers builds only with edge_type multi_hop$",
    ),
    (
        {},
        dict(pre_layernorm=True),
        r"^config\.json pre_layernorm = True, but the file has no "
        r"encoder\.graph_encoder\.final_layer_norm\.weight",
    ),
    (
        {},
        dict(encoder_normalize_before=False),
        r"^config\.json encoder_normalize_before = False, but the file holds "
        r"encoder\.graph_encoder\.emb_layer_norm\.weight",
    ),
    (
        {},
        dict(num_atoms=100),
        r"^transformers encoder\.graph_encoder\.graph_node_feature\.atom_encoder\.weight has "
        r"shape \(4609, 16\), expected 101 rows \(config\.json num_atoms = 100\)$",
    ),
    ({}, dict(num_edge_dis=40), r"edge_dis_encoder\.weight has shape \(2048, 1\), expected 640 rows"),
    ({}, dict(multi_hop_max_dist=0), r"^config\.json multi_hop_max_dist = 0: official then uses every hop"),
    ({}, dict(multi_hop_max_dist=200), r"^config\.json multi_hop_max_dist = 200 exceeds the 128 hop matrices"),
    (
        {},
        dict(spatial_pos_max=1),
        r"^config\.json spatial_pos_max = 1: masks every pair \(transformers' collator "
        r"masks distance \+ 1 >= spatial_pos_max\)$",
    ),
    ({}, dict(activation_fn="relu"), r"^config\.json activation_fn = 'relu': only gelu is supported"),
    ({}, dict(embed_scale=2.0), r"^config\.json embed_scale = 2\.0: only None is supported$"),
    ({}, dict(share_input_output_embed=True), r"^config\.json share_input_output_embed = True: only False"),
    ({}, dict(bias=False), r"^config\.json bias = False: only True is supported$"),
    ({}, dict(self_attention=False), r"^config\.json self_attention = False: only True is supported$"),
    ({}, dict(model_type="bert"), r"^config\.json model_type = 'bert': only 'graphormer' is supported$"),
    ({}, dict(kdim=8), r"^config\.json kdim = 8: only null \(= embedding_dim\) is supported$"),
    (
        {},
        dict(architectures=["GraphormerModel"]),
        r"^config\.json architectures = \['GraphormerModel'\]: only "
        r"GraphormerForGraphClassification carries a prediction head$",
    ),
]


@pytest.mark.parametrize(
    "settings,edits,message", REFUSED, ids=["-".join(f"{k}={v}" for k, v in edits.items()) for _, edits, _ in REFUSED]
)
def test_settings_we_cannot_express_or_the_weights_contradict_are_refused(
    tmp_path: Path, settings: dict[str, Any], edits: dict[str, Any], message: str
) -> None:
    source = saved(transformers_model(**settings), tmp_path / "hf", **edits)
    with pytest.raises(ConversionError, match=message):
        import_huggingface(source, tmp_path / "ours.ckpt")
    assert not (tmp_path / "ours.ckpt").exists() and not (tmp_path / "ours.yaml").exists()


@pytest.mark.parametrize(
    "key,shape,message",
    [
        (
            "classifier.classifier.weight",
            (CLASSES, HIDDEN - 1),
            r"^transformers classifier\.classifier\.weight has shape \(3, 15\), expected \(3, 16\)$",
        ),
        (
            "classifier.lm_output_learned_bias",
            (3,),
            r"^transformers classifier\.lm_output_learned_bias has shape \(3,\), expected \(1,\)$",
        ),
        (
            "encoder.graph_encoder.layers.1.self_attn.q_proj.weight",
            (HIDDEN, HIDDEN + 1),
            r"^transformers encoder\.graph_encoder\.layers\.1\.self_attn\.q_proj\.weight has shape \(16, 17\), "
            r"expected \(16, 16\)$",
        ),
    ],
)
def test_malformed_weights_are_refused_naming_the_transformers_key(
    tmp_path: Path, key: str, shape: tuple[int, ...], message: str
) -> None:
    source = saved(transformers_model(), tmp_path / "hf")
    state = load_file(source / "model.safetensors")
    state[key] = torch.zeros(shape)
    save_file(state, source / "model.safetensors")
    with pytest.raises(ConversionError, match=message):
        import_huggingface(source, tmp_path / "ours.ckpt")


def test_files_that_are_not_a_checkpoint_directory_are_refused(tmp_path: Path) -> None:
    source = saved(transformers_model(), tmp_path / "hf")
    with pytest.raises(
        ConversionError,
        match=r"empty/config\.json does not exist: a transformers checkpoint "
        r"directory holds config\.json$",
    ):
        (tmp_path / "empty").mkdir()
        import_huggingface(tmp_path / "empty", tmp_path / "ours.ckpt")
    torch.save({"model": {}}, tmp_path / "official.pt")
    with pytest.raises(
        ConversionError,
        match=r"official\.pt is a file; a transformers checkpoint is a directory with "
        r"config\.json \(a torch file of the official code converts with "
        r"graphormer-urpe convert official\)$",
    ):
        import_huggingface(tmp_path / "official.pt", tmp_path / "ours.ckpt")
    (source / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(ConversionError, match=r"model\.safetensors is not a readable safetensors file: "):
        import_huggingface(source, tmp_path / "ours.ckpt")
    (source / "model.safetensors").unlink()
    with pytest.raises(
        ConversionError,
        match=r"holds neither model\.safetensors nor pytorch_model\.bin \(found: "
        r"\['config\.json'\]\)$",
    ):
        import_huggingface(source, tmp_path / "ours.ckpt")
    (source / "config.json").write_text("{not json")
    with pytest.raises(ConversionError, match=r"config\.json is not JSON: "):
        import_huggingface(source, tmp_path / "ours.ckpt")


def test_command_line(tmp_path: Path) -> None:
    model = transformers_model()
    source = saved(model, tmp_path / "hf")
    output = tmp_path / "out" / "graphormer.ckpt"
    assert main(["convert", "huggingface", str(source), str(output), "--spatial_pos_max", "20"]) == 0
    checkpoint = torch.load(output, weights_only=True)
    assert checkpoint["converted_from"] == {
        "source": str(source),
        "format": "transformers (transformers node rows)",
        "dropped": [],
    }
    assert checkpoint["hyper_parameters"]["encoder"]["spatial_pos_max"] == 19
    assert refusal(["convert", "huggingface", str(tmp_path / "nowhere"), str(tmp_path / "x.ckpt")]) == (
        f"{tmp_path / 'nowhere' / 'config.json'} does not exist: a transformers checkpoint directory holds config.json"
    )
