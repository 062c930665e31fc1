"""OGB-LSC submission files: written through the official evaluator at official shapes, and checked."""

from __future__ import annotations

import numpy as np
import pytest

from graphormer_urpe.submission import MAG240M_SUBMISSION, SubmissionError, check_submission


@pytest.mark.parametrize("mode, rows", [("test-dev", 88_092), ("test-challenge", 58_726)])
def test_mag240m_submission_round_trip(tmp_path, mode: str, rows: int) -> None:
    y_pred = np.random.default_rng(0).integers(0, 153, rows)
    path = MAG240M_SUBMISSION.save(y_pred, tmp_path, mode)
    assert path.name == f"y_pred_mag240m_{mode}.npz"
    summary = check_submission(path)
    assert summary["rows"] == rows and summary["mode"] == mode
    with np.load(path) as archive:
        np.testing.assert_array_equal(archive["y_pred"], y_pred)


@pytest.mark.parametrize("y_pred, message", [
    (np.zeros(100, np.int64), r"shape \(100,\), expected \(88092,\)"),
    (np.zeros(88_092, np.float32), "expected integer class labels"),
    (np.full(88_092, 153), r"labels span 153..153, expected 0..152"),
])
def test_malformed_predictions_are_refused_before_writing(tmp_path, y_pred, message) -> None:
    with pytest.raises(SubmissionError, match=message):
        MAG240M_SUBMISSION.save(y_pred, tmp_path, "test-dev")
    assert not list(tmp_path.iterdir())


def test_check_names_what_is_wrong(tmp_path) -> None:
    wrong_shape = tmp_path / "y_pred_mag240m_test-challenge.npz"
    np.savez_compressed(wrong_shape, y_pred=np.zeros(88_092, np.int16))
    with pytest.raises(SubmissionError, match=r"shape \(88092,\), expected \(58726,\)"):
        check_submission(wrong_shape)
    no_key = tmp_path / "y_pred_mag240m_test-dev.npz"
    np.savez_compressed(no_key, predictions=np.zeros(88_092, np.int16))
    with pytest.raises(SubmissionError, match="no 'y_pred' array"):
        check_submission(no_key)
    with pytest.raises(SubmissionError, match="not an official submission file name"):
        check_submission(tmp_path / "predictions.npz")
    broken = tmp_path / "y_pred_mag240m_test-dev.npz"
    broken.write_bytes(b"not a zip")
    with pytest.raises(SubmissionError, match="cannot be read"):
        check_submission(broken)
