"""The cheap parts of the small-data ensemble and their blend with the network's ensemble (docs/small-data.md).

The parts beside the members' mean (``ensemble``):

- ``trees``: gradient-boosted trees (scikit-learn's ``HistGradientBoostingRegressor``, or ``...Classifier`` for a
  binary label; their defaults, ``random_state=0``), one per target, fitted on the training rows' molecule features
  as the model reads them: the RDKit descriptors and/or the Morgan count fingerprints (:func:`tree_inputs`).
- ``kernel``: a Gaussian process on Morgan count fingerprints with Tanimoto's kernel
  (:mod:`graphormer_urpe.evaluation.kernel`), fitted on the training rows.

Per target the blend is ``sum_p w_p * part_p`` (values, or probabilities of label 1), the weights chosen on the
validation rows by one rule fixed before any benchmark ran (:func:`blend_weights`): with ``e_p`` the part's
mean squared error (for a binary label the Brier score, the squared error of the probability) over the validation
rows where the target is known, a part goes in when ``e_p <= ADMIT * min_q e_q`` and its weight is

    w_p = (1 / e_p) / sum_q (1 / e_q)        over the parts that go in

(Bates and Granger's inverse-error weights). The rule it replaces, the weight of a 5-point grid whose blend scored
best on the validation rows, jumps between 0 and 1 when a few rows change (on 49 rows it gave the trees 0 where
they were the best part on the test rows); inverse errors move by as much as the errors do, and keep every part
that is about as good as the best (``bench/small_data/moleculeace.py --blend-stability`` measures both rules'
weights under resampling of the validation rows).

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
from graphormer_urpe.data.sources.fingerprints import ecfp_counts
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
from graphormer_urpe.errors import CheckpointError, DataError

log = logging.getLogger("graphormer_urpe")

#: A part goes into the blend when its validation error is at most this many times the best part's.
ADMIT = 1.5
#: The parts an ensemble may hold beside the members' mean, in the order the blend lists them, and what they are.
PART_TITLES = {"trees": "descriptor trees", "kernel": "fingerprint kernel's processes"}  # "the ... need"
CHEAP_PARTS = tuple(PART_TITLES)
#: The kinds of target the cheap parts predict.
PART_KINDS = ("regression", "binary")
#: How the record names the blend's rule (``EnsembleRecord.blend_rule``).
BLEND_RULE = f"inverse validation error (MSE; Brier for labels), parts within {ADMIT}x of the best"
#: Validation rows of a target below which the blend's weights are said to be unreliable: the parts' validation
#: errors then differ by the errors of a few molecules.
FEW_VALIDATION_ROWS = 10
#: The types a saved tree file may hold besides the estimators and NumPy types skops trusts by default.
TRUSTED_TYPES = ["sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor"]

TreeModel = HistGradientBoostingRegressor | HistGradientBoostingClassifier


def tree_inputs(features: MoleculeFeatures, smiles: Sequence[str]) -> np.ndarray:
    """The trees' inputs: the molecule features the model reads of each molecule (each SMILES parsed by the table's
    read already): its RDKit descriptors (normalised) and its Morgan fingerprint's counts, those it has of the two.
    Shapes: (N, D) float64."""
    molecules = [Chem.MolFromSmiles(text) for text in smiles]
    columns = []
    if features.descriptors:
        columns.append(np.stack([descriptor_features(mol) for mol in molecules]).astype(np.float64))
    if features.fingerprints:
        columns.append(np.stack([ecfp_counts(mol) for mol in molecules]).astype(np.float64))
    if not columns:
        raise DataError(
            "the trees read the runs' RDKit descriptors or fingerprints, and these runs have neither: "
            "train with --data.source.descriptors rdkit2d or --data.source.fingerprints ecfp"
        )
    return np.concatenate(columns, axis=1)


def check_part_targets(part: str, kind: str, names: Sequence[str], targets: np.ndarray | None) -> None:
    """Refuse (:class:`DataError`) targets a cheap part (``trees``, ``kernel``) cannot be fitted on: a multi-class
    label, or a binary label with one class among the training rows (missing labels, NaN, left out; ``targets``
    None: the kind alone is checked).

    Shapes: targets (N, Y)."""
    title = PART_TITLES[part]
    if kind not in PART_KINDS:
        raise DataError(
            f"the {title} predict regression targets or binary labels; this table has a {kind} "
            f"label: ensemble without --{part}"
        )
    for k, name in enumerate(names if targets is not None else ()):
        if kind == "binary" and len(np.unique(targets[~np.isnan(targets[:, k]), k])) < 2:
            raise DataError(
                f"the {title} need both classes of label '{name}' among the training rows, which hold "
                f"one; ensemble without --{part}"
            )


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
    def fit(cls, kind: str, names: Sequence[str], descriptors: np.ndarray, targets: np.ndarray) -> DescriptorTrees:
        """Fit one model per target on the rows where it is known. Shapes: descriptors (N, D), targets (N, Y)."""
        check_part_targets("trees", kind, names, targets)
        models: list[TreeModel] = []
        for k in range(len(names)):
            known = ~np.isnan(targets[:, k])
            if kind == "binary":
                model: TreeModel = HistGradientBoostingClassifier(random_state=0)
            else:
                model = HistGradientBoostingRegressor(random_state=0)
            models.append(model.fit(descriptors[known], targets[known, k]))
        return cls(kind, models)

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
                raise CheckpointError(
                    f"{path}: not a tree file of an ensemble ({type(error).__name__}: {str(error)[:200]})"
                ) from None
            if not isinstance(model, HistGradientBoostingRegressor | HistGradientBoostingClassifier):
                raise CheckpointError(f"{path} holds a {type(model).__name__}, not fitted trees")
            models.append(model)
        return cls(kind, models)


def blend(parts: dict[str, np.ndarray], weights: Sequence[dict[str, float]]) -> np.ndarray:
    """``sum_p w_p * part_p`` for each score column (target), with its weights (a part it leaves out has none).

    Shapes: each part (N, Y), Y weights -> (N, Y)."""
    columns = [sum(weight * parts[part][:, k] for part, weight in column.items()) for k, column in enumerate(weights)]
    return np.stack(columns, axis=1)


def blend_weights(
    parts: dict[str, np.ndarray], targets: np.ndarray, names: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Per target, the weights of the parts that go in (module docstring): inverse mean squared errors on these
    (validation) rows, normalised to sum to 1, for the parts within :data:`ADMIT` times the best error. A target
    without a known row weighs its parts equally; a target with fewer than :data:`FEW_VALIDATION_ROWS` known rows gets a
    warning (one line for all such targets).

    Shapes: each part (N, Y) in the task's scores (values, or probabilities of label 1), targets (N, Y) NaN where
    unknown -> {target: {part: weight}}, the parts in the order of ``parts``."""
    weights = {}
    known = ~np.isnan(targets)  # (N, Y)
    for k, name in enumerate(names):
        if not known[:, k].any():
            log.warning("the blend of '%s' cannot be chosen: no validation row knows it; its parts weigh equally", name)
            weights[name] = {part: 1.0 / len(parts) for part in parts}
            continue
        errors = {
            part: float(np.mean((values[known[:, k], k] - targets[known[:, k], k]) ** 2))
            for part, values in parts.items()
        }
        best = min(errors.values())
        if best == 0.0:  # a part predicts every validation row exactly: it alone, the first such part
            exact = next(part for part, error in errors.items() if error == 0.0)
            weights[name] = {exact: 1.0}
            continue
        admitted = {part: 1.0 / error for part, error in errors.items() if error <= ADMIT * best}
        total = sum(admitted.values())
        weights[name] = {part: inverse / total for part, inverse in admitted.items()}
    counts = known.sum(axis=0)  # (Y,)
    if few := [k for k in range(len(names)) if counts[k] < FEW_VALIDATION_ROWS]:
        chosen = "; ".join(f"'{names[k]}' on {counts[k]} row{'' if counts[k] == 1 else 's'}" for k in few)
        log.warning(
            "the blend's weights were chosen on fewer than %d validation rows (%s): too few to choose them "
            "reliably, so the blend's figures say little; use a larger table, or the ensemble alone",
            FEW_VALIDATION_ROWS,
            chosen,
        )
    return weights
