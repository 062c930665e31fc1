"""evaluation.ogb.submit: rows without a prediction get the training mean the data declare through
``PredictableData.training_mean``, and data that skip no rows refuse NaN predictions."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from graphormer_urpe.data.lsc_formats import PCQM4MV2
from graphormer_urpe.errors import SubmissionError
from graphormer_urpe.evaluation.ogb import submit
from graphormer_urpe.evaluation.splits import SplitPredictions
from graphormer_urpe.evaluation.submission import check_submission
from graphormer_urpe.testing.ogb_layouts import torch_save_as_numpy1

#: Rows of PCQM4Mv2's test-dev split (ogb's writer accepts no other size).
TEST_DEV = 147_037


class SkippingData:
    """The part of :class:`~graphormer_urpe.data.predictable.PredictableData` that a submission reads."""

    def __init__(self, root: Path, mean: np.ndarray | None) -> None:
        self.root = root
        self.cache_dir = root / "cache"
        self.mean = mean
        self.spec = SimpleNamespace(submission=PCQM4MV2)

    def training_mean(self) -> np.ndarray | None:
        return self.mean


def predictions_with_two_skipped_rows(root: Path) -> SplitPredictions:
    """test-dev of a release whose split file holds the official size; rows 5 and 9 have no graph."""
    (root / "pcqm4m-v2").mkdir(parents=True)
    torch_save_as_numpy1({"train": np.arange(3), "test-dev": np.arange(TEST_DEV)}, root / "pcqm4m-v2" / "split_dict.pt")
    graphs = np.arange(TEST_DEV)
    graphs[[5, 9]] = -1
    prediction = np.linspace(0.0, 1.0, TEST_DEV, dtype=np.float32)[:, None]
    prediction[[5, 9]] = np.nan
    return SplitPredictions(
        split="test-dev",
        rows=np.arange(TEST_DEV),
        graphs=graphs,
        prediction=prediction,
        target=np.full((TEST_DEV, 1), np.nan, np.float32),
        duplicates=0,
        skipped={5: "unparsable SMILES", 9: "no atoms"},
    )


def test_skipped_rows_are_predicted_as_the_training_mean_of_the_data(tmp_path: Path) -> None:
    predictions = predictions_with_two_skipped_rows(tmp_path)
    timings = {"started": time.perf_counter(), "preprocessing": 0.0, "inference": 1.0}
    record = submit(
        predictions,
        SkippingData(tmp_path, np.array([2.5])),
        "best.ckpt",
        tmp_path / "subs",
        1,
        timings,
        {"same_data_as_training": True},
    )
    y_pred = check_submission(tmp_path / "subs" / "y_pred_pcqm4m-v2_test-dev.npz", TEST_DEV)
    assert y_pred[5] == y_pred[9] == 2.5 and y_pred[6] == predictions.prediction[6, 0]
    assert record["train_mean"] == 2.5 and record["same_data_as_training"] is True
    assert record["filled_with_train_mean"] == [
        {"row": 5, "position": 5, "reason": "unparsable SMILES"},
        {"row": 9, "position": 9, "reason": "no atoms"},
    ]
    assert json.loads((tmp_path / "subs" / "y_pred_pcqm4m-v2_test-dev.log.json").read_text())["rows"] == TEST_DEV


def test_nan_predictions_of_data_that_skip_no_rows_are_refused_writing_nothing(tmp_path: Path) -> None:
    predictions = predictions_with_two_skipped_rows(tmp_path)
    timings = {"started": time.perf_counter(), "preprocessing": 0.0, "inference": 1.0}
    with pytest.raises(SubmissionError) as refused:
        submit(predictions, SkippingData(tmp_path, None), "best.ckpt", tmp_path / "subs", 1, timings, {})
    assert str(refused.value) == (
        "2 test-dev predictions are NaN and pcqm4m-v2 skips no rows, so there is no "
        "training mean to fill them with: the model produced NaN"
    )
    assert not (tmp_path / "subs").exists()
