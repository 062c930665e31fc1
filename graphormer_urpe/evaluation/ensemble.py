"""An ensemble of runs of one SMILES-table config (``seeds.py --ensemble``): every member predicts the molecules of
one split, the ensemble's prediction is the mean of theirs (of the probabilities for classification), as chemprop's
ensembles do. See docs/small-data.md."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from torchmetrics.functional.classification import binary_auroc

from graphormer_urpe.data.sources.tables import SmilesTable
from graphormer_urpe.errors import DataError, import_object
from graphormer_urpe.evaluation.new_molecules import predict_table
from graphormer_urpe.run.checkpoints import embedded_config

log = logging.getLogger("graphormer_urpe")


def split_table(config_yaml: str, split: str) -> tuple[SmilesTable, pd.DataFrame]:
    """The config's table source and the rows of ``split`` it trains or tests on (skipped rows left out): a
    frame with the source row, the SMILES and the targets (NaN where missing)."""
    data = yaml.safe_load(config_yaml)["data"]
    source_config = data.get("init_args", {}).get("source") or {}
    source_class = import_object("data.source.class_path", source_config.get("class_path", ""))
    if not issubclass(source_class, SmilesTable):
        raise DataError(f"an ensemble predicts the rows of a SMILES table (data.source SmilesTable), not of "
                        f"{source_class.__name__}; evaluate each seed's checkpoint with evaluate.py instead")
    source = source_class(**source_config.get("init_args", {}))
    reader = source.open(Path("."))
    if split not in reader.splits:
        raise DataError(f"{source.path}: the {source.split} split has no '{split}' rows")
    rows = np.array([row for row in reader.splits[split] if row not in reader.rejected], dtype=np.int64)
    frame = pd.DataFrame({"row": rows, source.smiles_column: reader.smiles[rows]})
    for k, name in enumerate(source.targets):
        frame[name] = reader.targets[rows, k].astype(np.float64)
    return source, frame


def ensemble_split(checkpoints: Sequence[Path], out_dir: Path, split: str = "test") -> dict:
    """Predict ``split`` of the checkpoints' table with each checkpoint and with their mean; write
    ``ensemble-<split>.csv`` (every member's and the ensemble's predictions beside the targets) under ``out_dir``
    and return the metrics of the ensemble and of every member.

    The checkpoints must come from runs of one config (the table, its split and targets): the first one's config
    decides the rows, and each member's own config must name the same table and targets."""
    if not checkpoints:
        raise DataError("an ensemble needs at least one finished run")
    config = embedded_config(checkpoints[0])
    source, frame = split_table(config, split)
    kind = source.task
    member_columns: list[dict[str, np.ndarray]] = []
    with tempfile.TemporaryDirectory() as tmp:
        molecules = Path(tmp) / f"{split}.csv"
        frame[[source.smiles_column]].to_csv(molecules, index=False)
        for k, checkpoint in enumerate(checkpoints):
            member_config = embedded_config(checkpoint)
            member = yaml.safe_load(member_config)["data"]["init_args"]["source"]["init_args"]
            if Path(member.get("path", "")) != source.path or list(member.get("targets", [])) != source.targets:
                raise DataError(f"{checkpoint} was trained on {member.get('path')} {member.get('targets')}, not on "
                                f"{source.path} {source.targets}: an ensemble's members share one table and targets")
            predicted = predict_table(Path(checkpoint), molecules, Path(tmp) / f"member{k}.csv", member_config)
            member_columns.append({name: predicted[name].to_numpy(np.float64)
                                   for name in _score_columns(source, predicted)})
    table = frame.copy()
    for k, columns in enumerate(member_columns):
        for name, values in columns.items():
            table[f"member{k}_{name}"] = values
    ensemble = {name: np.mean([columns[name] for columns in member_columns], axis=0) for name in member_columns[0]}
    for name, values in ensemble.items():
        table[f"ensemble_{name}"] = values
    out_dir.mkdir(parents=True, exist_ok=True)
    written = out_dir / f"ensemble-{split}.csv"
    table.to_csv(written, index=False, na_rep="")
    result = {"split": split, "rows": len(table), "members": [str(c) for c in checkpoints], "predictions":
              str(written), "ensemble": _metrics(kind, source.targets, frame, ensemble),
              "member_metrics": [_metrics(kind, source.targets, frame, columns) for columns in member_columns]}
    log.info("ensemble of %d runs on %d %s rows of %s: %s", len(checkpoints), len(table), split, source.path,
             result["ensemble"])
    return result


def _score_columns(source: SmilesTable, predicted: pd.DataFrame) -> list[str]:
    """The columns averaged: values for regression, probabilities for classification."""
    if source.task == "regression":
        return list(source.targets)
    return [name for name in predicted.columns if "_probability" in name]


def _metrics(kind: str, targets: Sequence[str], frame: pd.DataFrame, scores: dict[str, np.ndarray]) -> dict:
    """MAE and RMSE per regression target (and their mean); ROC-AUC and accuracy per binary label; accuracy of a
    multi-class label; rows with a missing target or prediction are left out."""
    metrics: dict[str, float] = {}
    if kind == "multiclass":
        probabilities = np.stack([scores[name] for name in sorted(scores, key=lambda n: int(n.rsplit("_", 1)[1]))],
                                 axis=1)
        truth = frame[targets[0]].to_numpy()
        known = ~np.isnan(truth) & ~np.isnan(probabilities).any(axis=1)
        metrics["accuracy"] = float(np.mean(np.argmax(probabilities[known], axis=1) == truth[known]))
        return metrics
    for name in targets:
        truth = frame[name].to_numpy()
        score = scores[name] if kind == "regression" else scores[f"{name}_probability"]
        known = ~np.isnan(truth) & ~np.isnan(score)
        if kind == "regression":
            metrics[f"mae/{name}"] = float(np.mean(np.abs(score[known] - truth[known])))
            metrics[f"rmse/{name}"] = float(np.sqrt(np.mean((score[known] - truth[known]) ** 2)))
        else:
            metrics[f"roc_auc/{name}"] = float(binary_auroc(torch.as_tensor(score[known]),
                                                            torch.as_tensor(truth[known]).long()))
            metrics[f"accuracy/{name}"] = float(np.mean((score[known] >= 0.5) == truth[known]))
    if kind == "regression":
        metrics["mae"] = float(np.mean([metrics[f"mae/{name}"] for name in targets]))
    return metrics
