"""OGB-LSC splits after training (``graphormer-urpe evaluate --split``): scored, saved or submitted
(``docs/ogb-lsc.md``)."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import pytorch_lightning as pl

from graphormer_urpe.data.lsc_formats import MODES, SubmissionFormat
from graphormer_urpe.data.predictable import PredictableData
from graphormer_urpe.errors import SubmissionError
from graphormer_urpe.evaluation.splits import SHOWN_ROWS, SplitPredictions, predict_split
from graphormer_urpe.evaluation.submission import write_submission
from graphormer_urpe.run.ledger import write_json
from graphormer_urpe.run.provenance import git_commit, package_versions
from graphormer_urpe.tasks.classification import predicted_classes

log = logging.getLogger("graphormer_urpe")


def evaluate_split(
    trainer: pl.Trainer,
    task: pl.LightningModule,
    datamodule: PredictableData,
    split: str,
    ckpt: str,
    *,
    submission_dir: Path | None,
    predictions_file: Path | None,
    started: float,
    data_check: dict,
) -> dict:
    """Predict ``split`` in its order, then score it or submit it (timed from ``started``, a ``time.perf_counter``);
    ``predictions_file`` also saves them (``.npz``). Returns what was done (rank > 0: the checkpoint and split)."""
    fmt = datamodule.spec.submission
    log.info("predicting %s '%s' with %s on %d process(es)", fmt.dataset, split, ckpt, trainer.world_size)
    inference_started = time.perf_counter()
    predictions = predict_split(trainer, task, datamodule, split, ckpt)
    if not trainer.is_global_zero:
        return {"checkpoint": ckpt, "split": split}
    log.info(
        "'%s': %d rows, %d predicted, %d skipped while preprocessing",
        split,
        len(predictions.rows),
        int((predictions.graphs >= 0).sum()),
        len(predictions.skipped),
    )
    preprocessing = datamodule.preprocessing_seconds
    inference = time.perf_counter() - inference_started - preprocessing
    if predictions.duplicates:
        log.info("%d repeated predictions (sampler padding across processes) dropped", predictions.duplicates)
    if fmt.num_classes is not None:  # class probabilities (R, C) -> labels (R, 1), NaN rows stay NaN
        labels = predicted_classes(predictions.prediction).astype(np.float32)
        labels[np.isnan(predictions.prediction).any(axis=1)] = np.nan
        predictions = dataclasses.replace(predictions, prediction=labels[:, None])
    if predictions.prediction.shape[1] != 1:
        raise SubmissionError(f"the model predicts {predictions.prediction.shape[1]} targets; ogb expects one")
    if predictions_file is not None:
        predictions_file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(predictions_file, rows=predictions.rows, prediction=predictions.prediction[:, 0])
        log.info("predictions of %d '%s' rows saved to %s", len(predictions.rows), split, predictions_file)
    if split not in MODES:
        return score(predictions, fmt, ckpt)
    if submission_dir is None:
        return {"checkpoint": ckpt, "split": split, "predictions": str(predictions_file)}
    timings = {"started": started, "preprocessing": preprocessing, "inference": inference}
    return submit(predictions, datamodule, ckpt, submission_dir, trainer.world_size, timings, data_check)


def score(predictions: SplitPredictions, fmt: SubmissionFormat, ckpt: str) -> dict:
    """ogb's metric on the rows of a labelled split that have an example and a target."""
    known = (predictions.graphs >= 0) & np.isfinite(predictions.target[:, 0])
    unlabelled = int(((predictions.graphs >= 0) & ~known).sum())
    if unlabelled:
        log.warning("%d rows of '%s' have no target and are not scored", unlabelled, predictions.split)
    if predictions.skipped:
        log.warning(
            "%d rows of '%s' could not be preprocessed and are not scored (first: %s)",
            len(predictions.skipped),
            predictions.split,
            list(predictions.skipped.items())[:SHOWN_ROWS],
        )
    evaluator = fmt.evaluator()
    metrics = evaluator.eval({"y_true": predictions.target[known, 0], "y_pred": predictions.prediction[known, 0]})
    metrics = {name: float(value) for name, value in metrics.items()}
    summary = ", ".join(f"{name.upper()} {value:.6f}" for name, value in metrics.items())
    print(
        f"{fmt.dataset} {predictions.split}: {summary} ({type(evaluator).__name__}, {int(known.sum()):,} "
        f"{fmt.examples})"
    )
    return {
        "checkpoint": ckpt,
        "split": predictions.split,
        "metrics": metrics,
        "evaluator": type(evaluator).__name__,
        "scored": int(known.sum()),
        "skipped": len(predictions.skipped),
    }


def submit(
    predictions: SplitPredictions,
    datamodule: PredictableData,
    ckpt: str,
    directory: Path,
    devices: int,
    timings: dict[str, float],
    data_check: dict,
) -> dict:
    """Fill rows without a prediction with the training mean, write the submission and its log (``*.log.json``,
    with ``data_check``; returned), say how long it took (``timings``: started, preprocessing, inference)."""
    fmt, mode = datamodule.spec.submission, predictions.split
    expected = fmt.split_size(datamodule.root, mode)
    if expected != len(predictions.rows):
        raise SubmissionError(
            f"{datamodule.root / (fmt.directory or fmt.dataset) / 'split_dict.pt'} has {expected} "
            f"{mode} rows but {datamodule.cache_dir} was built with {len(predictions.rows)}; "
            "delete it"
        )
    y_pred = predictions.prediction[:, 0].copy()
    filled = np.flatnonzero(np.isnan(y_pred))
    train_mean = None
    if filled.size:
        mean = datamodule.training_mean()
        if mean is None:
            raise SubmissionError(
                f"{filled.size} {mode} predictions are NaN and {fmt.dataset} skips no rows, so "
                "there is no training mean to fill them with: the model produced NaN"
            )
        train_mean = float(mean[0])
        y_pred[filled] = train_mean
        log.warning(
            "%d of %d %s rows could not be featurised; they are predicted as the training mean %.6f "
            "(first: %s; all are listed in the submission log)",
            filled.size,
            len(y_pred),
            mode,
            train_mean,
            [(int(predictions.rows[p]), predictions.skipped[int(predictions.rows[p])]) for p in filled[:SHOWN_ROWS]],
        )
    if fmt.num_classes is not None:
        y_pred = y_pred.astype(np.int64)  # class labels, exact in float32 (gathered as float32)
    writing_started = time.perf_counter()
    path = write_submission(y_pred, directory, mode, expected, fmt)
    now, preprocessing = time.perf_counter(), timings["preprocessing"]
    seconds = {
        "total": round(now - timings["started"], 3),
        "preprocessing": round(preprocessing, 3),
        "inference": round(timings["inference"], 3),
        "writing_and_checking": round(now - writing_started, 3),
    }
    record = {
        "file": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "dataset": fmt.dataset,
        "mode": mode,
        "rows": len(y_pred),
        "checkpoint": ckpt,
        "cache": str(datamodule.cache_dir),
        "filled_with_train_mean": [
            {"row": int(row), "position": int(p), "reason": predictions.skipped[int(row)]}
            for p, row in zip(filled, predictions.rows[filled])
        ],
        "train_mean": train_mean,
        "seconds": seconds,
        "preprocessing_cached": preprocessing == 0.0,
        "devices": devices,
        "git_commit": git_commit(),
        "versions": package_versions(),
        **data_check,
    }
    write_json(path.with_suffix(".log.json"), record)
    prepared = "found built" if preprocessing == 0.0 else f"built now, {preprocessing:.1f} s"
    log.info(
        "wrote %s (%d rows, %d filled with the training mean), checked after reading it back",
        path,
        len(y_pred),
        filled.size,
    )
    log.info(
        "wall time %s -> file: %.1f s (preprocessed files: %s; inference %.1f s on %d process(es); writing "
        "and checking %.1f s); log: %s",
        "SMILES" if fmt.num_classes is None else "papers",
        seconds["total"],
        prepared,
        timings["inference"],
        devices,
        seconds["writing_and_checking"],
        path.with_suffix(".log.json"),
    )
    return record
