"""Tasks on your own data: several targets with missing values, classification losses and metrics,
normalisation undone, node-level rows, and task/data agreement. (tasks.py and metrics.py)"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from torchmetrics import MeanAbsoluteError

from graphormer_urpe.cli import REPO_DIR, GraphormerCLI
from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import DataError, SmilesTable
from graphormer_urpe.metrics import DefinedBinaryAUROC, PerTargetMetrics
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.tasks import GraphClassification, GraphormerTask, GraphRegression
from tests.conftest import make_record

TINY = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)
EXAMPLE = REPO_DIR / "examples" / "qm9_sample.csv"


def test_mae_per_target_leaves_missing_values_out_and_averages_targets() -> None:
    rng = np.random.default_rng(0)
    metrics = PerTargetMetrics(MeanAbsoluteError, "mae", ["a", "b", "c"])
    preds, targets = rng.normal(size=(2, 50, 3)), rng.normal(size=(2, 50, 3))
    targets[rng.random(targets.shape) < 0.3] = np.nan
    targets[:, :, 2] = np.nan  # no value at all: undefined, left out of the mean
    for p, t in zip(preds, targets):  # two batches
        metrics.update(torch.tensor(p, dtype=torch.float32), torch.tensor(t, dtype=torch.float32))
    result = metrics.compute("val")
    expected = np.nanmean(np.abs(preds - targets).reshape(-1, 3), axis=0)
    assert result["val/mae/a"].item() == pytest.approx(expected[0], rel=1e-5)
    assert result["val/mae/b"].item() == pytest.approx(expected[1], rel=1e-5)
    assert np.isnan(result["val/mae/c"].item())
    assert result["val/mae"].item() == pytest.approx(expected[:2].mean(), rel=1e-5)
    single = PerTargetMetrics(MeanAbsoluteError, "mae", ["y"])
    single.update(torch.tensor([[1.0], [2.0]]), torch.tensor([[0.0], [np.nan]]))
    assert single.compute("test") == {"test/mae": torch.tensor(1.0)}  # one target: just the mean


def test_roc_auc_per_target_equals_sklearn_and_is_undefined_for_one_class() -> None:
    rng = np.random.default_rng(1)
    scores = rng.random((80, 3))
    labels = (rng.random((80, 3)) < 0.4).astype(float)
    labels[rng.random((80, 3)) < 0.25] = np.nan
    labels[:, 2] = np.where(np.isnan(labels[:, 2]), np.nan, 1.0)  # target c: one class only
    metrics = PerTargetMetrics(DefinedBinaryAUROC, "auroc", ["a", "b", "c"], labels=True)
    metrics.update(torch.tensor(scores), torch.tensor(labels))
    result = metrics.compute("val")
    for k, name in enumerate("ab"):
        known = ~np.isnan(labels[:, k])
        assert result[f"val/auroc/{name}"].item() == pytest.approx(roc_auc_score(labels[known, k], scores[known, k]))
    assert np.isnan(result["val/auroc/c"].item())
    assert result["val/auroc"].item() == pytest.approx((result["val/auroc/a"] + result["val/auroc/b"]).item() / 2)


def batch_with_labels(labels: np.ndarray):
    rng = np.random.default_rng(2)
    records = [make_record(rng, int(rng.integers(2, 8)), index=i)._replace(y=row.astype(np.float32))
               for i, row in enumerate(labels)]
    return collate_graphs(records)


def quiet_training_step(task: GraphormerTask, batch) -> torch.Tensor:
    with warnings.catch_warnings():  # self.log outside a Trainer
        warnings.simplefilter("ignore")
        return task.training_step(batch, 0)


def test_binary_cross_entropy_over_known_labels_only() -> None:
    labels = np.array([[1, 0], [np.nan, 1], [0, np.nan], [1, 1]])
    batch = batch_with_labels(labels)
    torch.manual_seed(0)
    task = GraphClassification(GraphormerConfig(num_outputs=2, **TINY), target_kind="binary")
    logits = task(batch)
    known = ~torch.isnan(batch.y)
    expected = F.binary_cross_entropy_with_logits(logits[known], batch.y[known])
    torch.testing.assert_close(quiet_training_step(task, batch), expected)
    assert task.monitor == ("val/auroc", "max") and task.target_names == ["y0", "y1"]


def test_cross_entropy_over_known_classes_only() -> None:
    labels = np.array([[2], [np.nan], [0], [1]])
    batch = batch_with_labels(labels)
    torch.manual_seed(0)
    task = GraphClassification(GraphormerConfig(num_outputs=3, **TINY), target_kind="multiclass")
    logits = task(batch)
    expected = F.cross_entropy(logits[[0, 2, 3]], torch.tensor([2, 0, 1]))
    torch.testing.assert_close(quiet_training_step(task, batch), expected)
    assert task.monitor == ("val/accuracy", "max")


def test_prediction_columns_hold_labels_and_probabilities_with_empty_failed_rows() -> None:
    binary = GraphClassification(GraphormerConfig(num_outputs=1, **TINY), target_kind="binary",
                                 target_names=["polar"])
    columns = binary.prediction_columns(np.array([[0.7], [np.nan], [0.2]]))
    assert columns["polar"].tolist() == [1, pd.NA, 0]
    np.testing.assert_array_equal(columns["polar_probability"], [0.7, np.nan, 0.2])
    multi = GraphClassification(GraphormerConfig(num_outputs=3, **TINY), target_kind="multiclass",
                                target_names=["rings"])
    columns = multi.prediction_columns(np.array([[0.1, 0.6, 0.3], [np.nan] * 3]))
    assert columns["rings"].tolist() == [1, pd.NA] and list(columns)[1:] == [f"rings_probability_{k}" for k in range(3)]


def test_node_level_rows_leave_padding_out() -> None:
    batch = collate_graphs([make_record(np.random.default_rng(0), n)._replace(y=np.full((n, 1), float(n), np.float32))
                            for n in (3, 5)])
    output = torch.arange(2 * 5 * 2, dtype=torch.float32).reshape(2, 5, 2)
    rows, targets = GraphormerTask.outputs_and_targets(output, batch)
    assert rows.shape == (8, 2) and targets.flatten().tolist() == [3.0] * 3 + [5.0] * 5
    torch.testing.assert_close(rows, torch.cat([output[0, :3], output[1]]))


def test_normalisation_uses_training_targets_and_is_undone_in_metrics(tmp_path: Path) -> None:
    """Two targets in very different units, one with missing values: the model learns standardised
    targets, and predictions and the logged MAE are in the data's units."""
    data = GraphDataModule(SmilesTable(str(EXAMPLE), targets=["gap_ev", "mu_debye"]), root=str(tmp_path),
                           batch_size=32, num_workers=0, preprocess_workers=0)
    torch.manual_seed(0)
    task = GraphRegression(GraphormerConfig(num_outputs=2, node_vocab=data.node_vocab, edge_vocab=data.edge_vocab,
                                            **TINY), lr=1e-3, warmup_steps=1, normalize_targets=True,
                           target_names=data.target_names)
    trainer = pl.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(task, data)
    mean, std = data.target_statistics()
    np.testing.assert_allclose(task.target_mean.numpy(), mean)
    np.testing.assert_allclose(task.target_std.numpy(), std)
    logged = trainer.validate(task, data, verbose=False)[0]
    task.eval()
    with torch.no_grad():
        batches = list(data.val_dataloader())
        prediction = torch.cat([task(b) for b in batches])
        raw = torch.cat([task.model(b) for b in batches])
    target = torch.cat([b.y for b in batches])
    torch.testing.assert_close(prediction, raw * task.target_std + task.target_mean)
    for k, name in enumerate(["gap_ev", "mu_debye"]):
        known = ~torch.isnan(target[:, k])
        assert logged[f"val/mae/{name}"] == pytest.approx((prediction[known, k] - target[known, k]).abs().mean().item(),
                                                          rel=1e-5)
    assert int(torch.isnan(target[:, 1]).sum()) > 0  # the masked case is exercised


def test_kinds_of_task_and_data_must_agree() -> None:
    with pytest.raises(DataError, match="binary class labels .*graphormer_urpe.tasks.GraphClassification"):
        GraphRegression(GraphormerConfig(**TINY), target_kind="binary")
    with pytest.raises(DataError, match="regression ones: .*graphormer_urpe.tasks.GraphRegression"):
        GraphClassification(GraphormerConfig(**TINY), target_kind="regression")


def test_a_mismatch_in_the_config_stops_with_the_message_not_a_traceback(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stop:
        GraphormerCLI(["--config", "smiles_csv_example", "--data.source.targets", "[polar]",
                       "--data.source.task", "binary", "--run_root", str(tmp_path), "--logger", "none"])
    assert stop.value.code == 2
    cause = stop.value.__cause__
    while cause is not None and not isinstance(cause, DataError):
        cause = cause.__cause__ or cause.__context__
    assert cause is not None and "model.class_path: graphormer_urpe.tasks.GraphClassification" in str(cause)
