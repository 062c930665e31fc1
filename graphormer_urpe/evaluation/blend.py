"""The descriptor trees of the small-data recipe and their blend with an ensemble (docs/small-data.md).

Gradient-boosted trees (scikit-learn's ``HistGradientBoostingRegressor``, or ``...Classifier`` for a binary label;
their defaults, ``random_state=0``), one per target, are fitted on the training rows' RDKit descriptors (the values
the model reads, :func:`~graphormer_urpe.data.sources.descriptors.descriptor_features`). Per target the blend is

    blend = (1 - w) * ensemble + w * trees        (values, or probabilities of label 1)

with ``w`` the one of :data:`TREE_WEIGHTS` whose blend scores best on the validation rows by the metric that selects
each run's best checkpoint (the task's ``monitor``: MAE for regression, ROC-AUC for binary labels), the smaller
weight on a tie, 0 where the metric is undefined (a label with one class among the validation rows).

The fitted trees are saved with skops (``.skops``: a zip of JSON and NumPy arrays, loaded without pickle); loading
accepts scikit-learn's own estimators and :data:`TRUSTED_TYPES` only, so a tampered file cannot run code.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import skops.io
from rdkit import Chem
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from graphormer_urpe.data.sources.descriptors import descriptor_features
from graphormer_urpe.errors import CheckpointError, DataError
from graphormer_urpe.tasks.base import PerTargetTask

log = logging.getLogger("graphormer_urpe")

#: Weights of the trees' prediction in the blend (0: the ensemble alone, 1: the trees alone).
TREE_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Validation rows of a target below which the choice of its trees' weight is said to be unreliable: the five
#: candidates' validation scores then differ by the errors of a few molecules.
FEW_VALIDATION_ROWS = 10
#: The types a saved tree file may hold besides the estimators and NumPy types skops trusts by default.
TRUSTED_TYPES = ["sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor"]
#: The kinds of target the trees predict.
TREE_KINDS = ("regression", "binary")

TreeModel = HistGradientBoostingRegressor | HistGradientBoostingClassifier


def descriptor_matrix(smiles: Sequence[str]) -> np.ndarray:
    """The trees' inputs: the descriptors the model reads of each molecule (each SMILES parsed by the table's read
    already). Shapes: (N, D) float64."""
    return np.stack([descriptor_features(Chem.MolFromSmiles(text)) for text in smiles]).astype(np.float64)


class DescriptorTrees:
    """One fitted tree model per target: :meth:`fit` on the training rows, :meth:`predict`, :meth:`save` and
    :meth:`load` (skops, no pickle).

    Args:
        kind: ``regression`` or ``binary``.
        models: the fitted model of each target, in the targets' order.
    """

    def __init__(self, kind: str, models: Sequence[TreeModel]) -> None:
        self.kind = kind
        self.models = list(models)

    @classmethod
    def fit(
        cls, kind: str, names: Sequence[str], descriptors: np.ndarray, targets: np.ndarray
    ) -> DescriptorTrees:
        """Fit one model per target on the rows where it is known. Shapes: descriptors (N, D), targets (N, Y)."""
        cls.check_targets(kind, names, targets)
        models: list[TreeModel] = []
        for k in range(len(names)):
            known = ~np.isnan(targets[:, k])
            if kind == "binary":
                model: TreeModel = HistGradientBoostingClassifier(random_state=0)
            else:
                model = HistGradientBoostingRegressor(random_state=0)
            models.append(model.fit(descriptors[known], targets[known, k]))
        return cls(kind, models)

    @staticmethod
    def check_targets(kind: str, names: Sequence[str], targets: np.ndarray) -> None:
        """Refuse (:class:`DataError`) targets the trees cannot be fitted on: a multi-class label, or a binary label
        with one class among the training rows (missing labels, NaN, left out). Shapes: targets (N, Y)."""
        if kind not in TREE_KINDS:
            raise DataError(f"the descriptor trees predict regression targets or binary labels, not {kind} ones")
        for k, name in enumerate(names):
            if kind == "binary" and len(np.unique(targets[~np.isnan(targets[:, k]), k])) < 2:
                raise DataError(f"the descriptor trees need both classes of label '{name}' among the training rows, "
                                "which hold one; ensemble without --trees")

    def predict(self, descriptors: np.ndarray) -> np.ndarray:
        """Each target's prediction: a value, or the probability of label 1. Shapes: (N, D) -> (N, Y) float64."""
        if self.kind == "binary":
            return np.stack([model.predict_proba(descriptors)[:, 1] for model in self.models], axis=1)
        return np.stack([model.predict(descriptors) for model in self.models], axis=1)

    def save(self, directory: Path) -> list[str]:
        """Write one ``target<k>.skops`` per target into ``directory``; returns their names."""
        directory.mkdir(parents=True, exist_ok=True)
        names = [f"target{k}.skops" for k in range(len(self.models))]
        for name, model in zip(names, self.models):
            skops.io.dump(model, directory / name)
        return names

    @classmethod
    def load(cls, kind: str, files: Sequence[Path]) -> DescriptorTrees:
        """The trees saved by :meth:`save`; :class:`CheckpointError` for a file that is not one, or that holds
        other types than fitted trees."""
        models = []
        for path in files:
            try:
                model = skops.io.load(path, trusted=TRUSTED_TYPES)
            except Exception as error:  # skops raises UntrustedTypesFoundException, zip and JSON errors
                raise CheckpointError(f"{path}: not a tree file of an ensemble ({type(error).__name__}: "
                                      f"{str(error)[:200]})") from None
            if not isinstance(model, HistGradientBoostingRegressor | HistGradientBoostingClassifier):
                raise CheckpointError(f"{path} holds a {type(model).__name__}, not fitted trees")
            models.append(model)
        return cls(kind, models)


def blend(ensemble: np.ndarray, trees: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """``(1 - w) * ensemble + w * trees`` with each target's weight. Shapes: (N, Y), (N, Y), (Y,) -> (N, Y)."""
    w = np.asarray(weights, dtype=np.float64)
    return (1.0 - w) * ensemble + w * trees


def choose_weights(
    task: PerTargetTask, ensemble: np.ndarray, trees: np.ndarray, targets: np.ndarray
) -> list[float]:
    """Per target, the weight of :data:`TREE_WEIGHTS` whose blend scores best on these (validation) rows by the
    task's own monitor metric, the smaller one on a tie; 0 where the metric is undefined. A target with fewer than
    :data:`FEW_VALIDATION_ROWS` known rows gets a warning (one line for all such targets).

    Shapes: ensemble, trees (N, Y) in the task's scores, targets (N, Y) NaN where unknown -> (Y,)."""
    key, mode = task.monitor  # e.g. ("val/mae", "min")
    stage, metric = key.split("/", 1)
    names = task.target_names
    keys = [f"{key}/{name}" for name in names] if len(names) > 1 else [key]
    scores = np.array([[task.score(blend(ensemble, trees, [w] * len(names)), targets, stage)[k] for k in keys]
                       for w in TREE_WEIGHTS])  # (W, Y)
    weights = []
    for k, name in enumerate(names):
        column = scores[:, k]
        if np.isnan(column).all():
            log.warning(
                "the blend weight of '%s' cannot be chosen: its validation %s is undefined (one class, or "
                "no known value, among the validation rows); the ensemble alone predicts it",
                name,
                metric,
            )
            weights.append(0.0)
            continue
        best = np.nanargmin(column) if mode == "min" else np.nanargmax(column)  # the first, smallest, on a tie
        weights.append(TREE_WEIGHTS[int(best)])
    known = (~np.isnan(targets)).sum(axis=0)  # (Y,)
    if few := [k for k in range(len(names)) if known[k] < FEW_VALIDATION_ROWS]:
        chosen = "; ".join(
            f"'{names[k]}': {weights[k]} on {known[k]} row{'' if known[k] == 1 else 's'}" for k in few
        )
        log.warning(
            "the trees' weight was chosen on fewer than %d validation rows (%s): too few to choose it "
            "reliably, so the blend's figures say little; use a larger table, or the ensemble without --trees",
            FEW_VALIDATION_ROWS,
            chosen,
        )
    return weights
