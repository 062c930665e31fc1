"""An ensemble you can hold (``graphormer-urpe ensemble``, ``sweep --ensemble``): the best checkpoints of several runs
of one SMILES-table config, their mean prediction (of the probabilities for classification) as chemprop's ensembles,
optionally blended with descriptor trees (:mod:`graphormer_urpe.evaluation.blend`), saved as one directory that
``graphormer-urpe predict --model DIR`` reads without the training table, from anywhere (docs/small-data.md):

    DIR/ensemble.json         the record (:class:`EnsembleRecord`): members and trees with their SHA-256, targets,
                              blend weights, descriptor reference, data spec and identity, scores, how it was made
    DIR/members/member<k>.ckpt  each member's weights and config (the optimiser's state left out)
    DIR/trees/target<k>.skops   the fitted trees of each target (with --trees), loaded without pickle
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
from graphormer_urpe.data.sources.tables import SmilesTable
from graphormer_urpe.errors import CheckpointError, DataError
from graphormer_urpe.evaluation.blend import (
    TREE_WEIGHTS,
    DescriptorTrees,
    blend,
    choose_weights,
    descriptor_matrix,
)
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
from graphormer_urpe.run.ledger import git_commit, package_versions
from graphormer_urpe.run.sweep import signals_held
from graphormer_urpe.tasks.base import PerTargetTask

log = logging.getLogger("graphormer_urpe")

#: The record's file in an ensemble's directory.
RECORD_FILE = "ensemble.json"
#: A finished run's final metrics in its directory, naming its best checkpoint (``graphormer-urpe train``).
RUN_METRICS = "metrics.json"
#: The layout of the directory this version writes and reads.
FORMAT = 1
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
    tree_weights: dict[str, float] | None  # per target, w of the blend (1 - w) * ensemble + w * trees
    blend_metric: str | None  # the validation metric that chose the weights: the task's monitor, e.g. val/mae
    descriptor_reference_sha1: str | None  # of the RDKit descriptors' reference the trees and members read
    data_spec: dict[str, Any]  # the data's declaration the members were trained on (DataSpec as JSON)
    data_identity: dict[str, Any]  # the training table's identity (SHA-1, split, targets, cache key)
    scores: dict[str, dict[str, dict[str, float]]]  # split -> part (member<k>, ensemble, trees, blend) -> metrics
    # the command, the time, the commit, the packages' versions
    made: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> str:
        """The part whose prediction is the ensemble's: ``blend`` with trees, else ``ensemble`` (the mean)."""
        return "blend" if self.trees else "ensemble"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, path: Path) -> EnsembleRecord:
        """The record stored in ``path`` (its ``text``), checked (:meth:`check`): :class:`CheckpointError` names the
        file and the key of the first problem."""
        try:
            stored = json.loads(text)
            if stored.get("format") != FORMAT:
                raise CheckpointError(f"{path}: an ensemble of format {stored.get('format')}; this version reads "
                                      f"format {FORMAT}")
            stored["members"] = [SavedFile(**member) for member in stored["members"]]
            stored["sources"] = [SavedFile(**source) for source in stored["sources"]]
            if stored["trees"] is not None:
                stored["trees"] = [SavedFile(**tree) for tree in stored["trees"]]
            record = cls(**stored)
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as error:
            raise CheckpointError(f"{path}: not an ensemble record ({type(error).__name__}: {error})") from None
        if problem := record.problem():
            key, what = problem
            raise CheckpointError(f"{path}: '{key}' {what}; the record was changed after the ensemble was made "
                                  "(make it again with graphormer-urpe ensemble)")
        return record

    def problem(self) -> tuple[str, str] | None:
        """The first key whose value this record cannot hold, and why: the kind of target, the targets, the files
        (strings; one tree file per target), and one blend weight per target among those the blend chooses from
        (:data:`~graphormer_urpe.evaluation.blend.TREE_WEIGHTS`, each in [0, 1]: the blend ``(1 - w) * ensemble
        + w * trees`` has weights summing to 1), with a validation metric, exactly when there are trees."""
        if self.target_kind not in TARGET_KINDS:
            return "target_kind", f"is {self.target_kind!r}, not one of {', '.join(TARGET_KINDS)}"
        named = isinstance(self.targets, list) and all(isinstance(name, str) and name for name in self.targets)
        if not named or not self.targets:
            return "targets", "must be a list of the targets' names"
        if not isinstance(self.smiles_column, str) or not self.smiles_column:
            return "smiles_column", "must name the training table's SMILES column"
        files = {"members": self.members, "sources": self.sources, "trees": self.trees or []}
        for key, saved in files.items():
            if not all(isinstance(f.path, str) and isinstance(f.sha256, str) for f in saved):
                return key, "must list files as {path, sha256} strings"
        for key in ("members", "trees"):
            if outside := [f.path for f in files[key] if Path(f.path).is_absolute() or ".." in Path(f.path).parts]:
                return key, f"names {outside[0]}, not a file inside the ensemble's directory"
        if not self.members:
            return "members", "lists no member"
        if self.trees is None:
            if self.tree_weights is not None or self.blend_metric is not None:
                return "tree_weights", "are given for an ensemble without trees"
            return None
        if len(self.trees) != len(self.targets):
            return "trees", f"lists {len(self.trees)} files for {len(self.targets)} targets"
        if not isinstance(self.tree_weights, dict) or list(self.tree_weights) != self.targets:
            return "tree_weights", f"must give one weight per target, in order: {', '.join(self.targets)}"
        for name, weight in self.tree_weights.items():
            if isinstance(weight, bool) or weight not in TREE_WEIGHTS:
                return f"tree_weights.{name}", (f"is {weight!r}, not one of the blend's weights "
                                                f"{', '.join(map(str, TREE_WEIGHTS))} (each in [0, 1])")
        if not isinstance(self.blend_metric, str) or not self.blend_metric:
            return "blend_metric", "must name the validation metric that chose the weights"
        return None


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- making one

@dataclass(frozen=True)
class EnsemblePlan:
    """An ensemble to make, every input checked (:func:`plan_ensemble`)."""

    checkpoints: list[Path]  # the members' checkpoints, as given
    out: Path  # the directory to write (it does not exist)
    trees: bool  # blend with descriptor trees
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
        raise DataError(f"--runs {run}: {metrics} names no best checkpoint (best_checkpoint: {recorded!r}); name "
                        "a checkpoint file instead")
    best = run / "checkpoints" / Path(recorded).name
    if not best.is_file():
        raise DataError(f"--runs {run}: its best checkpoint {best} (best_checkpoint of its {RUN_METRICS}) is not "
                        "there; name a checkpoint file instead")
    return best


def member_checkpoints(runs: Sequence[Path]) -> list[Path]:
    """Every run's member (:func:`member_checkpoint`); :class:`DataError` for a run given twice (once as a
    directory and once as its checkpoint, say): an ensemble of one run twice would claim a spread of 0."""
    checkpoints = [member_checkpoint(run) for run in runs]
    first: dict[Path, int] = {}
    for k, checkpoint in enumerate(checkpoints):
        if (earlier := first.setdefault(checkpoint.resolve(), k)) != k:
            raise DataError(f"--runs {runs[earlier]} and {runs[k]} are the same run ({checkpoint.resolve()}): an "
                            "ensemble's members are different runs")
    return checkpoints


def plan_ensemble(checkpoints: Sequence[Path], out: Path, trees: bool) -> EnsemblePlan:
    """Check everything an ensemble needs before any work: an output that does not exist and can be written; members
    that are runs of one SMILES table (same table, split, targets and molecule features, by the data identity their
    checkpoints record) whose table can be read from here; for ``trees``, RDKit descriptors among the features and
    regression targets or binary labels. :class:`~graphormer_urpe.errors.InputError` names the first problem."""
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
        raise DataError(f"an ensemble predicts the rows of a SMILES table (data.source SmilesTable), not of "
                        f"{config.data_name}; evaluate each run with graphormer-urpe evaluate instead")
    for checkpoint, identity, task in zip(checkpoints[1:], identities[1:], tasks[1:]):
        if identity is None or identities[0] is None:
            raise DataError(
                f"{checkpoint if identity is None else checkpoints[0]} records no identity of its data "
                "(written by an earlier version): an ensemble's members must be known to share one table"
            )
        if differing := differences(identities[0], identity, str(checkpoints[0]), str(checkpoint)):
            raise DataError(f"the members were trained on different data: {differing}; an ensemble's members "
                            "share one table, split, targets and molecule features")
        if type(task) is not type(tasks[0]):
            raise DataError(
                f"{checkpoint} is a {type(task).__name__}, {checkpoints[0]} a {type(tasks[0]).__name__}"
            )
    source = config.source()
    kind = source.task
    if trees:
        if kind == "multiclass":
            raise DataError("the descriptor trees predict regression targets or binary labels; this table has a "
                            "multi-class label: ensemble without --trees")
        if not source.features.descriptors:
            raise DataError(
                "the descriptor trees read the RDKit descriptors, and these runs have none: train with "
                "--data.source.descriptors rdkit2d (configs/small_molecules.yaml has it)"
            )
    if not source.path.is_file():
        raise DataError(
            f"the runs' table {source.path} is not here (relative paths are read from the directory the "
            "runs were trained in): make the ensemble from there"
        )
    return EnsemblePlan(checkpoints=list(checkpoints), out=out, trees=trees, config=config, source=source,
                        target_kind=kind, data_identity=identities[0] or {}, tasks=tasks)


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
    trees: np.ndarray | None = None
    weights: list[float] | None = None

    @property
    def ensemble(self) -> np.ndarray:
        """The members' mean. (R, S)"""
        return np.mean(self.members, axis=0)

    @property
    def spread(self) -> np.ndarray:
        """The members' standard deviation (over the members, n in the denominator; 0 for one). (R, S)"""
        return np.std(self.members, axis=0)

    def parts(self) -> dict[str, np.ndarray]:
        """``member<k>``, ``ensemble``, and with trees ``trees`` and ``blend``."""
        parts = {f"member{k}": member for k, member in enumerate(self.members)} | {"ensemble": self.ensemble}
        if self.trees is not None and self.weights is not None:
            parts |= {"trees": self.trees, "blend": blend(self.ensemble, self.trees, self.weights)}
        return parts

    def final(self) -> np.ndarray:
        """The ensemble's prediction: the blend with trees, else the members' mean. (R, S)"""
        return self.parts()["blend" if self.trees is not None else "ensemble"]

    def columns(self, task: PerTargetTask) -> dict[str, np.ndarray]:
        """Output columns: the task's columns of :meth:`final` (values; labels and probabilities), then per score
        ``<score>_member<k>``, ``<score>_std`` and with trees ``<score>_ensemble`` and ``<score>_trees``."""
        columns = dict(task.prediction_columns(self.final()))
        parts = self.parts()
        shown = [*(f"member{k}" for k in range(len(self.members))), "std"]
        if self.trees is not None:
            shown += ["ensemble", "trees"]
        for s, name in enumerate(task.score_names()):
            for part in shown:
                columns[f"{name}_{part}"] = (self.spread if part == "std" else parts[part])[:, s]
        return columns


def build_ensemble(plan: EnsemblePlan, command: str) -> EnsembleRecord:
    """Make the planned ensemble: every member predicts the table's validation and test rows, the trees (with
    ``plan.trees``) are fitted on its training rows and their weights chosen on the validation rows, every part is
    scored with the task's own metrics; the directory is written whole (a temporary one renamed) or not at all: of
    two processes writing one ``plan.out``, the second is refused (:class:`DataError`). Logs what it scores."""
    task, source = plan.tasks[0], plan.source
    frames = {split: split_rows(source, split) for split in SPLITS}
    members = _predict_rows(plan, pd.concat(frames.values(), ignore_index=True))
    sizes = np.cumsum([0, *(len(frame) for frame in frames.values())])
    predictions = {split: PartPredictions([member[sizes[i]:sizes[i + 1]] for member in members])
                   for i, split in enumerate(SPLITS)}
    trees = None
    if plan.trees:
        train = split_rows(source, "train")
        trees = DescriptorTrees.fit(
            plan.target_kind,
            source.targets,
            descriptor_matrix(train[source.smiles_column]),
            train[source.targets].to_numpy(),
        )
        for split, frame in frames.items():
            predictions[split].trees = trees.predict(descriptor_matrix(frame[source.smiles_column]))
        valid = predictions["valid"]
        weights = choose_weights(task, valid.ensemble, valid.trees, frames["valid"][source.targets].to_numpy())
        for split in SPLITS:
            predictions[split].weights = weights
        log.info("descriptor trees blended with weights %s, chosen on %d validation rows by %s",
                 dict(zip(source.targets, weights)), len(frames["valid"]), task.monitor[0])
    scores = {split: {part: task.score(values, frames[split][source.targets].to_numpy(), split)
                      for part, values in predictions[split].parts().items()} for split in SPLITS}
    partial = Path(tempfile.mkdtemp(prefix=f".{plan.out.name}.partial-", dir=plan.out.parent))
    try:
        record = _write(plan, partial, trees, predictions, frames, scores, command)
        os.rename(partial, plan.out)  # whole or not at all
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        if not plan.out.exists():
            raise
        raced = (f"--out {plan.out} was written by another process while this ensemble was made; nothing was "
                 "overwritten (this one was discarded): use that one, or choose another --out")
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
    if not record.trees:
        return f"{split} {shown('ensemble')} (the mean of {members})"
    return (
        f"{split} {shown('blend')} of the blend with the descriptor trees (trees' weights {record.tree_weights}, "
        f"chosen on validation {record.blend_metric}); the ensemble of {members} alone {shown('ensemble')}, the "
        f"trees alone {shown('trees')}"
    )


def make_ensemble(runs: Sequence[Path], out: Path, trees: bool, command: str) -> EnsembleRecord:
    """Plan (every refusal first), build and save the ensemble of ``runs`` (:func:`member_checkpoints`) into
    ``out``."""
    return build_ensemble(plan_ensemble(member_checkpoints(runs), out, trees), command)


def _predict_rows(plan: EnsemblePlan, frame: pd.DataFrame) -> list[np.ndarray]:
    """Every member's predictions of the frame's molecules, featurised once as new molecules. Each (R, S)."""
    with tempfile.TemporaryDirectory() as tmp:
        molecules = Path(tmp) / "molecules.csv"
        frame[[plan.source.smiles_column]].to_csv(molecules, index=False)
        predicted = predict_molecules(plan.tasks, plan.config, molecules)
    if failed := [row for row, reason in zip(frame["row"], predicted.errors) if reason]:
        raise DataError(
            f"rows {failed[:5]} of {plan.source.path}, which the runs read, could not be featurised again"
        )
    return predicted.scores


def _write(plan: EnsemblePlan, directory: Path, trees: DescriptorTrees | None,
           predictions: dict[str, PartPredictions], frames: dict[str, pd.DataFrame],
           scores: dict[str, dict[str, dict[str, float]]], command: str) -> EnsembleRecord:
    """Write the members, the trees, the splits' predictions and the record into ``directory``."""
    task, source = plan.tasks[0], plan.source
    (directory / "members").mkdir()
    members = []
    for k, checkpoint in enumerate(plan.checkpoints):
        path = directory / "members" / f"member{k}.ckpt"
        torch.save(reduced_checkpoint(load_checkpoint(checkpoint)), path)
        members.append(SavedFile(str(path.relative_to(directory)), sha256_file(path)))
    saved_trees = None
    if trees is not None:
        names = trees.save(directory / "trees")
        saved_trees = [SavedFile(f"trees/{name}", sha256_file(directory / "trees" / name)) for name in names]
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
        trees=saved_trees,
        tree_weights=None if weights is None else dict(zip(source.targets, weights)),
        blend_metric=task.monitor[0] if trees is not None else None,
        descriptor_reference_sha1=descriptor_reference().sha1 if source.features.descriptors else None,
        data_spec=json.loads(json.dumps(dataclasses.asdict(source.spec))),
        data_identity=plan.data_identity,
        scores=scores,
        made={"command": command, "created": datetime.datetime.now().isoformat(timespec="seconds"),
              "git_commit": git_commit(), "versions": package_versions()},
    )
    (directory / RECORD_FILE).write_text(record.to_json())
    return record


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
        for key, saved in (("members", self.record.members), ("trees", self.record.trees or [])):
            if missing := [f.path for f in saved if not (directory / f.path).is_file()]:
                raise CheckpointError(f"{directory / missing[0]} is missing from the ensemble {directory} (its "
                                      f"{RECORD_FILE} lists it under '{key}')")

    def check(self) -> None:
        """Refuse (:class:`CheckpointError`) an altered file, and descriptors computed against another reference
        than the one the ensemble was made with."""
        for saved in [*self.record.members, *(self.record.trees or [])]:
            path = self.directory / saved.path
            if sha256_file(path) != saved.sha256:
                raise CheckpointError(
                    f"{path} is not the file the ensemble recorded (SHA-256 differs): it was changed "
                    "after the ensemble was made"
                )
        wanted = self.record.descriptor_reference_sha1
        if wanted is not None and descriptor_reference().sha1 != wanted:
            raise CheckpointError(f"{self.directory} was made with the descriptor reference {wanted}, this "
                                  f"installation has {descriptor_reference().sha1}: its descriptors would differ")

    def predict(
        self, table: Path, smiles_column: str | None = None
    ) -> tuple[TablePredictions, dict[str, np.ndarray]]:
        """Every row of ``table`` predicted by each member, their mean, and with trees the trees and the blend with
        the recorded weights; returns the predictions and the output columns (:meth:`PartPredictions.columns`)."""
        self.check()
        models = [model_of(self.directory / member.path) for member in self.record.members]
        tasks = [task for task, _ in models]
        predicted = predict_molecules(tasks, models[0][1], table, smiles_column or self.record.smiles_column)
        parts = PartPredictions(predicted.scores)
        if self.record.trees is not None and self.record.tree_weights is not None:
            trees = DescriptorTrees.load(self.record.target_kind,
                                         [self.directory / tree.path for tree in self.record.trees])
            readable = np.array([not reason for reason in predicted.errors], dtype=bool)
            tree_scores = np.full(parts.ensemble.shape, np.nan)
            if readable.any():
                smiles = [text for text, ok in zip(predicted.smiles, readable) if ok]
                tree_scores[readable] = trees.predict(descriptor_matrix(smiles))
            parts.trees = tree_scores
            parts.weights = [self.record.tree_weights[name] for name in self.record.targets]
        return predicted, parts.columns(tasks[0])

    def predict_into(self, table: Path, out: Path, smiles_column: str | None = None) -> Prediction:
        """:meth:`predict` the rows of ``table`` into the new CSV file ``out``."""
        predicted, columns = self.predict(table, smiles_column)
        trees = " blended with descriptor trees" if self.record.trees else ""
        return write_predictions(self.directory, table, predicted, columns, out,
                                 f" by the ensemble of {len(self.record.members)}{trees}")


# ----------------------------------------------------------------------------- a sweep's ensemble

@dataclass(frozen=True)
class EnsembleOutputs:
    """What ``sweep --ensemble`` writes, planned before the first seed starts (:func:`plan_ensemble_outputs`)."""

    directory: Path  # <run_root>/<name>-ensemble[-trees]
    trees: bool  # blended with descriptor trees
    table: Path | None  # --predict TABLE: new molecules to predict with the ensemble
    predictions: Path | None  # <directory>-predict-<TABLE's stem>.csv
    reused: EnsembleRecord | None  # the existing ensemble of exactly these seeds' runs, else None: made anew


def plan_ensemble_outputs(config: RunConfig, runs: Sequence[Path], directory: Path, trees: bool,
                          table: Path | None) -> EnsembleOutputs:
    """Every refusal of a sweep's ensemble of ``runs`` (trained with ``config``, not yet finished) before any of them
    runs: a config that is not a SMILES table's, trees without descriptors, for a multi-class label or for a binary
    label with one class among the training rows, a table to predict that is missing, a directory, empty or without
    the SMILES column, an existing ensemble of other runs (one of these very runs is reused), an existing prediction
    (unless the ensemble is reused: then it is kept if it is that ensemble's prediction, :func:`write_ensemble`)."""
    if config.source_class_path is None or not issubclass(config.source_class(), SmilesTable):
        raise DataError(f"--ensemble saves the runs of a SMILES table (data.source SmilesTable), not of "
                        f"{config.data_name}")
    source = config.source()
    if trees and not source.features.descriptors:
        raise DataError("--trees reads the RDKit descriptors and this config has none (data.source.descriptors "
                        f"{source.features.descriptors}): add --data.source.descriptors rdkit2d")
    if trees:
        train = split_rows(source, "train")
        DescriptorTrees.check_targets(source.task, source.targets, train[source.targets].to_numpy())
    predictions = None
    if table is not None:
        check_table_to_predict(table)
        table_to_predict(table, config).smiles()  # read now: a missing column or no rows stops here
        predictions = directory.with_name(f"{directory.name}-predict-{table.stem}.csv")
    reused = existing_ensemble(directory, runs)
    if predictions is not None and predictions.exists() and reused is None:
        raise DataError(f"--predict: {predictions} exists (an earlier prediction is never overwritten): move it "
                        "away first")
    return EnsembleOutputs(directory, trees, table, predictions, reused)


def existing_ensemble(directory: Path, runs: Sequence[Path]) -> EnsembleRecord | None:
    """The ensemble already at ``directory`` if it is one of exactly these finished ``runs`` (reused), None if there
    is none; :class:`DataError` for an ensemble of other runs (never overwritten)."""
    if not directory.exists():
        return None
    other = (f"{directory} holds an ensemble of other runs (an ensemble is never overwritten): move it away or use "
             "another --name")
    if not (directory / RECORD_FILE).is_file():
        raise DataError(other)
    record = SavedEnsemble(directory).record
    if not all((run / RUN_METRICS).is_file() for run in runs):
        raise DataError(other.replace("of other runs", "of the runs before seeds that still have to run"))
    if [sha256_file(member_checkpoint(run)) for run in runs] != [source.sha256 for source in record.sources]:
        raise DataError(other)
    return record


def write_ensemble(outputs: EnsembleOutputs, runs: Sequence[Path], command: str) -> tuple[EnsembleRecord,
                                                                                           Prediction | None]:
    """Save (or reuse) the ensemble of the finished ``runs`` (``command``: the sweep's, for its record), and predict
    the table of new molecules with it. An ensemble or a prediction that another sweep of these runs wrote meanwhile
    is reused, a prediction only if it is this ensemble's prediction of the table, byte for byte (else refused:
    never overwritten); a prediction is written whole or not at all, even on a signal."""
    record = outputs.reused or existing_ensemble(outputs.directory, runs)
    if record is None:
        record = make_ensemble(runs, outputs.directory, outputs.trees, command)
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
        raise DataError(f"--predict: {outputs.predictions} exists and is not this ensemble's prediction of "
                        f"{outputs.table} (an earlier prediction is never overwritten): move it away first")
    log.info("kept %s: this ensemble's prediction of %s, written before", outputs.predictions, outputs.table)
    failed = sum(bool(reason) for reason in predicted.errors)
    rows = len(predicted.errors)
    return record, Prediction(outputs.directory, outputs.table, outputs.predictions, rows, rows - failed, failed)
