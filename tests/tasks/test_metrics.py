"""EvaluatorMetric (the official OGB evaluator over everything seen) and per-target metrics with
missing values left out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ogb.lsc import MAG240MEvaluator
from sklearn.metrics import roc_auc_score
from torchmetrics import MeanAbsoluteError

from graphormer_urpe.errors import ConfigError
from graphormer_urpe.tasks.metrics import DefinedBinaryAUROC, EvaluatorMetric, PerTargetMetrics


def test_matches_the_official_evaluator_over_all_batches() -> None:
    metric = EvaluatorMetric("ogb.lsc.MAG240MEvaluator", "acc")
    generator = torch.Generator().manual_seed(0)
    preds = torch.randint(0, 5, (300,), generator=generator)
    target = torch.randint(0, 5, (300,), generator=generator)
    for start in range(0, 300, 70):
        metric.update(preds[start : start + 70], target[start : start + 70])
    expected = MAG240MEvaluator().eval({"y_pred": preds, "y_true": target})["acc"]
    assert math.isclose(float(metric.compute()), expected, rel_tol=float(torch.finfo(torch.float32).eps))  # float32


@pytest.mark.filterwarnings("ignore:The ``compute`` method of metric")
def test_nothing_seen_is_nan() -> None:
    assert math.isnan(float(EvaluatorMetric("ogb.lsc.MAG240MEvaluator", "acc").compute()))


@pytest.mark.parametrize(
    "path, reason",
    [
        ("ogb.lsc.NoSuchEvaluator", "module 'ogb.lsc' has no attribute 'NoSuchEvaluator'"),
        ("nowhere.Evaluator", "No module named 'nowhere'"),
        ("Evaluator", "Empty module name"),
    ],
)
def test_an_evaluator_path_that_names_nothing_is_refused_naming_the_option(path: str, reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        EvaluatorMetric(path, "acc")
    assert str(refused.value) == f"model.evaluator={path!r}: cannot be imported ({reason})"


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
    # float32 inputs and sums of at most 100 terms, in any order: 100 float32 ulps of the mean bound the error
    rel = 100 * float(np.finfo(np.float32).eps)
    assert result["val/mae/a"].item() == pytest.approx(expected[0], rel=rel)
    assert result["val/mae/b"].item() == pytest.approx(expected[1], rel=rel)
    assert np.isnan(result["val/mae/c"].item())
    assert result["val/mae"].item() == pytest.approx(expected[:2].mean(), rel=rel)
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
