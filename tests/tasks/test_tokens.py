"""Classification of tokens and nodes: the theory reproduced in seconds, accuracy over labelled nodes, checkpoints."""

from __future__ import annotations

import dataclasses

import pytest
import pytorch_lightning as pl
import torch

from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.data.synthetic.graphs import regular_graphs
from graphormer_urpe.data.synthetic.sequences import SyntheticSequenceDataModule
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.model.sequence import SequenceConfig
from graphormer_urpe.tasks import Classification, OptimConfig, SequenceTagging

GRAPH_ENCODER = GraphormerConfig(
    node_vocab=[1],
    edge_vocab=[1],
    num_outputs=7,
    num_layers=2,
    hidden_dim=16,
    ffn_dim=16,
    num_heads=4,
    attention="urpe",
    graph_token=False,
    readout="nodes",
)


@pytest.fixture
def one_thread():
    """Tiny models on a shared CPU: one thread is several times faster than two competing ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow  # 200 training steps for each attention
@pytest.mark.parametrize("attention,low,high", [("none", 0.0, 0.2), ("rpe", 0.0, 0.2), ("urpe", 0.95, 1.0)])
def test_position_identification_needs_urpe(one_thread, attention, low, high):
    """The paper's Figure 1 in miniature (n = 16, 200 steps): only URPE identifies positions; chance is 1/16."""
    pl.seed_everything(0, verbose=False)
    data = SyntheticSequenceDataModule(
        task="position", length=16, vocab_size=10, batch_size=32, val_size=256, test_size=256, seed=0
    )
    encoder = SequenceConfig(num_layers=2, hidden_dim=32, ffn_dim=64, num_heads=4, attention=attention)
    task = SequenceTagging(encoder, OptimConfig(lr=5e-3, warmup_steps=10), data=data.spec)
    assert (task.model.config.vocab_size, task.model.config.num_classes, task.model.config.length) == (10, 16, 16)
    trainer = pl.Trainer(
        max_steps=200,
        val_check_interval=200,
        check_val_every_n_epoch=None,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        num_sanity_val_steps=0,
    )
    trainer.fit(task, data)  # validates once, after the last step
    assert low <= float(trainer.callback_metrics["val/accuracy"]) <= high


def test_accuracy_counts_labelled_nodes_only():
    graphs, _ = regular_graphs(3, 3, 10, 16, 2, seed=0)
    batch = collate_graphs(graphs)
    task = Classification(GRAPH_ENCODER, target_kind="multiclass").eval()
    with torch.no_grad():
        logits = task(batch)  # (B, N, C)
        task.validation_step(batch, 0)
    labels = batch.y[..., 0]
    known = ~torch.isnan(labels)
    assert int(known.sum()) == sum(len(record.y) for record in graphs)
    expected = (logits[known].argmax(-1) == labels[known].long()).float().mean()
    (accuracy,) = task.metrics["val"]
    torch.testing.assert_close(accuracy.compute("val")["val/accuracy"], expected)
    assert task.monitor == ("val/accuracy", "max")


def test_node_labels_need_the_nodes_readout():
    graphs, _ = regular_graphs(2, 3, 10, 16, 2, seed=0)
    encoder = dataclasses.replace(GRAPH_ENCODER, readout="graph_token", graph_token=True)
    task = Classification(encoder, target_kind="multiclass")
    with pytest.raises(ValueError, match="readout=nodes"):
        task.training_step(collate_graphs(graphs), 0)


def test_sequence_task_rebuilds_from_checkpoint(tmp_path):
    encoder = SequenceConfig(
        vocab_size=5, num_classes=6, length=8, num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2, attention="urpe"
    )
    task = SequenceTagging(encoder, OptimConfig(lr=1e-3)).eval()
    with torch.no_grad():
        task.model.relative_scale.weight.uniform_(0.0, 2.0)
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}, tmp_path / "t.ckpt")
    again = SequenceTagging.from_checkpoint(tmp_path / "t.ckpt").eval()
    tokens = torch.randint(5, (2, 8))
    assert again.optim.lr == again.hparams.optim["lr"] == 1e-3
    assert torch.equal(again.model(tokens), task.model(tokens))
