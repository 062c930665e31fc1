"""EvaluatorMetric: the official OGB evaluator over everything seen."""

from __future__ import annotations

import math

import pytest
import torch
from ogb.lsc import MAG240MEvaluator

from graphormer_urpe.metrics import EvaluatorMetric


def test_matches_the_official_evaluator_over_all_batches() -> None:
    metric = EvaluatorMetric("ogb.lsc.MAG240MEvaluator", "acc")
    generator = torch.Generator().manual_seed(0)
    preds = torch.randint(0, 5, (300,), generator=generator)
    target = torch.randint(0, 5, (300,), generator=generator)
    for start in range(0, 300, 70):
        metric.update(preds[start:start + 70], target[start:start + 70])
    expected = MAG240MEvaluator().eval({"y_pred": preds, "y_true": target})["acc"]
    assert math.isclose(float(metric.compute()), expected, abs_tol=1e-6)


@pytest.mark.filterwarnings("ignore:The ``compute`` method of metric")
def test_nothing_seen_is_nan() -> None:
    assert math.isnan(float(EvaluatorMetric("ogb.lsc.MAG240MEvaluator", "acc").compute()))
