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
from graphormer_urpe.evaluation.blend import DescriptorTrees, blend, choose_weights, descriptor_matrix
from graphormer_urpe.evaluation.new_molecules import TablePredictions, model_of, predict_molecules
from graphormer_urpe.run.checkpoints import (
    DATA_IDENTITY_KEY,
    RunConfig,
    differences,
    load_checkpoint,
    reduced_checkpoint,
)
from graphormer_urpe.run.ledger import git_commit, package_versions
from graphormer_urpe.tasks.base import PerTargetTask

log = logging.getLogger("graphormer_urpe")

#: The record's file in an ensemble's directory.
RECORD_FILE = "ensemble.json"
#: The layout of the directory this version writes and reads.
FORMAT = 1
#: The splits an ensemble predicts and scores when it is made: the validation rows choose the blend weights.
SPLITS = ("valid", "test")


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
        try:
            stored = json.loads(text)
            if stored.get("format") != FORMAT:
                raise CheckpointError(f"{path}: an ensemble of format {stored.get('format')}; this version reads "
                                      f"format {FORMAT}")
            stored["members"] = [SavedFile(**member) for member in stored["members"]]
            stored["sources"] = [SavedFile(**source) for source in stored["sources"]]
            if stored["trees"] is not None:
                stored["trees"] = [SavedFile(**tree) for tree in stored["trees"]]
            return cls(**stored)
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as error:
            raise CheckpointError(f"{path}: not an ensemble record ({type(error).__name__}: {error})") from None


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
    scored with the task's own metrics; the directory is written whole (a temporary one renamed) or not at all."""
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
        os.rename(partial, plan.out)  # whole or not at all; refuses an --out made meanwhile
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return record


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

    def check(self) -> None:
        """Refuse (:class:`CheckpointError`) a missing or altered file, and descriptors computed against another
        reference than the one the ensemble was made with."""
        for saved in [*self.record.members, *(self.record.trees or [])]:
            path = self.directory / saved.path
            if not path.is_file():
                raise CheckpointError(f"{path} is missing from the ensemble {self.directory}")
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
