"""New molecules through the training pipeline (``graphormer-urpe predict``): a table featurised once into a temporary
cache, then predicted by one model or by each member of an ensemble, every row back in file order with the reason
for each row that could not be featurised; the table's own columns are written back beside the predictions."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytorch_lightning as pl

from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources.molecules import MoleculeSource
from graphormer_urpe.data.sources.tables import SmilesToPredict, TableRead
from graphormer_urpe.errors import DataError, import_object
from graphormer_urpe.evaluation.splits import SHOWN_ROWS, predict_split
from graphormer_urpe.run.checkpoints import RunConfig, embedded_config, run_config
from graphormer_urpe.tasks.base import PerTargetTask

log = logging.getLogger("graphormer_urpe")

#: The output's column of the input row (0 is the first data row) and of the reason a row was not predicted.
ROW_COLUMN, ERROR_COLUMN = "row", "error"


@dataclass(frozen=True)
class TablePredictions:
    """Every model's predictions of the rows of a table of new molecules, in file order.

    Shapes: R rows of the table; each model's scores (R, S) in its task's ``score_names`` (a regression's values, a
    classification's probabilities), NaN on rows that could not be featurised."""

    table: TableRead  # the table's one read, every column (CSV cells as text)
    smiles: list[str]  # (R,) each row's SMILES, stripped
    scores: list[np.ndarray]  # one (R, S) float64 array per model
    errors: list[str]  # (R,) why a row could not be featurised; "" where it was


def model_of(checkpoint: Path, config_yaml: str | None = None) -> tuple[PerTargetTask, RunConfig]:
    """The task in ``checkpoint`` and the run config it was trained with (its own, or ``config_yaml``), refused unless
    it predicts per target from molecules (:class:`DataError`)."""
    config = run_config(config_yaml if config_yaml is not None else embedded_config(checkpoint))
    if not issubclass(config.source_class(), MoleculeSource):
        raise DataError(
            f"predict reads SMILES, but {checkpoint} was trained on {config.data_name}, which is not a "
            "molecular dataset"
        )
    task = import_object("model.class_path", config.model_class_path or "").from_checkpoint(checkpoint)
    if not isinstance(task, PerTargetTask):
        raise DataError(f"predict needs a GraphRegression or Classification checkpoint, not {type(task).__name__}")
    return task, config


def table_to_predict(table: Path, config: RunConfig, smiles_column: str | None = None) -> SmilesToPredict:
    """The new molecules of ``table`` as the run's data source gives them to its model (the same molecule features);
    ``smiles_column`` defaults to the training table's. Reading ``.table`` checks the file: it exists, has rows, and
    has the SMILES and feature columns (:class:`~graphormer_urpe.errors.InputError`, naming the file)."""
    column = smiles_column or config.source_args.get("smiles_column", "smiles")
    return SmilesToPredict(
        str(table),
        column,
        config.source_args.get("descriptors"),
        config.source_args.get("feature_columns") or (),
        config.source_args.get("fingerprints"),
    )


def predict_molecules(
    tasks: Sequence[PerTargetTask], config: RunConfig, table: Path, smiles_column: str | None = None
) -> TablePredictions:
    """Featurise ``table`` once as ``config``'s data source does (its molecule features, batch size and size limit)
    and predict every row with each task (an ensemble's members share one config)."""
    to_predict = table_to_predict(table, config, smiles_column)
    given = list(to_predict.spec.molecule_features)
    for task in tasks:
        if (read := list(task.model.config.molecule_features)) != given:
            raise DataError(
                f"{table}: a model reads the molecule features {read}, its config's data.source gives {given}"
            )
    smiles = to_predict.smiles()  # the table's one read, reused to build the cache
    scores = []
    with tempfile.TemporaryDirectory() as cache_root:
        data = GraphDataModule(
            to_predict,
            root=cache_root,
            batch_size=config.data_args.get("batch_size", 256),
            num_workers=0,
            max_nodes=config.data_args.get("max_nodes", 512),
        )
        trainer = pl.Trainer(
            accelerator="auto", devices=1, logger=False, enable_checkpointing=False, enable_model_summary=False
        )
        for k, task in enumerate(tasks):
            log.info(
                "predicting %d molecules of %s with model %d of %d (%s)",
                len(smiles),
                table,
                k + 1,
                len(tasks),
                type(task).__name__,
            )
            predictions = predict_split(trainer, task, data, "predict", ckpt_path=None)
            scores.append(predictions.prediction.astype(np.float64))
    errors = [predictions.skipped.get(row, "") for row in range(len(smiles))]
    failed = [(row, reason) for row, reason in enumerate(errors) if reason]
    if failed:
        log.info(
            "%d of %d rows of %s could not be featurised (empty prediction, reason in '%s'; first: %s)",
            len(failed),
            len(errors),
            table,
            ERROR_COLUMN,
            failed[:SHOWN_ROWS],
        )
    return TablePredictions(table=to_predict.table, smiles=smiles, scores=scores, errors=errors)


def prediction_frame(predicted: TablePredictions, columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The output table: the input row, the table's own columns as read, the prediction ``columns`` and the reason
    a row was not predicted. An input column whose name the output takes (``error``, a target's name) is kept as
    ``input_<name>``."""
    taken = {ROW_COLUMN, *columns, ERROR_COLUMN}
    own = {}
    for name, values in predicted.table.frame.items():
        kept = str(name)
        while kept in taken or kept in own:
            kept = f"input_{kept}"
        if kept != name:
            log.info("the input column '%s' is written as '%s' (the output's '%s' is a prediction's)", name, kept, name)
        own[kept] = values.to_numpy()
    return pd.DataFrame(
        {ROW_COLUMN: np.arange(len(predicted.errors)), **own, **columns, ERROR_COLUMN: predicted.errors}
    )


def write_new(frame: pd.DataFrame, out: Path) -> None:
    """Write ``frame`` as CSV to ``out``, which must not exist (nothing is overwritten, even by a race)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(out, "x", newline="") as handle:
            frame.to_csv(handle, index=False, na_rep="")
    except FileExistsError:
        raise DataError(f"{out} exists; choose another output path (nothing is overwritten)") from None


@dataclass(frozen=True)
class Prediction:
    """What ``graphormer-urpe predict`` wrote: a table's molecules predicted by a model into a CSV file."""

    model: Path  # the checkpoint, or the ensemble's directory
    table: Path  # the table of new molecules
    out: Path  # the predictions' CSV file, written
    rows: int  # every row of the table, in file order
    predicted: int  # the rows with predictions
    failed: int  # the rows that could not be featurised (the reason in the error column)


def check_table_to_predict(table: Path) -> None:
    """Refuse (:class:`DataError`) a table of new molecules that is a directory or is not there."""
    if table.is_dir():
        raise DataError(f"the table to predict, {table}, is a directory, not a table (a CSV or Parquet file)")
    if not table.is_file():
        raise DataError(f"the table to predict, {table}, does not exist")


def write_predictions(
    model: Path, table: Path, predicted: TablePredictions, columns: Mapping[str, np.ndarray], out: Path, by: str = ""
) -> Prediction:
    """Write the rows of ``table`` (``predicted``) with the prediction ``columns`` of ``model`` to the new file
    ``out`` (:func:`prediction_frame`, :func:`write_new`) and say so, ``by`` naming the model in the message."""
    frame = prediction_frame(predicted, columns)
    write_new(frame, out)
    failed = sum(bool(reason) for reason in predicted.errors)
    log.info(
        "wrote %s: %d rows, %d predicted%s, %d could not be featurised (reason in '%s')",
        out,
        len(frame),
        len(frame) - failed,
        by,
        failed,
        ERROR_COLUMN,
    )
    return Prediction(model=model, table=table, out=out, rows=len(frame), predicted=len(frame) - failed, failed=failed)


def predict_checkpoint(
    ckpt: Path, table: Path, out: Path, config: Path | None = None, smiles_column: str | None = None
) -> Prediction:
    """Predict the molecules of ``table`` with one run's checkpoint (its config, or ``config``) into ``out``: the
    task's columns (a regression's values; a classification's labels and probabilities)."""
    task, run = model_of(ckpt, config.read_text() if config is not None else None)
    predicted = predict_molecules([task], run, table, smiles_column)
    return write_predictions(ckpt, table, predicted, task.prediction_columns(predicted.scores[0]), out)
