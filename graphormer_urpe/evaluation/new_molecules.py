"""Predictions for new molecules from a trained checkpoint: ``evaluate.py --ckpt best.ckpt --predict new.csv``.

The new table goes through the same pipeline as training data (:class:`SmilesToPredict`: the
featuriser, the parallel chunked preprocessing and the cache, in a temporary directory), then
through :func:`~graphormer_urpe.evaluation.splits.predict_split`, which returns one prediction per input
row in file order. The output CSV has the input row index (0 = first data row), the SMILES, the
task's prediction columns (targets in the data's units for regression; label and probabilities for
classification) and ``error``: empty for predicted rows, the reason for rows that could not be
featurised (whose predictions are empty).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pandas as pd
import pytorch_lightning as pl
import yaml

from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources.molecules import MoleculeSource
from graphormer_urpe.data.sources.tables import SmilesToPredict
from graphormer_urpe.errors import DataError, import_object
from graphormer_urpe.evaluation.splits import predict_split
from graphormer_urpe.run.checkpoints import embedded_config
from graphormer_urpe.tasks.base import PerTargetTask

log = logging.getLogger("graphormer_urpe")

#: Rows that could not be featurised named one by one in the log (the CSV lists all of them).
SHOWN_ROWS = 10


def predict_table(ckpt: Path, table: Path, out: Path, config_yaml: str, smiles_column: str | None = None,
                  batch_size: int | None = None, preprocess_workers: int | None = None) -> pd.DataFrame:
    """Predict every molecule of ``table`` with the checkpoint and write ``out`` (CSV).

    Args:
        ckpt: a checkpoint written by ``train.py``.
        table: CSV or Parquet file of new molecules.
        out: the predictions' CSV file (created with its directory).
        config_yaml: the run's resolved config (embedded in the checkpoint, or ``--config``).
        smiles_column: the SMILES column of ``table``; default the training table's.
        batch_size: molecules per forward pass; default the training config's.
        preprocess_workers: processes featurising the table; default every core.

    Returns:
        The table written: ``row``, ``smiles``, the prediction columns, ``error``.

    Raises:
        DataError: the checkpoint was not trained on molecules, or the table cannot be read.
    """
    config = yaml.safe_load(config_yaml)
    data_args = config["data"].get("init_args", {})
    source = data_args.get("source", {})
    source_class = import_object("data.source.class_path", source["class_path"])
    if not issubclass(source_class, MoleculeSource):
        raise DataError(f"--predict reads SMILES, but {ckpt} was trained on {source_class.__name__}, which is not "
                        "a molecular dataset")
    column = smiles_column or source.get("init_args", {}).get("smiles_column", "smiles")
    task = import_object("model.class_path", config["model"]["class_path"]).from_checkpoint(ckpt)
    if not isinstance(task, PerTargetTask):
        raise DataError(f"--predict needs a GraphRegression or Classification checkpoint, not "
                        f"{type(task).__name__}")
    to_predict = SmilesToPredict(str(table), column)
    smiles = to_predict.smiles()  # the table's one read, reused to build the cache
    with tempfile.TemporaryDirectory() as cache_root:
        data = GraphDataModule(to_predict, root=cache_root,
                               batch_size=batch_size or data_args.get("batch_size", 256), num_workers=0,
                               preprocess_workers=preprocess_workers, max_nodes=data_args.get("max_nodes", 512))
        trainer = pl.Trainer(accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                             enable_model_summary=False)
        log.info("predicting %d molecules of %s with %s (%s)", len(smiles), table, ckpt, type(task).__name__)
        predictions = predict_split(trainer, task, data, "predict", ckpt_path=None)
    frame = pd.DataFrame({
        "row": predictions.rows,
        "smiles": [smiles[row] for row in predictions.rows],
        **task.prediction_columns(predictions.prediction),
        "error": [predictions.skipped.get(int(row), "") for row in predictions.rows],
    })
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False, na_rep="")
    failed = list(predictions.skipped.items())
    log.info("wrote %s: %d rows, %d predicted, %d could not be featurised%s", out, len(frame),
             len(frame) - len(failed), len(failed),
             f" (empty prediction, reason in 'error'; first: {failed[:SHOWN_ROWS]})" if failed else "")
    return frame


def predict_new_molecules(ckpt: str, table: Path, out: Path, config: Path | None = None,
                          smiles_column: str | None = None) -> dict:
    """``evaluate.py --predict TABLE --out FILE.csv``: :func:`predict_table` with the config embedded in
    the checkpoint (or ``config``).

    Returns:
        The checkpoint, table, output file, and how many rows were predicted and failed.

    Raises:
        InputError: the checkpoint, the config or the table cannot be used (the message says why).
    """
    config_yaml = config.read_text() if config is not None else embedded_config(ckpt)
    frame = predict_table(Path(ckpt), table, out, config_yaml, smiles_column)
    failed = int((frame["error"] != "").sum())
    return {"checkpoint": ckpt, "table": str(table), "out": str(out), "rows": len(frame),
            "predicted": len(frame) - failed, "failed": failed}
