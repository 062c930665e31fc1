"""OGB-LSC test submissions: writing them through the official evaluators, and checking a file.

A datamodule that can be submitted exposes ``submission_format`` (a :class:`SubmissionFormat`),
``split_index(split)`` (the ids a submission's rows refer to, in the official order) and
``predict_on(split)``; its task's ``predict_step`` returns ``{"index", "prediction"}``. Then
:func:`write_submission` works for any dataset, and :func:`check_submission` recognises a file by
its official name (``y_pred_<dataset>_<mode>.npz``).
"""

from __future__ import annotations

import importlib
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytorch_lightning as pl
import torch


class SubmissionError(ValueError):
    """A submission file or prediction array does not have the official form."""


@dataclass(frozen=True)
class SubmissionFormat:
    """How one OGB-LSC dataset's test predictions are submitted.

    Args:
        dataset: the tag in the official file name (``y_pred_<dataset>_<mode>.npz``).
        sizes: rows of each submission mode.
        evaluator: dotted path of the OGB evaluator class whose ``save_test_submission`` writes it.
        kind: ``class`` (integer labels in ``0 .. num_classes - 1``) or ``value`` (finite floats).
        num_classes: number of classes for ``class`` submissions.
    """

    dataset: str
    sizes: Mapping[str, int]
    evaluator: str
    kind: Literal["class", "value"]
    num_classes: int | None = None

    def filename(self, mode: str) -> str:
        return f"y_pred_{self.dataset}_{mode}.npz"

    def make_evaluator(self) -> Any:
        module, name = self.evaluator.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)()

    def problems(self, y_pred: np.ndarray, mode: str) -> list[str]:
        """Everything that keeps ``y_pred`` from being a valid ``mode`` submission."""
        if mode not in self.sizes:
            return [f"unknown mode '{mode}' (expected one of {sorted(self.sizes)})"]
        found = []
        if y_pred.shape != (self.sizes[mode],):
            found.append(f"shape {y_pred.shape}, expected ({self.sizes[mode]},)")
        if self.kind == "class":
            if not np.issubdtype(y_pred.dtype, np.integer):
                found.append(f"dtype {y_pred.dtype}, expected integer class labels")
            elif y_pred.size and (y_pred.min() < 0 or y_pred.max() >= self.num_classes):
                found.append(f"labels span {y_pred.min()}..{y_pred.max()}, expected 0..{self.num_classes - 1}")
        elif not np.isfinite(np.asarray(y_pred, dtype=np.float64)).all():
            found.append(f"{int((~np.isfinite(y_pred)).sum())} non-finite predictions")
        return found

    def save(self, y_pred: np.ndarray, directory: Path, mode: str) -> Path:
        """Write ``y_pred`` with the official evaluator's ``save_test_submission``; returns the file."""
        found = self.problems(y_pred, mode)
        if found:
            raise SubmissionError(f"{self.dataset} {mode} predictions: " + "; ".join(found))
        directory.mkdir(parents=True, exist_ok=True)
        self.make_evaluator().save_test_submission({"y_pred": y_pred}, str(directory), mode)
        return directory / self.filename(mode)


MAG240M_SUBMISSION = SubmissionFormat(
    dataset="mag240m", sizes={"test-dev": 88_092, "test-challenge": 58_726},
    evaluator="ogb.lsc.MAG240MEvaluator", kind="class", num_classes=153,
)
#: Every known format by the dataset tag of its file names.
SUBMISSION_FORMATS = {f.dataset: f for f in (MAG240M_SUBMISSION,)}
_FILE_NAME = re.compile(r"y_pred_(?P<dataset>.+)_(?P<mode>test-dev|test-challenge)\.npz")


def check_submission(path: str | Path) -> dict:
    """Validate a submission file by its official name; returns a summary.

    Raises:
        SubmissionError: unknown name, unreadable file, missing ``y_pred``, wrong shape, dtype or values.
    """
    path = Path(path)
    match = _FILE_NAME.fullmatch(path.name)
    if match is None or match["dataset"] not in SUBMISSION_FORMATS:
        known = ", ".join(f.filename("<mode>") for f in SUBMISSION_FORMATS.values())
        raise SubmissionError(f"{path}: not an official submission file name (known: {known}; "
                              f"mode test-dev or test-challenge)")
    fmt, mode = SUBMISSION_FORMATS[match["dataset"]], match["mode"]
    try:
        with np.load(path) as archive:
            if "y_pred" not in archive.files:
                raise SubmissionError(f"{path}: no 'y_pred' array (found {archive.files})")
            y_pred = archive["y_pred"]
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        if isinstance(error, SubmissionError):
            raise
        raise SubmissionError(f"{path}: cannot be read as .npz ({error})") from error
    found = fmt.problems(y_pred, mode)
    if found:
        raise SubmissionError(f"{path}: " + "; ".join(found))
    return {"file": str(path), "dataset": fmt.dataset, "mode": mode, "rows": int(y_pred.shape[0]),
            "dtype": str(y_pred.dtype)}


def write_submission(trainer: pl.Trainer, model: pl.LightningModule, datamodule: pl.LightningDataModule,
                     split: str, directory: Path, ckpt_path: str | None = None) -> Path:
    """Predict ``split`` and write its official submission file (then check it).

    Raises:
        SubmissionError: a target was predicted twice or not at all, or the result is malformed.
    """
    fmt: SubmissionFormat = datamodule.submission_format
    datamodule.predict_on(split)
    outputs = trainer.predict(model, datamodule=datamodule, ckpt_path=ckpt_path)
    index = torch.cat([o["index"] for o in outputs]).numpy()
    prediction = torch.cat([o["prediction"] for o in outputs]).numpy()
    expected = np.asarray(datamodule.split_index(split))
    order = np.argsort(index, kind="stable")
    position = np.searchsorted(index[order], expected)
    found = (position < len(index)) & (index[order][np.minimum(position, len(index) - 1)] == expected)
    if not found.all() or len(index) != len(expected) or len(np.unique(index)) != len(index):
        raise SubmissionError(f"{split}: predicted {len(index)} rows ({len(np.unique(index))} distinct) for "
                              f"{len(expected)} targets ({int((~found).sum())} missing)")
    y_pred = prediction[order[position]]
    if fmt.kind == "class":
        y_pred = y_pred.astype(np.int64)
    path = fmt.save(y_pred, directory, split)
    check_submission(path)
    return path
