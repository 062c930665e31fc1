"""An ensemble you can hold (``graphormer-urpe ensemble``, ``sweep --ensemble``): the best checkpoints of several runs
of one SMILES-table config, their mean prediction (of the probabilities for classification) as chemprop's ensembles,
optionally blended with cheap parts, descriptor trees and a fingerprint kernel (:mod:`graphormer_urpe.evaluation.blend`,
:mod:`graphormer_urpe.evaluation.kernel`), saved as one directory that ``graphormer-urpe predict --model DIR`` reads
without the training table, from anywhere (docs/small-data.md):

    DIR/ensemble.json         the record (:class:`EnsembleRecord`): members and parts with their SHA-256, targets,
                              blend weights, descriptor reference, data spec and identity, scores, how it was made
    DIR/members/member<k>.ckpt  each member's weights and config (the optimiser's state left out)
    DIR/trees/target<k>.skops   the fitted trees of each target (with --trees), loaded without pickle
    DIR/kernel/target<k>.npz    the fingerprint kernel's process of each target (with --kernel), NumPy arrays only
    DIR/valid.csv, test.csv     every part's predictions of the table's own validation and test rows

:func:`build_ensemble` makes it (every refusal before any work, written whole or not at all);
:class:`SavedEnsemble` reads it back and predicts new molecules exactly as it predicted its own test rows."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from graphormer_urpe.data.files import unwritable
from graphormer_urpe.data.sources.descriptors import descriptor_reference
from graphormer_urpe.data.sources.fingerprints import ecfp_count_matrix
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
from graphormer_urpe.data.sources.tables import SmilesTable
from graphormer_urpe.errors import CheckpointError, DataError
from graphormer_urpe.evaluation.blend import (
    BLEND_RULE,
    CHEAP_PARTS,
    DescriptorTrees,
    blend,
    blend_weights,
    check_part_targets,
    tree_inputs,
)
from graphormer_urpe.evaluation.kernel import FingerprintKernel, check_training_rows
from graphormer_urpe.evaluation.new_molecules import (
    Prediction,
    TablePredictions,
    check_table_to_predict,
    model_of,
    predict_molecules,
    prediction_frame,
    table_to_predict,
    write_predictions,
)
from graphormer_urpe.run.checkpoints import (
    DATA_IDENTITY_KEY,
    RunConfig,
    differences,
    load_checkpoint,
    reduced_checkpoint,
)
from graphormer_urpe.run.provenance import git_commit, package_versions
from graphormer_urpe.run.sweep import signals_held
from graphormer_urpe.tasks.base import PerTargetTask

log = logging.getLogger("graphormer_urpe")

#: The record's file in an ensemble's directory.
RECORD_FILE = "ensemble.json"
#: A finished run's final metrics in its directory, naming its best checkpoint (``graphormer-urpe train``).
RUN_METRICS = "metrics.json"
#: The layout of the directory this version writes; it reads format 1 too (trees only, :func:`from_format_1`).
FORMAT = 2
#: The splits an ensemble predicts and scores when it is made: the validation rows choose the blend weights.
SPLITS = ("valid", "test")
#: How :func:`summary` names each metric of the tasks (``mae``, ``auroc`` ...).
METRIC_NAMES = {"mae": "MAE", "auroc": "ROC-AUC", "auprc": "PR-AUC", "accuracy": "accuracy"}
#: The kinds of target an ensemble predicts, as the table declares them (``data.source.task``).
TARGET_KINDS = ("regression", "binary", "multiclass")


@dataclass(frozen=True)
class SavedFile:
    """A file of the ensemble's directory and the SHA-256 of its bytes, checked before it is read."""

    path: str  # relative to the ensemble's directory
    sha256: str  # hex digest


@dataclass(frozen=True)
class EnsembleRecord:
    """``ensemble.json``: what an ensemble's directory holds and how it was made."""

    format: int  # FORMAT: the directory's layout
    target_kind: str  # regression, binary or multiclass, as the table declares its targets
    targets: list[str]  # the targets, in the order of the members' outputs
    smiles_column: str  # the training table's SMILES column: predict's default
    members: list[SavedFile]  # members/member<k>.ckpt, in order
    sources: list[SavedFile]  # the checkpoints the members were copied from, as given, with their SHA-256
    trees: list[SavedFile] | None  # trees/target<k>.skops, one per target; None: no trees
    tree_inputs: list[str] | None  # what the trees read: rdkit2d (descriptors) and/or ecfp (fingerprint counts)
    kernel: list[SavedFile] | None  # kernel/target<k>.npz, one per target; None: no kernel part
    blend_weights: dict[str, dict[str, float]] | None  # per target: part (ensemble, trees, kernel) -> its weight
    blend_rule: str | None  # how the weights were chosen (blend.BLEND_RULE)
    descriptor_reference_sha1: str | None  # of the RDKit descriptors' reference the trees and members read
    data_spec: dict[str, Any]  # the data's declaration the members were trained on (DataSpec as JSON)
    data_identity: dict[str, Any]  # the training table's identity (SHA-1, split, targets, cache key)
    scores: dict[str, dict[str, dict[str, float]]]  # split -> part (member<k>, ensemble, trees, blend) -> metrics
    # the command, the time, the commit, the packages' versions
    made: dict[str, Any] = field(default_factory=dict)

    @property
    def cheap_parts(self) -> list[str]:
        """The parts beside the members' mean that it holds (``trees``, ``kernel``), in the blend's order."""
        return [part for part in CHEAP_PARTS if getattr(self, part) is not None]

    @property
    def final(self) -> str:
        """The part whose prediction is the ensemble's: ``blend`` with cheap parts, else ``ensemble`` (the mean)."""
        return "blend" if self.cheap_parts else "ensemble"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, path: Path) -> EnsembleRecord:
        """The record stored in ``path`` (its ``text``), checked (:meth:`check`): :class:`CheckpointError` names the
        file and the key of the first problem."""
        try:
            stored = json.loads(text)
            if stored.get("format") == 1:
                stored = from_format_1(stored)
            if stored.get("format") != FORMAT:
                raise CheckpointError(
                    f"{path}: an ensemble of format {stored.get('format')}; this version reads formats 1 and {FORMAT}"
                )
            for key in ("members", "sources", *CHEAP_PARTS):
                if stored[key] is not None:
                    stored[key] = [SavedFile(**saved) for saved in stored[key]]
            record = cls(**stored)
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as error:
            raise CheckpointError(f"{path}: not an ensemble record ({type(error).__name__}: {error})") from None
        if problem := record.problem():
            key, what = problem
            raise CheckpointError(
                f"{path}: '{key}' {what}; the record was changed after the ensemble was made "
                "(make it again with graphormer-urpe ensemble)"
            )
        return record

    def problem(self) -> tuple[str, str] | None:
        """The first key whose value this record cannot hold, and why: the kind of target, the targets, the files
        (strings inside the directory; one file per target for each cheap part), what the trees read, and per target
        blend weights of the parts it holds, each in [0, 1] and summing to 1, with the rule that chose them,
        exactly when it holds a cheap part."""
        if self.target_kind not in TARGET_KINDS:
            return "target_kind", f"is {self.target_kind!r}, not one of {', '.join(TARGET_KINDS)}"
        named = isinstance(self.targets, list) and all(isinstance(name, str) and name for name in self.targets)
        if not named or not self.targets:
            return "targets", "must be a list of the targets' names"
        if not isinstance(self.smiles_column, str) or not self.smiles_column:
            return "smiles_column", "must name the training table's SMILES column"
        files = {
            "members": self.members,
            "sources": self.sources,
            "trees": self.trees or [],
            "kernel": self.kernel or [],
        }
        for key, saved in files.items():
            if not all(isinstance(f.path, str) and isinstance(f.sha256, str) for f in saved):
                return key, "must list files as {path, sha256} strings"
        for key in ("members", *CHEAP_PARTS):
            if outside := [f.path for f in files[key] if Path(f.path).is_absolute() or ".." in Path(f.path).parts]:
                return key, f"names {outside[0]}, not a file inside the ensemble's directory"
        if not self.members:
            return "members", "lists no member"
        for part in self.cheap_parts:
            if len(files[part]) != len(self.targets):
                return part, f"lists {len(files[part])} files for {len(self.targets)} targets"
        if self.trees is not None and (
            not isinstance(self.tree_inputs, list)
            or not self.tree_inputs
            or not set(self.tree_inputs) <= set(TREE_INPUTS)
        ):
            return "tree_inputs", f"must list what the trees read, of {', '.join(TREE_INPUTS)}"
        if not self.cheap_parts:
            if self.blend_weights is not None or self.blend_rule is not None:
                return "blend_weights", "are given for an ensemble without trees or kernel"
            return None
        return self.weights_problem()

    def weights_problem(self) -> tuple[str, str] | None:
        """The first problem of the blend's weights (:meth:`problem`), or None."""
        if not isinstance(self.blend_weights, dict) or list(self.blend_weights) != self.targets:
            return "blend_weights", f"must give the weights of each target, in order: {', '.join(self.targets)}"
        parts = ["ensemble", *self.cheap_parts]
        for name, weights in self.blend_weights.items():
            key = f"blend_weights.{name}"
            if not isinstance(weights, dict) or not weights or not set(weights) <= set(parts):
                return key, f"must weigh some of the parts {', '.join(parts)}"
            for part, weight in weights.items():
                if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0.0 <= weight <= 1.0:
                    return f"{key}.{part}", f"is {weight!r}, not a weight in [0, 1]"
            if abs(sum(weights.values()) - 1.0) > 1e-9:
                return key, f"sum to {sum(weights.values())!r}, not 1: a blend's weights sum to 1"
        if not isinstance(self.blend_rule, str) or not self.blend_rule:
            return "blend_rule", "must name the rule that chose the weights"
        return None


#: What the trees may read (``EnsembleRecord.tree_inputs``): the descriptors, the fingerprint counts.
TREE_INPUTS = ("rdkit2d", "ecfp")


def from_format_1(stored: dict) -> dict:
    """A format-1 record (trees only, one weight ``w`` per target: ``(1 - w) * ensemble + w * trees``, chosen on
    a grid by the validation metric ``blend_metric``) as format 2 holds it."""
    stored = dict(stored)
    weights, metric = stored.pop("tree_weights", None), stored.pop("blend_metric", None)
    if isinstance(weights, dict):  # anything else is left for EnsembleRecord.problem to name
        weights = {
            name: {"ensemble": 1.0 - w, "trees": w} if isinstance(w, float) else w for name, w in weights.items()
        }
    stored |= {
        "format": FORMAT,
        "kernel": None,
        "blend_weights": weights,
        "tree_inputs": None if stored.get("trees") is None else ["rdkit2d"],
        "blend_rule": None if metric is None else f"the best validation {metric} of 5 weights (format 1)",
    }
    return stored


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- making one


@dataclass(frozen=True)
class EnsemblePlan:
    """An ensemble to make, every input checked (:func:`plan_ensemble`)."""

    checkpoints: list[Path]  # the members' checkpoints, as given
    out: Path  # the directory to write (it does not exist)
    trees: bool  # blend with descriptor trees
    kernel: bool  # blend with the fingerprint kernel
    config: RunConfig  # the first member's config: the table, its split and targets
    source: SmilesTable  # the table as the runs read it
    target_kind: str  # regression, binary or multiclass
    data_identity: dict[str, Any]  # the members' common training data
    tasks: list[PerTargetTask]  # the members' models, loaded


def member_checkpoint(run: Path) -> Path:
    """A run's member: the checkpoint file given, or the best checkpoint of the run directory given, read from inside
    it wherever it was moved: ``metrics.json`` names the file (by the path it had when the run finished), and it is
    the one of that name in the directory's own ``checkpoints/``."""
    if run.is_file():
        return run
    metrics = run / RUN_METRICS
    if not metrics.is_file():
        raise DataError(f"--runs {run}: neither a checkpoint file nor a finished run's directory (no {metrics})")
    try:
        recorded = json.loads(metrics.read_text()).get("best_checkpoint")
    except (json.JSONDecodeError, AttributeError) as error:
        raise DataError(f"--runs {run}: {metrics} is not a run's metrics ({error})") from None
    if not isinstance(recorded, str) or not recorded:
        raise DataError(
            f"--runs {run}: {metrics} names no best checkpoint (best_checkpoint: {recorded!r}); name "
            "a checkpoint file instead"
        )
    best = run / "checkpoints" / Path(recorded).name
    if not best.is_file():
        raise DataError(
            f"--runs {run}: its best checkpoint {best} (best_checkpoint of its {RUN_METRICS}) is not "
            "there; name a checkpoint file instead"
        )
    return best


def member_checkpoints(runs: Sequence[Path]) -> list[Path]:
    """Every run's member (:func:`member_checkpoint`); :class:`DataError` for a run given twice (once as a
    directory and once as its checkpoint, say): an ensemble of one run twice would claim a spread of 0."""
    checkpoints = [member_checkpoint(run) for run in runs]
    first: dict[Path, int] = {}
    for k, checkpoint in enumerate(checkpoints):
        if (earlier := first.setdefault(checkpoint.resolve(), k)) != k:
            raise DataError(
                f"--runs {runs[earlier]} and {runs[k]} are the same run ({checkpoint.resolve()}): an "
                "ensemble's members are different runs"
            )
    return checkpoints


def plan_ensemble(checkpoints: Sequence[Path], out: Path, trees: bool, kernel: bool = False) -> EnsemblePlan:
    """Check everything an ensemble needs before any work: an output that does not exist and can be written; members
    that are runs of one SMILES table (same table, split, targets and molecule features, by the data identity their
    checkpoints record) whose table can be read from here; for ``trees``, RDKit descriptors or fingerprints among
    the features; for ``trees`` and ``kernel``, regression targets or binary labels with both classes among the
    training rows. :class:`~graphormer_urpe.errors.InputError` names the first problem."""
    if not checkpoints:
        raise DataError("an ensemble needs at least one run: --runs RUN_DIR_OR_CKPT ...")
    if out.exists():
        raise DataError(f"--out {out} exists; an ensemble is written to a new directory (nothing is overwritten)")
    if (read_only := unwritable(out.parent)) is not None:
        raise DataError(f"--out {out}: {read_only} is not writable")
    tasks, configs, identities = [], [], []
    for checkpoint in checkpoints:
        task, config = model_of(checkpoint)
        tasks.append(task)
        configs.append(config)
        identities.append(load_checkpoint(checkpoint).get(DATA_IDENTITY_KEY))
    config = configs[0]
    if not issubclass(config.source_class(), SmilesTable):
        raise DataError(
            f"an ensemble predicts the rows of a SMILES table (data.source SmilesTable), not of "
            f"{config.data_name}; evaluate each run with graphormer-urpe evaluate instead"
        )
    for checkpoint, identity, task in zip(checkpoints[1:], identities[1:], tasks[1:]):
        if identity is None or identities[0] is None:
            raise DataError(
                f"{checkpoint if identity is None else checkpoints[0]} records no identity of its data "
                "(written by an earlier version): an ensemble's members must be known to share one table"
            )
        if differing := differences(identities[0], identity, str(checkpoints[0]), str(checkpoint)):
            raise DataError(
                f"the members were trained on different data: {differing}; an ensemble's members "
                "share one table, split, targets and molecule features"
            )
        if type(task) is not type(tasks[0]):
            raise DataError(f"{checkpoint} is a {type(task).__name__}, {checkpoints[0]} a {type(tasks[0]).__name__}")
    source = config.source()
    if not source.path.is_file():
        raise DataError(
            f"the runs' table {source.path} is not here (relative paths are read from the directory the "
            "runs were trained in): make the ensemble from there"
        )
    check_cheap_parts(source, trees, kernel)
    return EnsemblePlan(
        checkpoints=list(checkpoints),
        out=out,
        trees=trees,
        kernel=kernel,
        config=config,
        source=source,
        target_kind=source.task,
        data_identity=identities[0] or {},
        tasks=tasks,
    )


def check_cheap_parts(source: SmilesTable, trees: bool, kernel: bool) -> None:
    """Refuse (:class:`DataError`) cheap parts the runs' table cannot have: trees without descriptors or fingerprints
    among the runs' features; for either part, a multi-class label or a binary label with one class among the
    training rows; the kernel on more training rows of a target than it takes
    (:func:`~graphormer_urpe.evaluation.kernel.check_training_rows`). The table is read for the last two."""
    if trees and not (source.features.descriptors or source.features.fingerprints):
        raise DataError(
            "--trees reads the runs' RDKit descriptors or fingerprints, and these runs have neither: train "
            "with --data.source.descriptors rdkit2d (configs/small_molecules.yaml has it)"
        )
    parts = [part for part, wanted in (("trees", trees), ("kernel", kernel)) if wanted]
    for part in parts:
        check_part_targets(part, source.task, source.targets, None)  # the kind, before the table is read
    reads_labels = source.task == "binary" and bool(parts)  # a label needs both classes among the training rows
    if not (reads_labels or kernel):
        return  # nothing below: the table is not read
    targets = split_rows(source, "train")[source.targets].to_numpy()
    if reads_labels:
        for part in parts:
            check_part_targets(part, source.task, source.targets, targets)
    if kernel:
        for name, known in zip(source.targets, np.isfinite(targets).sum(axis=0)):
            check_training_rows(int(known), f"{source.path}, target '{name}'")


def split_rows(source: SmilesTable, split: str) -> pd.DataFrame:
    """The rows of ``split`` the runs trained or tested on (skipped rows left out): the source row, the SMILES and
    the targets (NaN where missing)."""
    reader = source.open(Path("."))
    if split not in reader.splits:
        raise DataError(f"{source.path}: the {source.split} split has no '{split}' rows")
    rows = np.array([row for row in reader.splits[split] if row not in reader.rejected], dtype=np.int64)
    frame = pd.DataFrame({"row": rows, source.smiles_column: reader.smiles[rows]})
    for k, name in enumerate(source.targets):
        frame[name] = reader.targets[rows, k].astype(np.float64)
    return frame


@dataclass
class PartPredictions:
    """Every part's predictions of some rows, each (R, S) in the task's scores."""

    members: list[np.ndarray]
    cheap: dict[str, np.ndarray] = field(default_factory=dict)  # trees, kernel: each (R, S)
    weights: list[dict[str, float]] | None = None  # per score column (target): part -> weight in the blend

    @property
    def ensemble(self) -> np.ndarray:
        """The members' mean. (R, S)"""
        return np.mean(self.members, axis=0)

    @property
    def spread(self) -> np.ndarray:
        """The members' standard deviation (over the members, n in the denominator; 0 for one). (R, S)"""
        return np.std(self.members, axis=0)

    def parts(self) -> dict[str, np.ndarray]:
        """``member<k>``, ``ensemble``, and with cheap parts each of them and ``blend``."""
        parts = {f"member{k}": member for k, member in enumerate(self.members)} | {"ensemble": self.ensemble}
        if self.cheap and self.weights is not None:
            parts |= {**self.cheap, "blend": blend({"ensemble": self.ensemble, **self.cheap}, self.weights)}
        return parts

    def final(self) -> np.ndarray:
        """The ensemble's prediction: the blend with cheap parts, else the members' mean. (R, S)"""
        return self.parts()["blend" if self.cheap else "ensemble"]

    def columns(self, task: PerTargetTask) -> dict[str, np.ndarray]:
        """Output columns: the task's columns of :meth:`final` (values; labels and probabilities), then per score
        ``<score>_member<k>``, ``<score>_std`` and with cheap parts ``<score>_ensemble`` and ``<score>_<part>``."""
        columns = dict(task.prediction_columns(self.final()))
        parts = self.parts()
        shown = [*(f"member{k}" for k in range(len(self.members))), "std"]
        if self.cheap:
            shown += ["ensemble", *self.cheap]
        for s, name in enumerate(task.score_names()):
            for part in shown:
                columns[f"{name}_{part}"] = (self.spread if part == "std" else parts[part])[:, s]
        return columns


@dataclass(frozen=True)
class CheapParts:
    """The fitted cheap parts of an ensemble (None: not asked for)."""

    trees: DescriptorTrees | None
    kernel: FingerprintKernel | None
    features: MoleculeFeatures  # the runs' molecule features: what the trees read

    @classmethod
    def fit(
        cls,
        kind: str,
        names: Sequence[str],
        smiles: Sequence[str],
        targets: np.ndarray,
        features: MoleculeFeatures,
        trees: bool,
        kernel: bool,
    ) -> CheapParts:
        """The parts asked for, fitted on these (training) rows: the trees on what ``features`` gives of each molecule
        (:func:`~graphormer_urpe.evaluation.blend.tree_inputs`), the kernel on its count fingerprint. Shapes: targets
        (N, Y), NaN where unknown."""
        fitted_trees = DescriptorTrees.fit(kind, names, tree_inputs(features, smiles), targets) if trees else None
        fitted_kernel = FingerprintKernel.fit(kind, names, ecfp_count_matrix(smiles), targets) if kernel else None
        return cls(fitted_trees, fitted_kernel, features)

    def predict(self, smiles: Sequence[str]) -> dict[str, np.ndarray]:
        """Each part's predictions of these molecules (parsed by RDKit). Each (R, S)."""
        predicted = {}
        if self.trees is not None:
            predicted["trees"] = self.trees.predict(tree_inputs(self.features, smiles))
        if self.kernel is not None:
            predicted["kernel"] = self.kernel.predict(ecfp_count_matrix(smiles))
        return predicted


def fit_cheap_parts(plan: EnsemblePlan) -> CheapParts:
    """The planned cheap parts, fitted on the table's training rows."""
    source = plan.source
    train = split_rows(source, "train")
    smiles, targets = train[source.smiles_column].tolist(), train[source.targets].to_numpy()
    return CheapParts.fit(plan.target_kind, source.targets, smiles, targets, source.features, plan.trees, plan.kernel)


def build_ensemble(plan: EnsemblePlan, command: str) -> EnsembleRecord:
    """Make the planned ensemble: every member predicts the table's validation and test rows, the cheap parts (with
    ``plan.trees``, ``plan.kernel``) are fitted on its training rows and the blend's weights chosen on the validation
    rows (:func:`~graphormer_urpe.evaluation.blend.blend_weights`), every part is scored with the task's own metrics;
    the directory is written whole (a temporary one renamed) or not at all: of two processes writing one
    ``plan.out``, the second is refused (:class:`DataError`). Logs what it scores."""
    task, source = plan.tasks[0], plan.source
    frames = {split: split_rows(source, split) for split in SPLITS}
    members = _predict_rows(plan, pd.concat(frames.values(), ignore_index=True))
    sizes = np.cumsum([0, *(len(frame) for frame in frames.values())])
    predictions = {
        split: PartPredictions([member[sizes[i] : sizes[i + 1]] for member in members])
        for i, split in enumerate(SPLITS)
    }
    cheap = None
    if plan.trees or plan.kernel:
        cheap = fit_cheap_parts(plan)
        for split, frame in frames.items():
            predictions[split].cheap = cheap.predict(frame[source.smiles_column].tolist())
        valid = predictions["valid"]
        weights = blend_weights(
            {"ensemble": valid.ensemble, **valid.cheap}, frames["valid"][source.targets].to_numpy(), source.targets
        )
        for split in SPLITS:
            predictions[split].weights = [weights[name] for name in source.targets]
        log.info("blend weights %s, chosen on %d validation rows: %s", weights, len(frames["valid"]), BLEND_RULE)
    scores = {
        split: {
            part: task.score(values, frames[split][source.targets].to_numpy(), split)
            for part, values in predictions[split].parts().items()
        }
        for split in SPLITS
    }
    partial = Path(tempfile.mkdtemp(prefix=f".{plan.out.name}.partial-", dir=plan.out.parent))
    try:
        record = _write(plan, partial, cheap, predictions, frames, scores, command)
        os.rename(partial, plan.out)  # whole or not at all
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        if not plan.out.exists():
            raise
        raced = (
            f"--out {plan.out} was written by another process while this ensemble was made; nothing was "
            "overwritten (this one was discarded): use that one, or choose another --out"
        )
        raise DataError(raced) from error
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info("ensemble written to %s: %s", plan.out, summary(record))
    return record


def summary(record: EnsembleRecord, split: str = "test") -> str:
    """One line: the ensemble's prediction scored on ``split`` (the blend's, named as the blend's, with its
    weights; the ensemble alone and the trees alone beside it)."""
    scores = record.scores[split]

    def shown(part: str) -> str:
        headline = {key.split("/")[1]: value for key, value in scores[part].items() if key.count("/") == 1}
        return ", ".join(f"{METRIC_NAMES.get(name, name)} {value:.4g}" for name, value in headline.items())

    members = f"{len(record.members)} member{'s' if len(record.members) > 1 else ''}"
    if not record.cheap_parts:
        return f"{split} {shown('ensemble')} (the mean of {members})"
    weights = {name: {part: round(w, 3) for part, w in parts.items()} for name, parts in record.blend_weights.items()}
    alone = ", ".join(f"the {part} alone {shown(part)}" for part in record.cheap_parts)
    return (
        f"{split} {shown('blend')} of the blend of the ensemble with {' and '.join(record.cheap_parts)} (weights "
        f"{weights}, chosen on validation rows by {record.blend_rule}); the ensemble of {members} alone "
        f"{shown('ensemble')}, {alone}"
    )


def make_ensemble(runs: Sequence[Path], out: Path, trees: bool, command: str, kernel: bool = False) -> EnsembleRecord:
    """Plan (every refusal first), build and save the ensemble of ``runs`` (:func:`member_checkpoints`) into
    ``out``."""
    return build_ensemble(plan_ensemble(member_checkpoints(runs), out, trees, kernel), command)


def _predict_rows(plan: EnsemblePlan, frame: pd.DataFrame) -> list[np.ndarray]:
    """Every member's predictions of the frame's molecules, featurised once as new molecules. Each (R, S)."""
    with tempfile.TemporaryDirectory() as tmp:
        molecules = Path(tmp) / "molecules.csv"
        frame[[plan.source.smiles_column]].to_csv(molecules, index=False)
        predicted = predict_molecules(plan.tasks, plan.config, molecules)
    if failed := [row for row, reason in zip(frame["row"], predicted.errors) if reason]:
        raise DataError(f"rows {failed[:5]} of {plan.source.path}, which the runs read, could not be featurised again")
    return predicted.scores


def _write(
    plan: EnsemblePlan,
    directory: Path,
    cheap: CheapParts | None,
    predictions: dict[str, PartPredictions],
    frames: dict[str, pd.DataFrame],
    scores: dict[str, dict[str, dict[str, float]]],
    command: str,
) -> EnsembleRecord:
    """Write the members, the cheap parts, the splits' predictions and the record into ``directory``."""
    task, source = plan.tasks[0], plan.source
    (directory / "members").mkdir()
    members = []
    for k, checkpoint in enumerate(plan.checkpoints):
        path = directory / "members" / f"member{k}.ckpt"
        torch.save(reduced_checkpoint(load_checkpoint(checkpoint)), path)
        members.append(SavedFile(str(path.relative_to(directory)), sha256_file(path)))
    saved: dict[str, list[SavedFile] | None] = {part: None for part in CHEAP_PARTS}
    for part in CHEAP_PARTS:
        if (fitted := getattr(cheap, part, None)) is not None:
            names = fitted.save(directory / part)
            saved[part] = [SavedFile(f"{part}/{name}", sha256_file(directory / part / name)) for name in names]
    for split, frame in frames.items():
        table = frame.assign(**predictions[split].columns(task))
        table.to_csv(directory / f"{split}.csv", index=False, na_rep="")
    weights = predictions["valid"].weights
    record = EnsembleRecord(
        format=FORMAT,
        target_kind=plan.target_kind,
        targets=list(source.targets),
        smiles_column=source.smiles_column,
        members=members,
        sources=[SavedFile(str(checkpoint), sha256_file(checkpoint)) for checkpoint in plan.checkpoints],
        trees=saved["trees"],
        tree_inputs=None if saved["trees"] is None else tree_input_names(source.features),
        kernel=saved["kernel"],
        blend_weights=None if weights is None else dict(zip(source.targets, weights)),
        blend_rule=None if weights is None else BLEND_RULE,
        descriptor_reference_sha1=descriptor_reference().sha1 if source.features.descriptors else None,
        data_spec=json.loads(json.dumps(dataclasses.asdict(source.spec))),
        data_identity=plan.data_identity,
        scores=scores,
        made={
            "command": command,
            "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "git_commit": git_commit(),
            "versions": package_versions(),
        },
    )
    (directory / RECORD_FILE).write_text(record.to_json())
    return record


def tree_input_names(features: MoleculeFeatures) -> list[str]:
    """What trees fitted on these features read (``EnsembleRecord.tree_inputs``)."""
    return [name for name, used in zip(TREE_INPUTS, (features.descriptors, features.fingerprints)) if used]


def tree_features(names: Sequence[str]) -> MoleculeFeatures:
    """The features that give the trees' recorded inputs (:func:`tree_input_names` reversed)."""
    return MoleculeFeatures("rdkit2d" if "rdkit2d" in names else None, (), "ecfp" if "ecfp" in names else None)


# ----------------------------------------------------------------------------- reading one back


class SavedEnsemble:
    """An ensemble's directory, read back: :meth:`predict` new molecules as it predicted its own test rows.

    Args:
        directory: the directory :func:`build_ensemble` wrote, wherever it has been moved since.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        path = directory / RECORD_FILE
        if not path.is_file():
            raise CheckpointError(
                f"{directory} is not an ensemble's directory (no {RECORD_FILE}); name an ensemble "
                "made by graphormer-urpe ensemble, or a checkpoint file"
            )
        self.record = EnsembleRecord.from_json(path.read_text(), path)
        listed = {"members": self.record.members}
        listed |= {part: getattr(self.record, part) for part in self.record.cheap_parts}
        for key, saved in listed.items():
            if missing := [f.path for f in saved if not (directory / f.path).is_file()]:
                raise CheckpointError(
                    f"{directory / missing[0]} is missing from the ensemble {directory} (its "
                    f"{RECORD_FILE} lists it under '{key}')"
                )

    def check(self) -> None:
        """Refuse (:class:`CheckpointError`) an altered file, and descriptors computed against another reference
        than the one the ensemble was made with."""
        for saved in [*self.record.members, *(self.record.trees or []), *(self.record.kernel or [])]:
            path = self.directory / saved.path
            if sha256_file(path) != saved.sha256:
                raise CheckpointError(
                    f"{path} is not the file the ensemble recorded (SHA-256 differs): it was changed "
                    "after the ensemble was made"
                )
        wanted = self.record.descriptor_reference_sha1
        if wanted is not None and descriptor_reference().sha1 != wanted:
            raise CheckpointError(
                f"{self.directory} was made with the descriptor reference {wanted}, this "
                f"installation has {descriptor_reference().sha1}: its descriptors would differ"
            )

    def predict(self, table: Path, smiles_column: str | None = None) -> tuple[TablePredictions, dict[str, np.ndarray]]:
        """Every row of ``table`` predicted by each member, their mean, and with cheap parts each of them and the blend
        with the recorded weights; returns the predictions and the output columns (:meth:`PartPredictions.columns`)."""
        self.check()
        models = [model_of(self.directory / member.path) for member in self.record.members]
        tasks = [task for task, _ in models]
        predicted = predict_molecules(tasks, models[0][1], table, smiles_column or self.record.smiles_column)
        parts = PartPredictions(predicted.scores)
        if self.record.cheap_parts and self.record.blend_weights is not None:
            readable = np.array([not reason for reason in predicted.errors], dtype=bool)
            smiles = [text for text, ok in zip(predicted.smiles, readable) if ok]
            cheap = self.load_cheap_parts().predict(smiles) if smiles else {}
            for part in self.record.cheap_parts:
                scores = np.full(parts.ensemble.shape, np.nan)
                if smiles:
                    scores[readable] = cheap[part]
                parts.cheap[part] = scores
            parts.weights = [self.record.blend_weights[name] for name in self.record.targets]
        return predicted, parts.columns(tasks[0])

    def load_cheap_parts(self) -> CheapParts:
        """The saved cheap parts, read back (trees with skops' trusted types, the kernel's arrays without pickle)."""

        def files(part: str) -> list[Path]:
            return [self.directory / saved.path for saved in getattr(self.record, part)]

        kind = self.record.target_kind
        trees = None if self.record.trees is None else DescriptorTrees.load(kind, files("trees"))
        kernel = None if self.record.kernel is None else FingerprintKernel.load(kind, files("kernel"))
        return CheapParts(trees, kernel, tree_features(self.record.tree_inputs or []))

    def predict_into(self, table: Path, out: Path, smiles_column: str | None = None) -> Prediction:
        """:meth:`predict` the rows of ``table`` into the new CSV file ``out``."""
        predicted, columns = self.predict(table, smiles_column)
        parts = self.record.cheap_parts
        trees = f" blended with {' and '.join(parts)}" if parts else ""
        return write_predictions(
            self.directory, table, predicted, columns, out, f" by the ensemble of {len(self.record.members)}{trees}"
        )


# ----------------------------------------------------------------------------- a sweep's ensemble


@dataclass(frozen=True)
class EnsembleOutputs:
    """What ``sweep --ensemble`` writes, planned before the first seed starts (:func:`plan_ensemble_outputs`)."""

    directory: Path  # <run_root>/<name>-ensemble[-trees][-kernel]
    trees: bool  # blended with descriptor trees
    kernel: bool  # blended with the fingerprint kernel
    table: Path | None  # --predict TABLE: new molecules to predict with the ensemble
    predictions: Path | None  # <directory>-predict-<TABLE's stem>.csv
    reused: EnsembleRecord | None  # the existing ensemble of exactly these seeds' runs, else None: made anew


def plan_ensemble_outputs(
    config: RunConfig, runs: Sequence[Path], directory: Path, trees: bool, table: Path | None, kernel: bool = False
) -> EnsembleOutputs:
    """Every refusal of a sweep's ensemble of ``runs`` (trained with ``config``, not yet finished) before any of them
    runs: a config that is not a SMILES table's, trees without descriptors or fingerprints, cheap parts for a
    multi-class label or for a binary label with one class among the training rows (:func:`check_cheap_parts`), a
    table to predict that is missing, a directory, empty or without
    the SMILES column, an existing ensemble of other runs (one of these very runs is reused), an existing prediction
    (unless the ensemble is reused: then it is kept if it is that ensemble's prediction, :func:`write_ensemble`)."""
    if config.source_class_path is None or not issubclass(config.source_class(), SmilesTable):
        raise DataError(
            f"--ensemble saves the runs of a SMILES table (data.source SmilesTable), not of {config.data_name}"
        )
    check_cheap_parts(config.source(), trees, kernel)
    predictions = None
    if table is not None:
        check_table_to_predict(table)
        table_to_predict(table, config).smiles()  # read now: a missing column or no rows stops here
        predictions = directory.with_name(f"{directory.name}-predict-{table.stem}.csv")
    reused = existing_ensemble(directory, runs)
    if predictions is not None and predictions.exists() and reused is None:
        raise DataError(
            f"--predict: {predictions} exists (an earlier prediction is never overwritten): move it away first"
        )
    return EnsembleOutputs(directory, trees, kernel, table, predictions, reused)


def existing_ensemble(directory: Path, runs: Sequence[Path]) -> EnsembleRecord | None:
    """The ensemble already at ``directory`` if it is one of exactly these finished ``runs`` (reused), None if there
    is none; :class:`DataError` for an ensemble of other runs (never overwritten)."""
    if not directory.exists():
        return None
    other = (
        f"{directory} holds an ensemble of other runs (an ensemble is never overwritten): move it away or use "
        "another --name"
    )
    if not (directory / RECORD_FILE).is_file():
        raise DataError(other)
    record = SavedEnsemble(directory).record
    if not all((run / RUN_METRICS).is_file() for run in runs):
        raise DataError(other.replace("of other runs", "of the runs before seeds that still have to run"))
    if [sha256_file(member_checkpoint(run)) for run in runs] != [source.sha256 for source in record.sources]:
        raise DataError(other)
    return record


def write_ensemble(
    outputs: EnsembleOutputs, runs: Sequence[Path], command: str
) -> tuple[EnsembleRecord, Prediction | None]:
    """Save (or reuse) the ensemble of the finished ``runs`` (``command``: the sweep's, for its record), and predict
    the table of new molecules with it. An ensemble or a prediction that another sweep of these runs wrote meanwhile
    is reused, a prediction only if it is this ensemble's prediction of the table, byte for byte (else refused:
    never overwritten); a prediction is written whole or not at all, even on a signal."""
    record = outputs.reused or existing_ensemble(outputs.directory, runs)
    if record is None:
        record = make_ensemble(runs, outputs.directory, outputs.trees, command, outputs.kernel)
    else:
        log.info("ensemble reused: %s holds these runs' ensemble", outputs.directory)
    if outputs.table is None or outputs.predictions is None:
        return record, None
    ensemble = SavedEnsemble(outputs.directory)
    if not outputs.predictions.exists():
        with signals_held():
            return record, ensemble.predict_into(outputs.table, outputs.predictions)
    predicted, columns = ensemble.predict(outputs.table)
    if outputs.predictions.read_text() != prediction_frame(predicted, columns).to_csv(index=False, na_rep=""):
        raise DataError(
            f"--predict: {outputs.predictions} exists and is not this ensemble's prediction of "
            f"{outputs.table} (an earlier prediction is never overwritten): move it away first"
        )
    log.info("kept %s: this ensemble's prediction of %s, written before", outputs.predictions, outputs.table)
    failed = sum(bool(reason) for reason in predicted.errors)
    rows = len(predicted.errors)
    return record, Prediction(outputs.directory, outputs.table, outputs.predictions, rows, rows - failed, failed)
