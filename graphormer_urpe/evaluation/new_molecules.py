"""``evaluate.py --predict``: new molecules through the training pipeline, cached in a temporary directory."""

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
from graphormer_urpe.evaluation.splits import SHOWN_ROWS, predict_split
from graphormer_urpe.run.checkpoints import embedded_config
from graphormer_urpe.tasks.base import PerTargetTask

log = logging.getLogger("graphormer_urpe")


def predict_table(ckpt: Path, table: Path, out: Path, config_yaml: str,
                  smiles_column: str | None = None) -> pd.DataFrame:
    """Predict every molecule of ``table`` (CSV or Parquet) with the checkpoint and the run's resolved config, and
    write ``out`` (CSV, returned); ``smiles_column`` defaults to the training table's."""
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
        raise DataError(f"--predict needs a GraphRegression or Classification checkpoint, not {type(task).__name__}")
    source_args = source.get("init_args", {})  # the molecule-level features the model was trained with
    to_predict = SmilesToPredict(str(table), column, source_args.get("descriptors"),
                                 source_args.get("feature_columns") or ())
    if list(to_predict.spec.molecule_features) != list(task.model.config.molecule_features):
        raise DataError(f"{ckpt}: its model reads the molecule features {list(task.model.config.molecule_features)}, "
                        f"its config's data.source gives {list(to_predict.spec.molecule_features)}")
    smiles = to_predict.smiles()  # the table's one read, reused to build the cache
    with tempfile.TemporaryDirectory() as cache_root:
        data = GraphDataModule(to_predict, root=cache_root, batch_size=data_args.get("batch_size", 256), num_workers=0,
                               max_nodes=data_args.get("max_nodes", 512))
        trainer = pl.Trainer(accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                             enable_model_summary=False)
        log.info("predicting %d molecules of %s with %s (%s)", len(smiles), table, ckpt, type(task).__name__)
        predictions = predict_split(trainer, task, data, "predict", ckpt_path=None)
    rows = predictions.rows
    frame = pd.DataFrame({"row": rows, "smiles": [smiles[row] for row in rows],
                          **task.prediction_columns(predictions.prediction),
                          "error": [predictions.skipped.get(int(row), "") for row in rows]})
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False, na_rep="")
    failed = list(predictions.skipped.items())
    log.info("wrote %s: %d rows, %d predicted, %d could not be featurised%s", out, len(frame),
             len(frame) - len(failed), len(failed),
             f" (empty prediction, reason in 'error'; first: {failed[:SHOWN_ROWS]})" if failed else "")
    return frame


def predict_new_molecules(ckpt: str, table: Path, out: Path, config: Path | None = None,
                          smiles_column: str | None = None) -> dict:
    """:func:`predict_table` with the checkpoint's config (or ``config``); returns what was written, with counts."""
    config_yaml = config.read_text() if config is not None else embedded_config(ckpt)
    frame = predict_table(Path(ckpt), table, out, config_yaml, smiles_column)
    failed = int((frame["error"] != "").sum())
    return {"checkpoint": ckpt, "table": str(table), "out": str(out), "rows": len(frame),
            "predicted": len(frame) - failed, "failed": failed}
