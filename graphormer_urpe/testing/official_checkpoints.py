"""Official Graphormer checkpoints for tests: random weights under the official names and shapes, saved as the
official code writes them (fairseq's trainer for v2, PyTorch Lightning 1.3 for v1.0)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from graphormer_urpe.convert.official import V1, V2

#: The test model's sizes.
HIDDEN, HEADS, LAYERS, FFN = 16, 4, 2, 24


def official_weights(
    version: str,
    pre_layernorm: bool = False,
    seed: int = 0,
    multi_hop: bool = True,
    embedding_norm: bool = True,
    head: str = "out_proj",
) -> dict[str, torch.Tensor]:
    """Random weights under the official names and shapes (v2: ``graphormer_base`` tables; padding rows 0)."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.5

    def table(rows: int, width: int) -> torch.Tensor:
        return randn(rows, width).index_fill(0, torch.tensor(0), 0.0)  # the padding row

    node, bias = (
        ("encoder.graph_encoder.graph_node_feature.", "encoder.graph_encoder.graph_attn_bias.")
        if version == "v2"
        else ("", "")
    )
    w = {
        f"{node}atom_encoder.weight": table(512 * 9 + 1, HIDDEN),
        f"{node}in_degree_encoder.weight": table(512, HIDDEN),
        f"{node}out_degree_encoder.weight": table(512, HIDDEN),
        f"{node}graph_token.weight": randn(1, HIDDEN),
        f"{bias}edge_encoder.weight": table(512 * 3 + 1, HEADS),
    }
    if multi_hop:
        w[f"{bias}edge_dis_encoder.weight"] = randn(128 * HEADS * HEADS, 1)
    w[f"{bias}spatial_pos_encoder.weight"] = table(512, HEADS)
    w[f"{bias}graph_token_virtual_distance.weight"] = randn(1, HEADS)
    names = dict(V1.layer if version == "v1" else V2.layer)
    prefix = "layers.{}." if version == "v1" else "encoder.graph_encoder.layers.{}."
    for i in range(LAYERS):
        p = prefix.format(i)
        for key in ("q", "k", "v", "out"):
            w[f"{p}{names[key]}.weight"], w[f"{p}{names[key]}.bias"] = randn(HIDDEN, HIDDEN), randn(HIDDEN)
        for key in ("attention_norm", "ffn_norm"):
            w[f"{p}{names[key]}.weight"], w[f"{p}{names[key]}.bias"] = (
                1 + randn(HIDDEN) * 0.2,
                randn(HIDDEN) * 0.2,
            )
        w[f"{p}{names['fc1']}.weight"], w[f"{p}{names['fc1']}.bias"] = randn(FFN, HIDDEN), randn(FFN)
        w[f"{p}{names['fc2']}.weight"], w[f"{p}{names['fc2']}.bias"] = randn(HIDDEN, FFN), randn(HIDDEN)
    if version == "v1":
        w["final_ln.weight"], w["final_ln.bias"] = 1 + randn(HIDDEN) * 0.2, randn(HIDDEN) * 0.2
        w[f"{head}.weight"], w[f"{head}.bias"] = randn(1, HIDDEN), randn(1)
        return w
    if embedding_norm:
        w["encoder.graph_encoder.emb_layer_norm.weight"] = 1 + randn(HIDDEN) * 0.2
        w["encoder.graph_encoder.emb_layer_norm.bias"] = randn(HIDDEN) * 0.2
    if pre_layernorm:  # built, never applied (graphormer_graph_encoder.py)
        w["encoder.graph_encoder.final_layer_norm.weight"] = randn(HIDDEN)
        w["encoder.graph_encoder.final_layer_norm.bias"] = randn(HIDDEN)
    w["encoder.masked_lm_pooler.weight"], w["encoder.masked_lm_pooler.bias"] = (
        randn(HIDDEN, HIDDEN),
        randn(HIDDEN),
    )
    w["encoder.lm_head_transform_weight.weight"] = randn(HIDDEN, HIDDEN)
    w["encoder.lm_head_transform_weight.bias"] = randn(HIDDEN)
    w["encoder.layer_norm.weight"], w["encoder.layer_norm.bias"] = 1 + randn(HIDDEN) * 0.2, randn(HIDDEN) * 0.2
    w["encoder.embed_out.weight"] = randn(1, HIDDEN)
    w["encoder.lm_output_learned_bias"] = randn(1)
    return w


#: ``GraphPredictionConfig``'s fields (v2 ``graphormer/tasks/graph_prediction.py``) as a PCQM4Mv2 run sets them.
TASK_FIELDS = dict(
    dataset_name="pcqm4mv2",
    num_classes=1,
    max_nodes=128,
    dataset_source="ogb",
    num_atoms=512 * 9,
    num_edges=512 * 3,
    num_in_degree=512,
    num_out_degree=512,
    num_spatial=512,
    num_edge_dis=128,
    multi_hop_max_dist=5,
    spatial_pos_max=1024,
    edge_type="multi_hop",
    seed=1,
    pretrained_model_name="none",
    load_pretrained_model_output_layer=False,
    train_epoch_shuffle=False,
    user_data_dir="",
)
#: The model's arguments after ``graphormer_base_architecture``
#: (v2 ``graphormer/models/graphormer.py``), test sizes.
MODEL_ARGS = dict(
    encoder_layers=LAYERS,
    encoder_embed_dim=HIDDEN,
    encoder_ffn_embed_dim=FFN,
    encoder_attention_heads=HEADS,
    dropout=0.0,
    attention_dropout=0.1,
    act_dropout=0.1,
    activation_fn="gelu",
    encoder_normalize_before=True,
    apply_graphormer_init=True,
    share_encoder_input_output_embed=False,
    no_token_positional_embeddings=False,
    pre_layernorm=False,
    arch="graphormer_base",
    task="graph_prediction",
    criterion="l1_loss",
)
#: ``Graphormer.__init__``'s arguments (v1.0 ``graphormer/model.py``), saved by ``save_hyperparameters()``.
LIGHTNING_HPARAMS = dict(
    n_layers=LAYERS,
    num_heads=HEADS,
    hidden_dim=HIDDEN,
    dropout_rate=0.1,
    intput_dropout_rate=0.0,
    weight_decay=0.0,
    ffn_dim=FFN,
    dataset_name="PCQM4M-LSC",
    warmup_updates=60000,
    tot_updates=1000000,
    peak_lr=2e-4,
    end_lr=1e-9,
    edge_type="multi_hop",
    multi_hop_max_dist=5,
    attention_dropout_rate=0.1,
    flag=False,
    flag_m=3,
    flag_step_size=1e-3,
    flag_mag=1e-3,
)
FORMATS = ["fairseq", "fairseq-dict", "fairseq-legacy", "lightning"]


def official_checkpoint(fmt: str, weights: dict[str, torch.Tensor], **settings: Any) -> dict[str, Any]:
    """A checkpoint as the official code writes it, ``settings`` replacing the official names' values: ``fairseq``
    (``Trainer.state_dict``: ``args`` None, ``cfg`` as containers, ``cfg['model']`` a Namespace of every argument, as
    Graphormer's model has no dataclass), ``fairseq-dict`` (``cfg['model']`` a dict, a dataclass model's),
    ``fairseq-legacy`` (one ``args`` Namespace), ``lightning`` (Lightning 1.3's ``dump_checkpoint``)."""
    if fmt == "lightning":
        return {
            "epoch": 3,
            "global_step": 1200,
            "pytorch-lightning_version": "1.3.8",
            "state_dict": weights,
            "callbacks": {ModelCheckpoint: {"best_model_score": torch.tensor(0.1), "best_model_path": "x.ckpt"}},
            "optimizer_states": [{"state": {}, "param_groups": [{"lr": 2e-4}]}],
            "lr_schedulers": [{"last_epoch": 3}],
            "hparams_name": "kwargs",
            "hyper_parameters": {**LIGHTNING_HPARAMS, **settings},
        }
    task = {k: settings.get(k, v) for k, v in TASK_FIELDS.items()}
    model = {k: settings.get(k, v) for k, v in MODEL_ARGS.items()}
    everything = {**task, **model, "_name": "graphormer_base"}
    history = [
        {
            "criterion_name": "GraphPredictionL1Loss",
            "optimizer_name": "FairseqAdam",
            "lr_scheduler_state": {"best": 0.1},
            "num_updates": 1200,
        }
    ]
    if fmt == "fairseq-legacy":
        return {
            "args": argparse.Namespace(**everything),
            "model": weights,
            "optimizer_history": history,
            "extra_state": {"epoch": 3},
            "last_optimizer_state": {"state": {}},
        }
    return {
        "args": None,
        "model": weights,
        "criterion": None,
        "optimizer_history": history,
        "task_state": {},
        "extra_state": {"metrics": {}, "previous_training_time": 12.5},
        "cfg": {
            "_name": None,
            "common": {"seed": 1, "fp16": False},
            "checkpoint": {"save_dir": "ckpts"},
            "model": argparse.Namespace(**everything) if fmt == "fairseq" else {**model, "_name": "graphormer"},
            "task": {"_name": "graph_prediction", **task},
            "criterion": {"_name": "l1_loss"},
            "optimizer": {"_name": "adam", "lr": [2e-4]},
            "lr_scheduler": {"_name": "polynomial_decay"},
        },
    }


def save_official(path: Path, fmt: str, weights: dict[str, torch.Tensor], **settings: Any) -> Path:
    """:func:`official_checkpoint` saved at ``path``, returned."""
    torch.save(official_checkpoint(fmt, weights, **settings), path)
    return path
