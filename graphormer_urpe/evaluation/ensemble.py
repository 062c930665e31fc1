"""An ensemble of runs of one SMILES-table config (``seeds.py --ensemble``): every member predicts the molecules of
one split, the ensemble's prediction is the mean of theirs (of the probabilities for classification), as chemprop's
ensembles do. With ``trees`` (``seeds.py --ensemble --trees``, regression), gradient-boosted trees fitted on the
training rows' RDKit descriptors join it: the blend ``(1 - w) * ensemble + w * trees``, ``w`` per target the one of
:data:`TREE_WEIGHTS` with the lowest validation MAE. :func:`ensemble_split` scores a split of the table,
:func:`ensemble_predict` predicts new molecules (``seeds.py --predict``). See docs/small-data.md."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from rdkit import Chem
from sklearn.ensemble import HistGradientBoostingRegressor
from torchmetrics.functional.classification import binary_auroc

from graphormer_urpe.data.sources.descriptors import normalised_descriptors
from graphormer_urpe.data.sources.molecule_features import DESCRIPTOR_TAILS
from graphormer_urpe.data.sources.tables import SmilesTable
from graphormer_urpe.errors import DataError, import_object
from graphormer_urpe.evaluation.new_molecules import predict_table
from graphormer_urpe.run.checkpoints import embedded_config

log = logging.getLogger("graphormer_urpe")

#: Weights of the trees' prediction in the blend (0: the ensemble alone, 1: the trees alone); per target, the one
#: with the lowest MAE on the validation rows is used.
TREE_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Validation rows of a target below which the choice of its trees' weight is said to be unreliable: the five
#: candidates' validation MAEs then differ by the errors of a few molecules.
FEW_VALIDATION_ROWS = 10


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


def ensemble_split(checkpoints: Sequence[Path], out_dir: Path, split: str = "test", trees: bool = False) -> dict:
    """Predict ``split`` of the checkpoints' table with each checkpoint and with their mean; write
    ``ensemble-<split>.csv`` (every member's and the ensemble's predictions beside the targets) under ``out_dir``
    and return the metrics of the ensemble and of every member.

    With ``trees`` (regression with ``data.source.descriptors``; ``split`` not ``valid``), the members also predict
    the validation rows, :func:`descriptor_trees` predict both, and the blend with the weight of :func:`blend_weight` is
    scored too: columns ``trees_<target>`` and ``blend_<target>``, metrics ``trees`` and ``ensemble_with_trees``, and
    the chosen ``tree_weights``.

    The checkpoints must come from runs of one config (the table, its split and targets): the first one's config
    decides the rows, and each member's own config must name the same table and targets."""
    if not checkpoints:
        raise DataError("an ensemble needs at least one finished run")
    config = embedded_config(checkpoints[0])
    source, frame = split_table(config, split)
    if trees:
        _check_trees(source, split)
    kind = source.task
    member_columns = _member_predictions(checkpoints, source, frame)
    table, ensemble = _with_members(frame, member_columns)
    result = {"split": split, "rows": len(table), "members": [str(c) for c in checkpoints],
              "ensemble": _metrics(kind, source.targets, frame, ensemble),
              "member_metrics": [_metrics(kind, source.targets, frame, columns) for columns in member_columns]}
    if trees:
        tree_split, weights = _trees_and_weights(checkpoints, config, source, frame)
        blend = {name: _blend(ensemble[name], tree_split[name], weights[name]) for name in weights}
        for name in source.targets:
            table[f"trees_{name}"] = tree_split[name]
            table[f"blend_{name}"] = blend[name]
        result |= {"trees": _metrics(kind, source.targets, frame, tree_split),
                   "ensemble_with_trees": _metrics(kind, source.targets, frame, blend), "tree_weights": weights}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = out_dir / f"ensemble-{split}.csv"
    table.to_csv(written, index=False, na_rep="")
    result["predictions"] = str(written)
    log.info("ensemble of %d runs on %d %s rows of %s: %s", len(checkpoints), len(table), split, source.path,
             result.get("ensemble_with_trees", result["ensemble"]))
    return result


def ensemble_predict(checkpoints: Sequence[Path], table: Path, out: Path, smiles_column: str | None = None,
                     trees: bool = False) -> dict:
    """Predict the molecules of ``table`` (CSV or Parquet; ``smiles_column`` defaults to the training table's) with
    each checkpoint and with their mean, and with ``trees`` the blend with the descriptor trees as
    :func:`ensemble_split` makes it (the trees fitted on the training rows, their weight chosen on the validation
    rows). Writes ``out`` (CSV: ``row``, ``smiles``, ``member<k>_<column>``, ``ensemble_<column>``, with trees
    ``trees_<target>`` and ``blend_<target>``, and ``error``: why a row could not be predicted, its predictions
    empty); returns what was written, with counts and the trees' weights."""
    if not checkpoints:
        raise DataError("an ensemble needs at least one finished run")
    config = embedded_config(checkpoints[0])
    source, _ = split_table(config, "train")
    if trees:
        _check_trees(source, "test")
    members = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, checkpoint in enumerate(checkpoints):
            predicted = predict_table(Path(checkpoint), table, Path(tmp) / f"member{k}.csv",
                                      _member_config(checkpoint, source), smiles_column)
            members.append({name: predicted[name].to_numpy(np.float64) for name in _score_columns(source, predicted)})
    # every member read the same table: the last one's rows and errors are all of theirs
    written, ensemble = _with_members(predicted[["row", "smiles"]], members)
    result = {"checkpoints": [str(c) for c in checkpoints], "table": str(table), "out": str(out),
              "rows": len(written), "failed": int((predicted["error"] != "").sum())}
    if trees:
        readable = (predicted["error"] == "").to_numpy()
        molecules = pd.DataFrame({source.smiles_column: predicted["smiles"][readable]})
        tree_rows, weights = _trees_and_weights(checkpoints, config, source, molecules)
        for name in source.targets:
            tree_column = np.full(len(written), np.nan)
            tree_column[readable] = tree_rows[name]
            written[f"trees_{name}"] = tree_column
            written[f"blend_{name}"] = _blend(ensemble[name], tree_column, weights[name])
        result["tree_weights"] = weights
    written["error"] = predicted["error"]
    out.parent.mkdir(parents=True, exist_ok=True)
    written.to_csv(out, index=False, na_rep="")
    log.info("ensemble of %d runs predicted %d rows of %s (%d could not be featurised): %s", len(checkpoints),
             len(written), table, result["failed"], out)
    return result


def descriptor_trees(source: SmilesTable, train: pd.DataFrame, frames: Sequence[pd.DataFrame]
                     ) -> list[dict[str, np.ndarray]]:
    """Gradient-boosted trees on the RDKit descriptors (scikit-learn's ``HistGradientBoostingRegressor``, its
    defaults, ``random_state=0``), one per target, fitted on the ``train`` rows with a known target; each frame's
    predictions, per target (N,). The descriptors are those the model reads (normalised as
    :func:`~graphormer_urpe.data.sources.descriptors.normalised_descriptors` does); trees ignore their scale."""
    train_x = _descriptors(train[source.smiles_column])
    inputs = [_descriptors(frame[source.smiles_column]) for frame in frames]
    predictions: list[dict[str, np.ndarray]] = [{} for _ in frames]
    for name in source.targets:
        known = ~np.isnan(train[name].to_numpy())
        model = HistGradientBoostingRegressor(random_state=0).fit(train_x[known], train[name].to_numpy()[known])
        for k, x in enumerate(inputs):
            predictions[k][name] = model.predict(x)
    return predictions


def blend_weight(ensemble: np.ndarray, trees: np.ndarray, targets: np.ndarray) -> float:
    """The weight of :data:`TREE_WEIGHTS` whose blend ``(1 - w) * ensemble + w * trees`` has the lowest MAE on the
    rows with a known target (N,); the smaller weight on a tie."""
    known = ~np.isnan(targets)
    errors = [np.abs(_blend(ensemble[known], trees[known], w) - targets[known]).mean() for w in TREE_WEIGHTS]
    return TREE_WEIGHTS[int(np.argmin(errors))]


def _trees_and_weights(checkpoints: Sequence[Path], config: str, source: SmilesTable, frame: pd.DataFrame
                       ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The descriptor trees' predictions of ``frame`` per target (N,), and per target the blend weight of
    :func:`blend_weight` on the validation rows, which the checkpoints' ensemble predicts for it."""
    _, valid = split_table(config, "valid")
    _, train = split_table(config, "train")
    _, valid_ensemble = _with_members(valid, _member_predictions(checkpoints, source, valid))
    tree_valid, tree_frame = descriptor_trees(source, train, [valid, frame])
    weights = {name: blend_weight(valid_ensemble[name], tree_valid[name], valid[name].to_numpy())
               for name in source.targets}
    log.info("descriptor trees blended with weights %s (chosen on %d validation rows)", weights, len(valid))
    known = {name: int(valid[name].notna().sum()) for name in source.targets}
    if few := {name: rows for name, rows in known.items() if rows < FEW_VALIDATION_ROWS}:
        chosen = "; ".join(f"'{name}': {weights[name]} on {rows} row{'' if rows == 1 else 's'}"
                           for name, rows in few.items())
        log.warning("%s: the trees' weight was chosen on fewer than %d validation rows (%s): too few to choose it "
                    "reliably, so the blend's figures say little; use a larger table, or the ensemble without --trees",
                    source.path, FEW_VALIDATION_ROWS, chosen)
    return tree_frame, weights


def _check_trees(source: SmilesTable, split: str) -> None:
    if source.task != "regression":
        raise DataError(f"the descriptor trees blend regression predictions; {source.path} is a {source.task} task")
    if not source.features.descriptors:
        raise DataError("the descriptor trees read the RDKit descriptors, and this config has none: add "
                        "--data.source.descriptors rdkit2d (configs/small_molecules.yaml has it)")
    if split == "valid":
        raise DataError("the trees' weight is chosen on the validation rows: score the blend on another split")


def _descriptors(smiles: pd.Series) -> np.ndarray:
    """(N, D) the normalised RDKit descriptors of each SMILES (each parsed by the table's read already)."""
    return np.stack([normalised_descriptors(Chem.MolFromSmiles(text), tails=DESCRIPTOR_TAILS) for text in smiles])


def _member_predictions(checkpoints: Sequence[Path], source: SmilesTable, frame: pd.DataFrame
                        ) -> list[dict[str, np.ndarray]]:
    """Every checkpoint's predictions of the frame's molecules, per scored column (N,)."""
    member_columns: list[dict[str, np.ndarray]] = []
    with tempfile.TemporaryDirectory() as tmp:
        molecules = Path(tmp) / "molecules.csv"
        frame[[source.smiles_column]].to_csv(molecules, index=False)
        for k, checkpoint in enumerate(checkpoints):
            predicted = predict_table(Path(checkpoint), molecules, Path(tmp) / f"member{k}.csv",
                                      _member_config(checkpoint, source))
            member_columns.append({name: predicted[name].to_numpy(np.float64)
                                   for name in _score_columns(source, predicted)})
    return member_columns


def _member_config(checkpoint: Path, source: SmilesTable) -> str:
    """The member's own config, checked to name the ensemble's table and targets."""
    member_config = embedded_config(checkpoint)
    member = yaml.safe_load(member_config)["data"]["init_args"]["source"]["init_args"]
    if Path(member.get("path", "")) != source.path or list(member.get("targets", [])) != source.targets:
        raise DataError(f"{checkpoint} was trained on {member.get('path')} {member.get('targets')}, not on "
                        f"{source.path} {source.targets}: an ensemble's members share one table and targets")
    return member_config


def _with_members(frame: pd.DataFrame, member_columns: Sequence[dict[str, np.ndarray]]
                  ) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """A copy of ``frame`` with every member's predictions (``member<k>_<column>``) and their mean
    (``ensemble_<column>``), and that mean per column (N,)."""
    table = frame.copy()
    for k, columns in enumerate(member_columns):
        for name, values in columns.items():
            table[f"member{k}_{name}"] = values
    ensemble = {name: np.mean([columns[name] for columns in member_columns], axis=0) for name in member_columns[0]}
    for name, values in ensemble.items():
        table[f"ensemble_{name}"] = values
    return table, ensemble


def _blend(ensemble: np.ndarray, trees: np.ndarray, weight: float) -> np.ndarray:
    """``(1 - weight) * ensemble + weight * trees``, (N,)."""
    return (1 - weight) * ensemble + weight * trees


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
