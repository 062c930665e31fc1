"""OGB-LSC submission files: written by ogb at the official sizes, read back, and every defect named."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

import evaluate
from graphormer_urpe.data.lsc_formats import MAG240M, PCQM4MV2, SubmissionFormat
from graphormer_urpe.errors import SubmissionError
from graphormer_urpe.evaluation.submission import check_submission, write_submission
from graphormer_urpe.testing.ogb_layouts import torch_save_as_numpy1, write_pcqm4mv2

#: The official test split sizes (here only to build arrays; the code reads them from split_dict.pt).
OFFICIAL = {"test-dev": 147_037, "test-challenge": 147_432}


@pytest.mark.parametrize("mode", list(OFFICIAL))
def test_official_size_submission_is_written_by_ogb_and_read_back(mode: str, tmp_path: Path) -> None:
    rows = OFFICIAL[mode]
    y_pred = torch.linspace(3.0, 9.0, rows, dtype=torch.float64)  # any float tensor is accepted
    path = write_submission(y_pred, tmp_path / "subs", mode, rows)
    assert path == tmp_path / "subs" / f"y_pred_pcqm4m-v2_{mode}.npz"
    with np.load(path) as archive:
        assert archive.files == ["y_pred"] and archive["y_pred"].dtype == np.float32
        np.testing.assert_array_equal(archive["y_pred"], y_pred.float().numpy())
    np.testing.assert_array_equal(check_submission(path, rows), y_pred.float().numpy())


def test_the_expected_size_comes_from_the_split_file(tmp_path: Path) -> None:
    splits = {
        "train": np.arange(3),
        "valid": np.arange(3, 4),
        "test-dev": np.arange(4, 9),
        "test-challenge": np.arange(9, 10),
    }
    write_pcqm4mv2(tmp_path, ["C"] * 10, np.ones(10), splits)
    assert PCQM4MV2.split_size(tmp_path, "test-dev") == 5 and PCQM4MV2.split_size(tmp_path, "test-challenge") == 1


def test_a_non_official_size_is_refused_by_ogb_with_a_clear_error(tmp_path: Path) -> None:
    refused = "refused 40 test-dev predictions: the split in split_dict.pt has 40 rows, which is not the official"
    with pytest.raises(SubmissionError, match=refused):
        write_submission(np.zeros(40, np.float32), tmp_path, "test-dev", 40)
    assert not (tmp_path / "y_pred_pcqm4m-v2_test-dev.npz").exists()


@pytest.mark.parametrize(
    ("y_pred", "message"),
    [
        (np.zeros(OFFICIAL["test-dev"] - 1, np.float32), r"shape \(147036,\), expected \(147037,\)"),
        (np.zeros((OFFICIAL["test-dev"], 1), np.float32), r"shape \(147037, 1\), expected \(147037,\)"),
        (
            np.where(np.arange(OFFICIAL["test-dev"]) == 9, np.nan, 1.0),
            r"1 non-finite values \(NaN or inf\), first at "
            r"positions \[9\]",
        ),
    ],
)
def test_bad_predictions_are_not_written(y_pred: np.ndarray, message: str, tmp_path: Path) -> None:
    with pytest.raises(SubmissionError, match=message):
        write_submission(y_pred, tmp_path, "test-dev", OFFICIAL["test-dev"])
    assert not list(tmp_path.iterdir())


def _official_file(directory: Path, mode: str = "test-dev", **arrays: np.ndarray) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"y_pred_pcqm4m-v2_{mode}.npz"
    np.savez_compressed(path, **arrays)
    return path


def test_every_defect_of_a_file_is_named(tmp_path: Path) -> None:
    rows = OFFICIAL["test-dev"]
    good = np.ones(rows, np.float32)
    cases = [
        (_official_file(tmp_path / "a", y_pred=good[:-5]), r"shape \(147032,\), expected \(147037,\)"),
        (_official_file(tmp_path / "b", y_pred=good.astype(np.float64)), "dtype float64, expected float32"),
        (
            _official_file(tmp_path / "c", y_pred=np.where(np.arange(rows) < 3, np.inf, good).astype(np.float32)),
            r"3 non-finite values \(NaN or inf\), first at positions \[0, 1, 2\]",
        ),
        (_official_file(tmp_path / "d", y_pred=good, extra=good), r"holds the arrays \['y_pred', 'extra'\]"),
        (_official_file(tmp_path / "e", predictions=good), r"holds the arrays \['predictions'\]"),
        (_official_file(tmp_path / "f", y_pred=good.astype(np.int64)), "dtype int64, expected float32"),
    ]
    for path, message in cases:
        with pytest.raises(SubmissionError, match=message) as error:
            check_submission(path, rows)
        assert str(path) in str(error.value)

    renamed = tmp_path / "a" / "predictions.npz"
    renamed.write_bytes((tmp_path / "b" / "y_pred_pcqm4m-v2_test-dev.npz").read_bytes())
    with pytest.raises(
        SubmissionError, match="must be named y_pred_pcqm4m-v2_test-dev.npz or y_pred_pcqm4m-v2_test-challenge.npz"
    ):
        check_submission(renamed, rows)
    with pytest.raises(SubmissionError, match="a test-challenge submission must be named"):
        check_submission(tmp_path / "b" / "y_pred_pcqm4m-v2_test-dev.npz", rows, mode="test-challenge")
    not_npz = tmp_path / "g" / "y_pred_pcqm4m-v2_test-dev.npz"
    not_npz.parent.mkdir()
    not_npz.write_bytes(b"not an archive")
    with pytest.raises(SubmissionError, match="not a readable .npz file"):
        check_submission(not_npz, rows)
    with pytest.raises(SubmissionError, match="does not exist"):
        check_submission(tmp_path / "h" / "y_pred_pcqm4m-v2_test-dev.npz", rows)
    bare = tmp_path / "y_pred_pcqm4m-v2_test-challenge.npz"
    with open(bare, "wb") as f:
        np.save(f, good)
    with pytest.raises(SubmissionError, match="holds a bare ndarray"):
        check_submission(bare, rows)


# ----------------------------------------------------------------------------- MAG240M: class labels

MAG_OFFICIAL = {"test-dev": 88_092, "test-challenge": 58_726}


@pytest.mark.parametrize("mode", list(MAG_OFFICIAL))
def test_mag240m_labels_are_written_by_ogb_and_read_back(mode: str, tmp_path: Path) -> None:
    rows = MAG_OFFICIAL[mode]
    y_pred = torch.as_tensor(np.random.default_rng(0).integers(0, 153, rows))
    path = write_submission(y_pred, tmp_path, mode, rows, MAG240M)
    assert path.name == f"y_pred_mag240m_{mode}.npz"
    with np.load(path) as archive:
        assert archive["y_pred"].dtype == np.int16  # ogb's np.short
    np.testing.assert_array_equal(check_submission(path, rows, MAG240M), y_pred.numpy())


def test_mag240m_split_size_comes_from_the_single_test_split(tmp_path: Path) -> None:
    """The MAG240M release holds one 'test' split; ogb gives 3 of every 5 rows to test-dev."""
    folder = tmp_path / "mag240m_kddcup2021"
    folder.mkdir()
    torch_save_as_numpy1(
        {"train": np.arange(5), "valid": np.arange(5, 7), "test": np.arange(7, 17)}, folder / "split_dict.pt"
    )
    assert MAG240M.split_size(tmp_path, "test-dev") == 6 and MAG240M.split_size(tmp_path, "test-challenge") == 4


@pytest.mark.parametrize(
    "y_pred, message",
    [
        (np.zeros(88_092, np.float32), "expected integer class labels"),
        (np.full(88_092, 153), "88092 labels outside 0..152, first at positions \\[0, 1, 2, 3, 4\\]"),
        (np.zeros(100, np.int64), r"shape \(100,\), expected \(88092,\)"),
    ],
)
def test_bad_mag240m_labels_are_not_written(y_pred: np.ndarray, message: str, tmp_path: Path) -> None:
    with pytest.raises(SubmissionError, match=message):
        write_submission(y_pred, tmp_path, "test-dev", 88_092, MAG240M)
    assert not tmp_path.joinpath("y_pred_mag240m_test-dev.npz").exists()


@pytest.mark.parametrize("fmt", [PCQM4MV2, MAG240M], ids=lambda fmt: fmt.dataset)
@pytest.mark.parametrize("mode", ["test-dev", "test-challenge"])
def test_check_submission_without_the_dataset_uses_ogbs_official_sizes(
    fmt: SubmissionFormat, mode: str, tmp_path: Path, package_log, capsys: pytest.CaptureFixture
) -> None:
    """ogb's writer asserts the official size, so a file it wrote checks against ``official_sizes``."""
    package_log.set_level(logging.INFO, logger="graphormer_urpe")
    rows = fmt.official_sizes[mode]
    assert rows == (OFFICIAL if fmt is PCQM4MV2 else MAG_OFFICIAL)[mode]
    path = write_submission(np.ones(rows, fmt.dtype), tmp_path / "subs", mode, rows, fmt)
    capsys.readouterr()
    result = evaluate.main(["--check-submission", str(path), "--data-root", str(tmp_path / "nowhere")])
    assert result == {
        "file": str(path),
        "dataset": fmt.dataset,
        "mode": mode,
        "rows": rows,
        "valid": True,
        "expected_rows_from": "official",
    }
    assert capsys.readouterr().out == (
        f"{path} is a valid {fmt.dataset} {mode} submission: {rows} finite "
        f"{np.dtype(fmt.dtype)} predictions, as many rows as ogb's official split "
        "size\n"
    )  # one line on success
    assert f"checking against the official {fmt.dataset} {mode} size instead, {rows} rows" in package_log.text
    short = tmp_path / "short" / path.name
    short.parent.mkdir()
    with np.load(path) as archive:
        np.savez(short, y_pred=archive["y_pred"][:-1])
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["--check-submission", str(short), "--data-root", str(tmp_path / "nowhere")])
    assert stop.value.code == 1 and f"shape ({rows - 1},), expected ({rows},)" in package_log.text
