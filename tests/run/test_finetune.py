"""RPE -> URPE: a trained RPE checkpoint starts a URPE model that predicts exactly what the RPE model did."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.run.finetune import init_from_checkpoint
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.testing.graphs import make_record

ENCODER = GraphormerConfig(node_vocab=[28], edge_vocab=[4], num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4,
                           attention="rpe", dropout=0.0, attention_dropout=0.0)


def trained_like(task: torch.nn.Module, seed: int) -> None:
    """Random weights far from the init (as after training), target statistics included."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in task.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.randn(tensor.shape, generator=generator).abs() if tensor.ndim == 1
                             else torch.randn(tensor.shape, generator=generator))


def save_checkpoint(task: torch.nn.Module, path) -> None:
    """What Lightning writes, as far as ``init_from_checkpoint`` reads it."""
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}, path)


@pytest.mark.parametrize("seed", [0, 1])
def test_rpe_checkpoint_becomes_an_equal_urpe_model(tmp_path, rng, seed):
    rpe = GraphRegression(ENCODER).eval()
    trained_like(rpe, seed)
    save_checkpoint(rpe, tmp_path / "rpe.ckpt")
    batch = collate_graphs([make_record(rng, n, index=i) for i, n in enumerate((7, 4, 12))])

    urpe = GraphRegression(dataclasses.replace(ENCODER, attention="urpe")).eval()
    with torch.no_grad():
        urpe.model.relative_scale.weight.uniform_(0.5, 1.5)  # must be reset, not kept
    reset = init_from_checkpoint(urpe, tmp_path / "rpe.ckpt")

    assert reset == ["model.relative_scale.weight"]
    scale = urpe.model.relative_scale.weight
    assert torch.equal(scale[1:], torch.ones_like(scale[1:])) and torch.equal(scale[0], torch.zeros_like(scale[0]))
    assert torch.equal(urpe(batch), rpe(batch))
    assert torch.equal(urpe.target_std, rpe.target_std)


def test_urpe_checkpoint_keeps_its_scale(tmp_path):
    source = GraphRegression(dataclasses.replace(ENCODER, attention="urpe"))
    trained_like(source, 0)
    save_checkpoint(source, tmp_path / "urpe.ckpt")
    target = GraphRegression(dataclasses.replace(ENCODER, attention="urpe"))
    assert init_from_checkpoint(target, tmp_path / "urpe.ckpt") == []
    assert torch.equal(target.model.relative_scale.weight, source.model.relative_scale.weight)


def test_mismatched_checkpoints_are_refused_by_name(tmp_path):
    urpe = GraphRegression(dataclasses.replace(ENCODER, attention="urpe"))
    save_checkpoint(urpe, tmp_path / "urpe.ckpt")
    with pytest.raises(CheckpointError, match="checkpoint parameters are not in the model: model.relative_scale"):
        init_from_checkpoint(GraphRegression(ENCODER), tmp_path / "urpe.ckpt")  # C cannot silently vanish

    deeper = GraphRegression(dataclasses.replace(ENCODER, num_layers=3))
    with pytest.raises(CheckpointError, match="not in the checkpoint: model.layers.2"):
        init_from_checkpoint(deeper, tmp_path / "urpe.ckpt")

    wider = GraphRegression(dataclasses.replace(ENCODER, hidden_dim=32, ffn_dim=32))
    with pytest.raises(CheckpointError, match=r"features.weight \(29, 16\) in the checkpoint vs \(29, 32\)"):
        init_from_checkpoint(wider, tmp_path / "urpe.ckpt")

    with pytest.raises(CheckpointError, match="nowhere.ckpt does not exist"):
        init_from_checkpoint(urpe, tmp_path / "nowhere.ckpt")
    torch.save({"weights": {}}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="not a Lightning checkpoint"):
        init_from_checkpoint(urpe, tmp_path / "plain.pt")
