"""A checkpoint evaluated on one split of its data (``graphormer-urpe evaluate``): its outputs and the split checked
against the data, then the task's metrics, or for an OGB-LSC dataset ogb's metric, its predictions or a leaderboard
submission (:mod:`graphormer_urpe.evaluation.ogb`); and an existing submission file checked as the leaderboard would."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from graphormer_urpe.data.files import unwritable
from graphormer_urpe.data.lsc_formats import MODES, SubmissionFormat
from graphormer_urpe.data.predictable import PredictableData, RunData
from graphormer_urpe.errors import DataError, SubmissionError
from graphormer_urpe.evaluation.ogb import evaluate_split
from graphormer_urpe.evaluation.submission import check_submission_file


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation of a checkpoint measured or wrote."""

    checkpoint: str  # the checkpoint, as given
    split: str  # valid, test, or an OGB-LSC hidden split (test-dev, test-challenge)
    metrics: dict[str, float]  # the task's (val/mae ...), or ogb's evaluator's (mae, acc); empty: none scored here
    same_data_as_training: bool | None  # None: the checkpoint records no identity of its data
    data_differences: str | None = None  # what differs from the training data (with --allow_other_data)
    initialised_from: str | None = None  # where the run's weights came from (train --init_from)
    # OGB-LSC: what ogb's evaluator scored (evaluator, scored, skipped), or the predictions or submission written
    leaderboard: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The record as ``--out`` writes it: every field, the leaderboard's among them; unset ones (no metrics, no
        differences, no initialisation) left out."""
        unset = {"metrics": {}, "data_differences": None, "initialised_from": None}
        optional = {key: value for key in unset if (value := getattr(self, key)) != unset[key]}
        return {
            "checkpoint": self.checkpoint,
            "split": self.split,
            **self.leaderboard,
            "same_data_as_training": self.same_data_as_training,
            **optional,
        }


def check_outputs(out: Path | None, predictions: Path | None, submission_dir: Path | None) -> None:
    """Refuse (:class:`DataError`) an output that cannot be written, or ``--out`` over any existing file (nothing
    is overwritten): ``--out`` (the metrics' JSON file), ``--predictions`` (an ``.npz`` file), ``--submission_dir``
    (a directory)."""
    for flag, path, is_dir in (
        ("--out", out, False),
        ("--predictions", predictions, False),
        ("--submission_dir", submission_dir, True),
    ):
        if path is None:
            continue
        if not is_dir and path.is_dir():
            raise DataError(f"{flag} {path} is a directory; name the file to write")
        if (read_only := unwritable(path if is_dir else path.parent)) is not None:
            raise DataError(f"{flag} {path}: {read_only} is not writable")
    if out is not None and out.exists():
        raise DataError(f"--out {out} exists; choose another output path (nothing is overwritten)")


def check_split(
    data: RunData, split: str, checkpoint: str, predictions: Path | None, submission_dir: Path | None
) -> SubmissionFormat | None:
    """Refuse (:class:`DataError`) a split that ``data`` does not have, and a hidden test split without a place for
    its predictions (``submission_dir``, ``predictions``: a file); returns the OGB-LSC submission format of ``data``
    (None: not an OGB-LSC dataset)."""
    fmt = data.spec.submission if isinstance(data, PredictableData) else None
    if fmt is None:
        if split in MODES:
            raise DataError(
                f"{checkpoint}'s data have no split '{split}': test-dev and test-challenge are the "
                "hidden test splits of OGB-LSC datasets (PCQM4Mv2, MAG240M); evaluate it with --split "
                "valid or test"
            )
        if predictions is not None:
            raise DataError("--predictions is available for OGB-LSC datasets (PCQM4Mv2, MAG240M)")
        return None
    if split not in fmt.splits:
        raise DataError(f"{fmt.dataset} has no split '{split}'; its splits are {', '.join(fmt.splits)}")
    if split in MODES and submission_dir is None and predictions is None:
        raise DataError(
            f"--split {split} has hidden targets: pass --submission_dir DIR to write a leaderboard "
            "submission (or --predictions FILE)"
        )
    return fmt


def evaluate_checkpoint(
    trainer: pl.Trainer,
    model: pl.LightningModule,
    data: RunData,
    checkpoint: str,
    split: str,
    fmt: SubmissionFormat | None,
    *,
    submission_dir: Path | None,
    predictions: Path | None,
    data_check: dict[str, Any],
    initialised_from: str | None,
    started: float,
) -> Evaluation:
    """``checkpoint``'s weights in ``model`` on ``split`` of ``data`` (checked: :func:`check_split`, which gave
    ``fmt``): the task's metrics, or for an OGB-LSC dataset (``fmt``) ogb's, the predictions or the submission
    (:func:`~graphormer_urpe.evaluation.ogb.evaluate_split`, timed from ``started``, a ``time.perf_counter``).
    ``data_check``: :func:`~graphormer_urpe.run.checkpoints.compare_data`'s result."""
    if fmt is not None:
        leaderboard = evaluate_split(
            trainer,
            model,
            data,
            split,
            checkpoint,
            submission_dir=submission_dir,
            predictions_file=predictions,
            data_check=data_check,
            started=started,
        )
        for key in ("checkpoint", "split", *data_check):
            leaderboard.pop(key, None)
        metrics = leaderboard.pop("metrics", {})
    else:
        stage = trainer.validate if split == "valid" else trainer.test
        metrics, leaderboard = stage(model, data, ckpt_path=checkpoint, verbose=False)[0], {}
    return Evaluation(
        checkpoint=checkpoint,
        split=split,
        metrics=metrics,
        same_data_as_training=data_check["same_data_as_training"],
        data_differences=data_check.get("data_differences"),
        initialised_from=initialised_from,
        leaderboard=leaderboard,
    )


def check_submission(path: Path, data_root: Path) -> dict[str, Any]:
    """An existing submission file checked as the leaderboard would check it (:class:`SubmissionError`); returns
    what :func:`~graphormer_urpe.evaluation.submission.check_submission_file` found."""
    try:
        return check_submission_file(path, data_root)
    except RuntimeError as error:  # the OGB-LSC evaluator's own refusals
        raise SubmissionError(str(error)) from error
