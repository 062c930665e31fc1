"""Importing official Graphormer checkpoints (v1.0 Lightning and v2 fairseq layouts, generated here
with random weights in the official key names and shapes): the imported model run through our
pipeline equals the same weights in our own layout bit for bit, matches a re-implementation of the
official forward on molecules, and starts RPE or URPE (C = 1) fine-tuning with identical predictions."""

from __future__ import annotations

import argparse
import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from ogb.utils import smiles2graph

from graphormer_urpe.data.batch import GraphRecord, collate_graphs
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.model.graphormer import Graphormer
from graphormer_urpe.run.cli import CONFIG_KEY
from graphormer_urpe.run.finetune import init_from_checkpoint
from graphormer_urpe.run.official_import import OfficialImportError, convert, import_checkpoint, main, read_official
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.testing.tolerance import rounding_tolerance
from tests.official_reference import official_batch, official_forward

HIDDEN, HEADS, LAYERS, FFN = 16, 4, 2, 24
#: rings (ties between shortest paths), a salt (unreachable pairs), a chain longer than 5 hops
SMILES = ["c1ccc2ccccc2c1", "CC(=O)[O-].[Na+]", "OCCCCCCCC(N)C1CC1", "C1=CC=CC=CC=C1", "OC1=CC(N)CC(Cl)C1"]


def official_weights(version: str, pre_layernorm: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under the official names and shapes (v2: ``graphormer_base`` tables; padding rows 0)."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.5

    def table(rows: int, width: int) -> torch.Tensor:
        t = randn(rows, width)
        t[0] = 0.0
        return t

    node, bias = ("encoder.graph_encoder.graph_node_feature.", "encoder.graph_encoder.graph_attn_bias.") \
        if version == "v2" else ("", "")
    w = {
        f"{node}atom_encoder.weight": table(512 * 9 + 1, HIDDEN),
        f"{node}in_degree_encoder.weight": table(512, HIDDEN),
        f"{node}out_degree_encoder.weight": table(512, HIDDEN),
        f"{node}graph_token.weight": randn(1, HIDDEN),
        f"{bias}edge_encoder.weight": table(512 * 3 + 1, HEADS),
        f"{bias}edge_dis_encoder.weight": randn(128 * HEADS * HEADS, 1),
        f"{bias}spatial_pos_encoder.weight": table(512, HEADS),
        f"{bias}graph_token_virtual_distance.weight": randn(1, HEADS),
    }
    if version == "v1":
        names = dict(q="self_attention.linear_q", k="self_attention.linear_k", v="self_attention.linear_v",
                     o="self_attention.output_layer", ln1="self_attention_norm", ln2="ffn_norm")
        prefix, fc1, fc2 = "layers.{}.", "ffn.layer1", "ffn.layer2"
    else:
        names = dict(q="self_attn.q_proj", k="self_attn.k_proj", v="self_attn.v_proj", o="self_attn.out_proj",
                     ln1="self_attn_layer_norm", ln2="final_layer_norm")
        prefix, fc1, fc2 = "encoder.graph_encoder.layers.{}.", "fc1", "fc2"
    for i in range(LAYERS):
        p = prefix.format(i)
        for key in ("q", "k", "v", "o"):
            w[f"{p}{names[key]}.weight"], w[f"{p}{names[key]}.bias"] = randn(HIDDEN, HIDDEN), randn(HIDDEN)
        for key in ("ln1", "ln2"):
            w[f"{p}{names[key]}.weight"], w[f"{p}{names[key]}.bias"] = 1 + randn(HIDDEN) * 0.2, randn(HIDDEN) * 0.2
        w[f"{p}{fc1}.weight"], w[f"{p}{fc1}.bias"] = randn(FFN, HIDDEN), randn(FFN)
        w[f"{p}{fc2}.weight"], w[f"{p}{fc2}.bias"] = randn(HIDDEN, FFN), randn(HIDDEN)
    if version == "v1":
        w["final_ln.weight"], w["final_ln.bias"] = 1 + randn(HIDDEN) * 0.2, randn(HIDDEN) * 0.2
        w["out_proj.weight"], w["out_proj.bias"] = randn(1, HIDDEN), randn(1)
        return w
    w["encoder.graph_encoder.emb_layer_norm.weight"] = 1 + randn(HIDDEN) * 0.2
    w["encoder.graph_encoder.emb_layer_norm.bias"] = randn(HIDDEN) * 0.2
    if pre_layernorm:  # built, never applied (graphormer_graph_encoder.py)
        w["encoder.graph_encoder.final_layer_norm.weight"] = randn(HIDDEN)
        w["encoder.graph_encoder.final_layer_norm.bias"] = randn(HIDDEN)
    w["encoder.masked_lm_pooler.weight"], w["encoder.masked_lm_pooler.bias"] = randn(HIDDEN, HIDDEN), randn(HIDDEN)
    w["encoder.lm_head_transform_weight.weight"] = randn(HIDDEN, HIDDEN)
    w["encoder.lm_head_transform_weight.bias"] = randn(HIDDEN)
    w["encoder.layer_norm.weight"], w["encoder.layer_norm.bias"] = 1 + randn(HIDDEN) * 0.2, randn(HIDDEN) * 0.2
    w["encoder.embed_out.weight"] = randn(1, HIDDEN)
    w["encoder.lm_output_learned_bias"] = randn(1)
    return w


class FairseqConfig:
    """Stands for the omegaconf object a fairseq checkpoint pickles (not loadable with weights_only)."""

    def __init__(self) -> None:
        self.model = {"pre_layernorm": False}


class Trap:
    """Unpickling this would create ``self.path``: the importer must never run it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def save_official(path: Path, version: str, weights: dict[str, torch.Tensor], trap: Path | None = None) -> Path:
    if version == "v1":
        torch.save({"state_dict": weights, "hyper_parameters": {"multi_hop_max_dist": 5, "dropout_rate": 0.1,
                                                                "attention_dropout_rate": 0.1,
                                                                "intput_dropout_rate": 0.0}, "epoch": 3}, path)
    else:
        extra = {"trap": Trap(trap)} if trap is not None else {}
        torch.save({"model": weights, "args": argparse.Namespace(multi_hop_max_dist=5, dropout=0.0),
                    "cfg": FairseqConfig(), "optimizer_history": [{"lr": 1e-4}], **extra}, path)
    return path


def molecules(path_order: str = "official") -> tuple[list[tuple[np.ndarray, ...]], object]:
    graphs, records = [], []
    for k, smiles in enumerate(SMILES):
        g = smiles2graph(smiles)
        x, edge_index, edge_attr = g["node_feat"], g["edge_index"], g["edge_feat"]
        graphs.append((x, edge_index, edge_attr))
        s = graph_structure(x.shape[0], edge_index, path_order=path_order)
        records.append(GraphRecord(x=x, edge_index=edge_index, edge_attr=edge_attr, spd=s.spd,
                                   first_edge=s.first_edge, in_degree=s.in_degree, out_degree=s.out_degree,
                                   y=np.zeros(1, np.float32), index=k))
    return graphs, collate_graphs(records)


VARIANTS = [("v1", False), ("v2", False), ("v2", True)]


@pytest.mark.parametrize("version,pre_layernorm", VARIANTS, ids=["v1.0", "v2-postLN", "v2-preLN"])
def test_imported_model_predicts_what_the_official_forward_predicts(tmp_path: Path, version: str,
                                                                     pre_layernorm: bool) -> None:
    weights = official_weights(version, pre_layernorm)
    source = save_official(tmp_path / "official.pt", version, weights)
    config = import_checkpoint(source, tmp_path / "ours.ckpt")
    expected_variant = ("pre", False, True, "linear") if version == "v1" else \
        ("pre" if pre_layernorm else "post", True, False, "v2")
    assert (config.layer_norm, config.embedding_norm, config.final_norm, config.head) == expected_variant
    assert (config.num_layers, config.hidden_dim, config.ffn_dim, config.num_heads) == (LAYERS, HIDDEN, FFN, HEADS)
    assert (config.spatial_pos_max, config.max_distance, config.max_degree) == (None, 254, 510)

    task = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    graphs, batch = molecules()
    with torch.no_grad():
        ours = task(batch)
        official = official_forward(weights, official_batch(graphs, multi_hop_max_dist=5), version, HEADS, LAYERS,
                                    multi_hop_max_dist=5, pre_layernorm=pre_layernorm)
    torch.testing.assert_close(ours, official, **rounding_tolerance(ours, official))  # another implementation
    # the path order matters on these molecules: our default paths give another prediction
    with torch.no_grad():
        assert not torch.allclose(task(molecules("smallest_next")[1]), official, atol=1e-4)


def to_official(model: Graphormer, version: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Our weights in the official layout (the inverse mapping, written independently of the importer);
    rows that our featurisation never reaches are random."""
    w = official_weights(version, pre_layernorm=model.config.layer_norm == "pre" and version == "v2", seed=seed)
    node, bias = ("encoder.graph_encoder.graph_node_feature.", "encoder.graph_encoder.graph_attn_bias.") \
        if version == "v2" else ("", "")
    ours = model.state_dict()
    atom = w[f"{node}atom_encoder.weight"]
    row = 1
    for f, size in enumerate(ATOM_VOCAB):
        atom[512 * f + 2: 512 * f + 2 + size] = ours["nodes.features.weight"][row: row + size]
        row += size
    edge = w[f"{bias}edge_encoder.weight"]
    row = 1
    for f, size in enumerate(BOND_VOCAB):
        edge[512 * f + 3: 512 * f + 3 + size] = ours["edge_bias.features.weight"][row: row + size]
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
    names = dict(q="self_attention.linear_q", k="self_attention.linear_k", v="self_attention.linear_v",
                 o="self_attention.output_layer", ln1="self_attention_norm", ln2="ffn_norm", fc1="ffn.layer1",
                 fc2="ffn.layer2") if version == "v1" else dict(
        q="self_attn.q_proj", k="self_attn.k_proj", v="self_attn.v_proj", o="self_attn.out_proj",
        ln1="self_attn_layer_norm", ln2="final_layer_norm", fc1="fc1", fc2="fc2")
    for i in range(LAYERS):
        p = prefix.format(i)
        for part in ("weight", "bias"):
            for j, key in enumerate("qkv"):
                w[f"{p}{names[key]}.{part}"] = ours[f"layers.{i}.attention.qkv.{part}"][j * HIDDEN:(j + 1) * HIDDEN]
            for mine, theirs in (("attention.out", "o"), ("attention_norm", "ln1"), ("ffn_norm", "ln2"),
                                 ("ffn.0", "fc1"), ("ffn.3", "fc2")):
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


@pytest.mark.parametrize("version,pre_layernorm", VARIANTS, ids=["v1.0", "v2-postLN", "v2-preLN"])
def test_imported_weights_equal_our_layout_bit_for_bit(tmp_path: Path, version: str, pre_layernorm: bool) -> None:
    weights = official_weights(version, pre_layernorm, seed=5)
    config, _, _ = convert(weights, version)
    ours = Graphormer(config).eval()  # the same architecture with other (random) weights in our layout
    with torch.no_grad():
        generator = torch.Generator().manual_seed(3)
        for name, tensor in ours.state_dict().items():
            tensor.copy_(torch.randn(tensor.shape, generator=generator))
            if name in ("nodes.features.weight", "nodes.in_degree.weight", "nodes.out_degree.weight",
                        "edge_bias.features.weight", "relative_bias.table.weight"):
                tensor[0] = 0.0  # padding rows
    source = save_official(tmp_path / "official.pt", version, to_official(ours, version))
    import_checkpoint(source, tmp_path / "ours.ckpt")
    imported = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    for name, tensor in ours.state_dict().items():
        assert torch.equal(imported.model.state_dict()[name], tensor), name
    _, batch = molecules()
    with torch.no_grad():
        assert torch.equal(imported(batch), ours(batch))


def test_imported_checkpoint_starts_rpe_and_urpe_fine_tuning_with_the_same_predictions(tmp_path: Path) -> None:
    source = save_official(tmp_path / "official.pt", "v2", official_weights("v2"))
    config = import_checkpoint(source, tmp_path / "ours.ckpt")
    imported = GraphRegression.from_checkpoint(tmp_path / "ours.ckpt").eval()
    _, batch = molecules()
    for attention in ("rpe", "urpe"):
        task = GraphRegression(dataclasses.replace(config, attention=attention, dropout=0.3)).eval()
        reset = init_from_checkpoint(task, tmp_path / "ours.ckpt")
        assert reset == (["model.relative_scale.weight"] if attention == "urpe" else [])
        with torch.no_grad():
            assert torch.equal(task(batch), imported(batch))
    settings = yaml.safe_load((tmp_path / "ours.yaml").read_text())
    assert settings["data"]["init_args"]["path_order"] == "official"
    encoder = settings["model"]["init_args"]["encoder"]
    assert "attention" not in encoder and "node_vocab" not in encoder  # the user's config and the data decide
    assert encoder["spatial_pos_max"] is None and encoder["layer_norm"] == "post" and encoder["head"] == "v2"


class AttributeDict(dict):
    """Stands for Lightning's ``AttributeDict`` of hyper-parameters in a v1.0 checkpoint."""


def test_lightning_objects_are_read_as_placeholders(tmp_path: Path) -> None:
    weights = official_weights("v1")
    torch.save({"state_dict": weights, "hyper_parameters": AttributeDict(multi_hop_max_dist=3),
                "callbacks": {"ModelCheckpoint": [AttributeDict(a=1)]}}, tmp_path / "v1.ckpt")
    state, version, hparams = read_official(tmp_path / "v1.ckpt")
    assert version == "v1" and hparams == {} and set(state) == set(weights)


def test_fairseq_objects_are_read_without_running_them(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    source = save_official(tmp_path / "official.pt", "v2", official_weights("v2"), trap=marker)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(source, weights_only=True)  # what a plain safe load says
    state, version, hparams = read_official(source)
    assert version == "v2" and hparams["multi_hop_max_dist"] == 5 and not marker.exists()
    assert set(state) == set(official_weights("v2"))


@pytest.mark.parametrize("edit,message", [
    (lambda w: w.update({"encoder.graph_encoder.graph_attn_bias.edge_foo.weight": torch.zeros(2)}),
     r"unknown keys: encoder\.graph_encoder\.graph_attn_bias\.edge_foo\.weight"),
    (lambda w: w.pop("encoder.graph_encoder.layers.1.fc1.bias"),
     r"missing official keys: encoder\.graph_encoder\.layers\.1\.fc1\.bias"),
    (lambda w: w.update({"encoder.graph_encoder.graph_node_feature.atom_encoder.weight": torch.zeros(100, HIDDEN)}),
     rf"official atom_encoder has 100 rows, but our featurisation needs row {512 * 8 + ATOM_VOCAB[-1] - 1 + 2}"),
    (lambda w: w.update({"encoder.graph_encoder.layers.0.fc2.weight": torch.zeros(HIDDEN, FFN + 1)}),
     r"layers\.0\.ffn\.3\.weight \(16, 25\) in the checkpoint vs \(16, 24\)"),
    (lambda w: w.pop("encoder.graph_encoder.graph_node_feature.atom_encoder.weight"),
     r"not an official Graphormer v2 checkpoint: no .*atom_encoder\.weight"),
])
def test_keys_and_shapes_that_do_not_fit_stop_naming_them(tmp_path: Path, edit, message: str) -> None:
    weights = official_weights("v2")
    edit(weights)
    with pytest.raises(OfficialImportError, match=message):
        import_checkpoint(save_official(tmp_path / "official.pt", "v2", weights), tmp_path / "ours.ckpt")
    assert not (tmp_path / "ours.ckpt").exists()


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = save_official(tmp_path / "official.ckpt", "v1", official_weights("v1"))
    assert main([str(source), str(tmp_path / "out" / "graphormer.ckpt")]) == 0
    assert (tmp_path / "out" / "graphormer.yaml").is_file()
    torch.save({"weights": {}}, tmp_path / "other.pt")
    assert main([str(tmp_path / "other.pt"), str(tmp_path / "x.ckpt")]) == 2
    assert "neither a fairseq checkpoint ('model', official v2) nor a Lightning checkpoint" in capsys.readouterr().err


def test_train_fine_tunes_an_imported_checkpoint_as_urpe(tmp_path: Path, qm9_root: Path) -> None:
    """``train.py --config DATA --config IMPORTED.yaml --init_from IMPORTED.ckpt``: one step at the first
    learning rate of the warm-up (0) keeps the imported weights, with C = 1, on official paths."""
    import train
    from tests.conftest import tiny_run_args

    source = save_official(tmp_path / "official.pt", "v2", official_weights("v2"))
    import_checkpoint(source, tmp_path / "imported.ckpt")
    train.main(tiny_run_args(qm9_root, tmp_path / "runs", "--config", str(tmp_path / "imported.yaml"),
                             "--model.encoder.attention", "urpe", "--model.normalize_targets", "false",
                             "--init_from", str(tmp_path / "imported.ckpt"), "--trainer.max_steps", "1",
                             "--run_name", "urpe"))
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
    weights = official_weights("v1")
    del weights["edge_dis_encoder.weight"]
    weights["spatial_pos_encoder.weight"] = weights["spatial_pos_encoder.weight"][:40].clone()
    config, ours, _ = convert(weights, "v1")
    assert (config.edge_encoding, config.spatial_pos_max, config.max_distance) == ("single_hop", 39, None)
    edge, spatial = weights["edge_encoder.weight"], weights["spatial_pos_encoder.weight"]
    bond_rows = [512 * f + v + 2 for f, size in enumerate(BOND_VOCAB) for v in range(size)]
    assert torch.equal(ours["edge_bias.features.weight"][1:], edge[bond_rows])
    assert torch.equal(ours["relative_bias.table.weight"][2:], spatial[1:40])
    assert torch.equal(ours["relative_bias.table.weight"][1], weights["graph_token_virtual_distance.weight"][0])
