"""OGB-LSC test submissions (``y_pred_<dataset>_<mode>.npz``): written through ogb's own ``save_test_submission``,
read back and checked (``docs/ogb-lsc.md``). Checks raise :class:`SubmissionError`, never ``assert`` (``python -O``)."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np
import torch

from graphormer_urpe.data.lsc_formats import FORMATS, MODES, PCQM4MV2, PREDICTION_KEY, SubmissionFormat
from graphormer_urpe.errors import SubmissionError

log = logging.getLogger("graphormer_urpe")


def prediction_problem(
    y_pred: np.ndarray, expected_rows: int, dtype: np.dtype | None = None, num_classes: int | None = None
) -> str | None:
    """What is wrong with a prediction array for a split of ``expected_rows`` rows, or None; ``dtype`` None
    accepts any floating dtype, or integer labels in ``0 .. num_classes - 1`` for classification."""
    if y_pred.shape != (expected_rows,):
        return (
            f"y_pred has shape {y_pred.shape}, expected ({expected_rows},): one prediction per row of the "
            "test split, in the split's order"
        )
    if dtype is not None and y_pred.dtype != dtype:
        return f"y_pred has dtype {y_pred.dtype}, expected {dtype}"
    if num_classes is not None:
        if not np.issubdtype(y_pred.dtype, np.integer):
            return f"y_pred has dtype {y_pred.dtype}, expected integer class labels"
        bad = np.flatnonzero((y_pred < 0) | (y_pred >= num_classes))
        if bad.size:
            return f"y_pred has {bad.size} labels outside 0..{num_classes - 1}, first at positions {bad[:5].tolist()}"
        return None
    if not np.issubdtype(y_pred.dtype, np.floating):
        return f"y_pred has dtype {y_pred.dtype}, expected floating-point predictions"
    bad = np.flatnonzero(~np.isfinite(y_pred))
    if bad.size:
        return f"y_pred has {bad.size} non-finite values (NaN or inf), first at positions {bad[:5].tolist()}"
    return None


def check_submission(
    path: Path | str, expected_rows: int, fmt: SubmissionFormat = PCQM4MV2, mode: str | None = None
) -> np.ndarray:
    """Read a submission file, check its name (for ``mode``; None: any), contents and values; return them."""
    path = Path(path)
    names = {fmt.filename(m): m for m in MODES}
    if mode is None and path.name not in names:
        raise SubmissionError(f"{path}: the file must be named {' or '.join(names)}")
    if mode is not None and path.name != fmt.filename(mode):
        raise SubmissionError(f"{path}: a {mode} submission must be named {fmt.filename(mode)}")
    if not path.is_file():
        raise SubmissionError(f"{path} does not exist")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise SubmissionError(f"{path} is not a readable .npz file ({error})") from error
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise SubmissionError(f"{path} holds a bare {type(loaded).__name__}, expected an .npz archive")
    with loaded:
        if loaded.files != [PREDICTION_KEY]:
            raise SubmissionError(f"{path} holds the arrays {loaded.files}, expected exactly ['{PREDICTION_KEY}']")
        try:
            y_pred = loaded[PREDICTION_KEY]
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise SubmissionError(f"{path}: '{PREDICTION_KEY}' cannot be read ({error})") from error
    problem = prediction_problem(y_pred, expected_rows, fmt.dtype, fmt.num_classes)
    if problem is not None:
        raise SubmissionError(f"{path}: {problem}")
    return y_pred


def write_submission(
    y_pred: np.ndarray | torch.Tensor,
    directory: Path | str,
    mode: str,
    expected_rows: int,
    fmt: SubmissionFormat = PCQM4MV2,
) -> Path:
    """Write a submission into ``directory`` with ogb's ``save_test_submission``; read it back and check it.

    Shapes:
        y_pred: (expected_rows,) values, or integer class labels for a classification format (any device).
    """
    if mode not in MODES:
        raise SubmissionError(f"mode '{mode}' is not one of {', '.join(MODES)}")
    if isinstance(y_pred, torch.Tensor):
        y_pred = y_pred.detach().cpu().numpy()
    if fmt.num_classes is None:
        y_pred = np.asarray(y_pred, dtype=np.float32)
    problem = prediction_problem(y_pred, expected_rows, num_classes=fmt.num_classes)
    if problem is not None:
        raise SubmissionError(f"not writing the {mode} submission: {problem}")
    try:
        fmt.evaluator().save_test_submission({PREDICTION_KEY: y_pred}, str(directory), mode=mode)
    except AssertionError as error:  # ogb checks the official split sizes with bare asserts
        raise SubmissionError(
            f"ogb's save_test_submission refused {y_pred.shape[0]} {mode} predictions: the split in "
            f"split_dict.pt has {expected_rows} rows, which is not the official {mode} size"
        ) from error
    path = Path(directory) / fmt.filename(mode)
    written = check_submission(path, expected_rows, fmt, mode)
    if not np.array_equal(written, y_pred):
        raise SubmissionError(f"{path} does not hold the predictions that were written")
    return path


def check_submission_file(path: Path, data_root: Path) -> dict:
    """``graphormer-urpe evaluate --check_submission``: check an existing file against the split sizes under
    ``data_root`` (ogb's official sizes when the dataset is not there); print one line when it is valid."""
    fmt = next((f for name, f in FORMATS.items() if path.name.startswith(f"y_pred_{name}_")), None)
    if fmt is None:
        raise SubmissionError(
            f"{path}: not a submission file name (expected y_pred_<dataset>_<mode>.npz for a "
            f"dataset in {sorted(FORMATS)})"
        )
    mode = next((m for m in MODES if path.name == fmt.filename(m)), None)
    if mode is None:
        raise SubmissionError(f"{path}: the file must be named {' or '.join(fmt.filename(m) for m in MODES)}")
    sizes_from = "split_dict.pt"
    try:
        expected = fmt.split_size(data_root, mode)
    except FileNotFoundError as error:
        expected, sizes_from = fmt.official_sizes[mode], "official"
        log.info(
            "the expected row count comes from the dataset's split file, and %s: checking against the "
            "official %s %s size instead, %d rows (pass --data-root DIR with DIR/%s/split_dict.pt for "
            "another release)",
            error,
            fmt.dataset,
            mode,
            expected,
            fmt.directory or fmt.dataset,
        )
    y_pred = check_submission(path, expected, fmt, mode)
    against = "ogb's official split size" if sizes_from == "official" else f"the split file under {data_root}"
    print(
        f"{path} is a valid {fmt.dataset} {mode} submission: {len(y_pred)} finite {y_pred.dtype} predictions, "
        f"as many rows as {against}",
        flush=True,
    )
    return {
        "file": str(path),
        "dataset": fmt.dataset,
        "mode": mode,
        "rows": len(y_pred),
        "valid": True,
        "expected_rows_from": sizes_from,
    }
