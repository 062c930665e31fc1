"""A saved ensemble: made once from runs of one table (members, trees, weights, scores in one directory), then moved
and read back by ``predict`` without the training table, giving exactly what it recorded for its own test rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from graphormer_urpe.data.sources.fingerprints import ecfp_count_matrix
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
from graphormer_urpe.errors import CheckpointError, DataError
from graphormer_urpe.evaluation import kernel as kernel_module
from graphormer_urpe.evaluation.blend import BLEND_RULE, DescriptorTrees, blend_weights, tree_inputs
from graphormer_urpe.evaluation.ensemble import (
    RECORD_FILE,
    EnsembleRecord,
    SavedEnsemble,
    SavedFile,
    build_ensemble,
    member_checkpoints,
    plan_ensemble,
    split_rows,
)
from graphormer_urpe.evaluation.new_molecules import model_of
from graphormer_urpe.tasks import Classification
from graphormer_urpe.tasks.metrics import DefinedBinaryAUROC
from graphormer_urpe.testing.runs import seed_runs


@pytest.fixture(scope="module")
def with_descriptors(small_table: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return seed_runs(
        small_table, tmp_path_factory.mktemp("ensemble_descriptors"), "--data.source.descriptors", "rdkit2d"
    )


@pytest.fixture(scope="module")
def saved(with_descriptors: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "ens"
    build_ensemble(plan_ensemble(with_descriptors, out, trees=True, kernel=True), "test")
    return out


@pytest.mark.slow
def test_the_saved_ensemble_holds_members_trees_kernel_weights_and_its_scores(
    saved: Path, with_descriptors: list[Path]
) -> None:
    from graphormer_urpe.evaluation.kernel import FingerprintKernel

    record = SavedEnsemble(saved).record
    assert record.target_kind == "regression" and record.targets == ["gap_ev", "mu_debye"]
    assert [m.path for m in record.members] == ["members/member0.ckpt", "members/member1.ckpt"]
    assert [t.path for t in record.trees] == ["trees/target0.skops", "trees/target1.skops"]
    assert [k.path for k in record.kernel] == ["kernel/target0.npz", "kernel/target1.npz"]
    assert record.tree_inputs == ["rdkit2d"] and record.blend_rule == BLEND_RULE and record.final == "blend"
    assert [s.path for s in record.sources] == [str(c) for c in with_descriptors]
    assert record.descriptor_reference_sha1 is not None and record.data_identity["sha1"]
    assert record.made["git_commit"] and record.made["command"] == "test"
    task, run = model_of(saved / record.members[0].path)
    source = run.source()
    table = pd.read_csv(saved / "test.csv")
    assert table["row"].tolist() == split_rows(source, "test")["row"].tolist()
    members = np.stack([table[[f"{t}_member{k}" for t in record.targets]].to_numpy() for k in (0, 1)])
    parts = {
        part: table[[f"{t}_{part}" for t in record.targets]].to_numpy() for part in ("ensemble", "trees", "kernel")
    }
    np.testing.assert_allclose(parts["ensemble"], members.mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(table[[f"{t}_std" for t in record.targets]], members.std(axis=0), rtol=0, atol=1e-12)
    blend = np.stack(
        [
            sum(w * parts[part][:, k] for part, w in record.blend_weights[name].items())
            for k, name in enumerate(record.targets)
        ],
        axis=1,
    )
    np.testing.assert_allclose(table[record.targets], blend, rtol=0, atol=1e-12)  # the prediction is the blend
    truth = table[[f"input_{t}" if f"input_{t}" in table else t for t in record.targets]]
    # the task's own metric: the MAE per target of the known rows, and their mean
    assert record.scores["test"]["blend"]["test/mae/gap_ev"] == pytest.approx(
        np.nanmean(np.abs(blend[:, 0] - split_rows(source, "test")["gap_ev"])), rel=1e-6
    )
    assert truth.shape == blend.shape
    # the trees and the kernel, fitted here on the training rows, predict what was saved
    train, test = split_rows(source, "train"), split_rows(source, "test")
    descriptors = MoleculeFeatures("rdkit2d")
    refitted = DescriptorTrees.fit(
        "regression", record.targets, tree_inputs(descriptors, train["smiles"]), train[record.targets].to_numpy()
    )
    np.testing.assert_allclose(
        parts["trees"], refitted.predict(tree_inputs(descriptors, test["smiles"])), rtol=1e-12, atol=1e-12
    )
    kernel = FingerprintKernel.fit(
        "regression", record.targets, ecfp_count_matrix(train["smiles"]), train[record.targets].to_numpy()
    )
    np.testing.assert_allclose(
        parts["kernel"], kernel.predict(ecfp_count_matrix(test["smiles"])), rtol=1e-12, atol=1e-12
    )
    valid = pd.read_csv(saved / "valid.csv")
    chosen = blend_weights(
        {part: valid[[f"{t}_{part}" for t in record.targets]].to_numpy() for part in parts},
        split_rows(source, "valid")[record.targets].to_numpy(),
        record.targets,
    )
    assert chosen == record.blend_weights


@pytest.mark.slow
def test_a_moved_ensemble_predicts_its_test_rows_as_it_recorded_them_without_the_table(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moved to another directory, run from an empty one (no training table there), fitting nothing: the test rows'
    SMILES, with an id and an unreadable row, come back in order with the recorded blend, members and trees, float32
    rounding apart (another batch may sum in another order)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from graphormer_urpe.evaluation.kernel import TanimotoProcess

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("predict fitted a cheap part")

    monkeypatch.setattr(HistGradientBoostingRegressor, "fit", no_fit)
    monkeypatch.setattr(TanimotoProcess, "fit", no_fit)
    moved = tmp_path / "elsewhere" / "model"
    shutil.copytree(saved, moved)
    expected = pd.read_csv(saved / "test.csv")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    smiles = [*expected["smiles"][:2], "not a molecule", *expected["smiles"][2:]]
    pd.DataFrame({"id": [f"m{k}" for k in range(len(smiles))], "smiles": smiles}).to_csv("new.csv", index=False)
    predicted, columns = SavedEnsemble(moved).predict(Path("new.csv"))
    assert predicted.errors[2] != "" and all(not e for k, e in enumerate(predicted.errors) if k != 2)
    good = [k for k in range(len(smiles)) if k != 2]
    record = SavedEnsemble(moved).record
    for target in record.targets:
        for suffix in ("", "_member0", "_member1", "_std", "_ensemble", "_trees", "_kernel"):
            np.testing.assert_allclose(
                columns[f"{target}{suffix}"][good],
                expected[f"{target}{suffix}"],
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"{target}{suffix}",
            )
            assert np.isnan(columns[f"{target}{suffix}"][2])


@pytest.mark.slow
def test_an_altered_or_missing_file_of_a_saved_ensemble_is_refused(saved: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(saved, copy)
    tree = copy / "trees" / "target0.skops"
    tree.write_bytes(tree.read_bytes()[:-1] + b"x")
    with pytest.raises(CheckpointError, match="target0.skops is not the file the ensemble recorded"):
        SavedEnsemble(copy).check()
    tree.unlink()
    with pytest.raises(CheckpointError, match="target0.skops is missing from the ensemble"):
        SavedEnsemble(copy).check()
    with pytest.raises(CheckpointError, match="not an ensemble's directory"):
        SavedEnsemble(tmp_path)
    (tmp_path / RECORD_FILE).write_text(json.dumps({"format": 99}))
    with pytest.raises(CheckpointError, match="an ensemble of format 99"):
        SavedEnsemble(tmp_path)


def test_a_tree_file_that_holds_other_types_than_fitted_trees_is_not_loaded(tmp_path: Path) -> None:
    """skops loads scikit-learn's estimators, NumPy's types and TreePredictor only: a file that would call anything
    else (``os.system``) is refused unread, a pickle file is no skops file at all, and an estimator that is not a tree
    model is refused too."""
    import os
    import pickle

    import skops.io
    from sklearn.preprocessing import FunctionTransformer

    skops.io.dump(FunctionTransformer(func=os.system), tmp_path / "system.skops")
    (tmp_path / "pickled.skops").write_bytes(pickle.dumps({"x": 1}))
    for name in ("system.skops", "pickled.skops"):
        with pytest.raises(CheckpointError, match=f"{name}: not a tree file of an ensemble"):
            DescriptorTrees.load("regression", [tmp_path / name])
    skops.io.dump(FunctionTransformer(func=np.exp), tmp_path / "exp.skops")
    with pytest.raises(CheckpointError, match="exp.skops holds a FunctionTransformer, not fitted trees"):
        DescriptorTrees.load("regression", [tmp_path / "exp.skops"])


@pytest.mark.slow
def test_an_ensemble_is_planned_before_any_work(
    with_descriptors: list[Path], small_table: Path, saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(DataError, match="needs at least one run"):
        plan_ensemble([], tmp_path / "e", trees=False)
    with pytest.raises(DataError, match=f"--out {saved} exists"):
        plan_ensemble(with_descriptors, saved, trees=True)
    without = seed_runs(small_table, tmp_path / "plain", seeds=(0,))
    with pytest.raises(DataError, match="these runs have neither: train with --data.source.descriptors rdkit2d"):
        plan_ensemble(without, tmp_path / "e", trees=True)
    with pytest.raises(DataError, match="the members were trained on different data"):
        plan_ensemble([with_descriptors[0], *without], tmp_path / "e", trees=False)
    monkeypatch.setattr(kernel_module, "MAX_TRAINING_ROWS", 2)  # the table's training rows are more
    with pytest.raises(DataError, match=r"small\.csv, target '\w+': the fingerprint kernel would be fitted on"):
        plan_ensemble(with_descriptors, tmp_path / "e", trees=True, kernel=True)
    assert not (tmp_path / "e").exists()


def test_the_blend_weighs_the_parts_by_inverse_validation_error_among_those_near_the_best() -> None:
    """Hand-computed: errors (MSE) 0.04 and 0.05 weigh 25 : 20; a part over 1.5x the best error is left out; an exact
    part takes all; rows where the target is unknown are not counted."""
    truth = np.zeros((4, 1))
    parts = {"ensemble": np.full((4, 1), 0.2), "trees": np.full((4, 1), np.sqrt(0.05)), "kernel": np.full((4, 1), 0.3)}
    weights = blend_weights(parts, truth, ["y"])  # errors 0.04, 0.05, 0.09 > 1.5 * 0.04: the kernel is left out
    assert weights == {"y": pytest.approx({"ensemble": 25 / 45, "trees": 20 / 45})}
    assert list(weights["y"]) == ["ensemble", "trees"]
    equal = blend_weights({"ensemble": np.zeros((4, 1)), "trees": np.ones((4, 1))}, np.full((4, 1), 0.5), ["y"])
    assert equal == {"y": {"ensemble": 0.5, "trees": 0.5}}
    exact = blend_weights({"ensemble": np.ones((4, 1)), "kernel": np.zeros((4, 1))}, truth, ["y"])
    assert exact == {"y": {"kernel": 1.0}}
    some_unknown = np.array([[0.0], [np.nan], [0.0], [np.nan]])
    skewed = {"ensemble": np.array([[0.1], [9.0], [0.1], [9.0]]), "trees": np.full((4, 1), 0.1)}
    assert blend_weights(skewed, some_unknown, ["y"]) == {"y": {"ensemble": 0.5, "trees": 0.5}}


def test_binary_labels_are_blended_by_their_brier_scores_and_targets_apart() -> None:
    labels = np.array([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    confident = np.array([[0.1, 0.9], [0.9, 0.9], [0.1, 0.1], [0.9, 0.1]])  # Brier 0.01 on both labels
    hedging = np.array([[0.2, 0.5], [0.8, 0.5], [0.2, 0.5], [0.8, 0.5]])  # 0.04 on the first, 0.25 on the second
    weights = blend_weights({"ensemble": hedging, "trees": confident}, labels, ["a", "b"])
    assert weights == {"a": {"trees": 1.0}, "b": {"trees": 1.0}}  # 0.04 > 1.5 * 0.01: only the confident part
    near = np.array([[0.11, 0.9], [0.89, 0.9], [0.11, 0.1], [0.89, 0.1]])  # Brier 0.0121 on 'a'
    weights = blend_weights({"ensemble": near, "trees": confident}, labels, ["a", "b"])
    total = 1 / 0.0121 + 1 / 0.01
    assert weights["a"] == pytest.approx({"ensemble": (1 / 0.0121) / total, "trees": (1 / 0.01) / total})
    assert weights["b"] == {"ensemble": 0.5, "trees": 0.5}


def test_blend_weights_chosen_on_few_validation_rows_are_said_to_be_unreliable(
    package_log: pytest.LogCaptureFixture,
) -> None:
    targets = np.full((12, 2), 0.5)
    targets[1:, 0] = np.nan  # one known logS, twelve logP
    targets[:, 1] = np.nan
    targets[:11, 1] = 0.5
    weights = blend_weights({"ensemble": np.zeros((12, 2)), "trees": np.ones((12, 2))}, targets, ["logS", "logP"])
    assert weights == {"logS": {"ensemble": 0.5, "trees": 0.5}, "logP": {"ensemble": 0.5, "trees": 0.5}}
    assert [r.getMessage() for r in package_log.records if r.levelname == "WARNING"] == [
        "the blend's weights were chosen on fewer than 10 validation rows ('logS' on 1 row): too few to choose them "
        "reliably, so the blend's figures say little; use a larger table, or the ensemble alone"
    ]


def test_the_ensemble_and_the_task_score_with_one_metric_definition() -> None:
    """On a split whose labels hold one class, ROC-AUC and PR-AUC are NaN for the ensemble as for the task."""
    from graphormer_urpe import GraphormerConfig

    config = GraphormerConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2, num_outputs=2)
    task = Classification(config, target_kind="binary", target_names=["a", "b"])
    scores = np.array([[0.2, 0.9], [0.7, 0.4], [0.6, 0.1]])
    labels = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])  # 'a' holds one class
    values = task.score(scores, labels, "test")
    assert np.isnan(values["test/auroc/a"]) and np.isnan(values["test/auprc/a"])
    expected = DefinedBinaryAUROC()(torch.tensor(scores[:, 1]), torch.tensor(labels[:, 1]).long())
    assert values["test/auroc/b"] == pytest.approx(float(expected)) and values["test/auroc"] == values["test/auroc/b"]
    assert values["test/auprc/b"] == pytest.approx(0.5)  # the one positive ranks second of three: precision 1/2


@pytest.fixture(scope="module")
def binary_table(tmp_path_factory: pytest.TempPathFactory, small_table: Path) -> Path:
    """The small table with two labels: ``polar`` and ``ringed`` (a ring or more)."""
    frame = pd.read_csv(small_table)
    frame["ringed"] = (frame["rings"] > 0).astype(int)
    path = tmp_path_factory.mktemp("binary") / "binary.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def binary_saved(binary_table: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The saved ensemble, with trees and kernel, of two runs of the two labels with descriptors and fingerprints."""
    base = tmp_path_factory.mktemp("binary_saved")
    checkpoints = seed_runs(
        binary_table,
        base,
        "--model.class_path",
        "graphormer_urpe.tasks.Classification",
        "--data.source.task",
        "binary",
        "--data.source.targets",
        "[polar, ringed]",
        "--data.source.descriptors",
        "rdkit2d",
        "--data.source.fingerprints",
        "ecfp",
    )
    build_ensemble(plan_ensemble(checkpoints, base / "ens", trees=True, kernel=True), "test")
    return base / "ens"


@pytest.mark.slow
def test_binary_labels_get_the_ensemble_trees_and_kernel_blend_scored_by_roc_and_pr_auc(binary_saved: Path) -> None:
    """The trees read the descriptors and the ECFP counts, the kernel regresses 0/1 clipped to [0, 1]: each, fitted
    here on the training rows, predicts the probabilities saved; the blend's weights are chosen on the validation
    rows' Brier scores; every part is scored by ROC-AUC and PR-AUC, the blend as the task scores its probabilities."""
    from graphormer_urpe.evaluation.kernel import FingerprintKernel

    record = SavedEnsemble(binary_saved).record
    assert record.target_kind == "binary" and record.blend_rule == BLEND_RULE
    assert record.tree_inputs == ["rdkit2d", "ecfp"] and record.cheap_parts == ["trees", "kernel"]
    test, valid = pd.read_csv(binary_saved / "test.csv"), pd.read_csv(binary_saved / "valid.csv")
    names = [f"{label}_probability" for label in record.targets]
    parts = {part: test[[f"{name}_{part}" for name in names]].to_numpy() for part in ("ensemble", "trees", "kernel")}
    assert ((parts["kernel"] >= 0) & (parts["kernel"] <= 1)).all()
    for part in ("member0", "ensemble", "trees", "kernel", "blend"):
        assert {"test/auroc", "test/auprc", "test/auroc/polar", "test/auprc/ringed"} <= set(record.scores["test"][part])
    probabilities = test[names].to_numpy()
    assert ((probabilities >= 0) & (probabilities <= 1)).all()
    assert (test["polar"] == (test["polar_probability"] >= 0.5)).all()  # the label of the blended probability
    task, run = model_of(binary_saved / record.members[0].path)
    source = run.source()
    train, truth = split_rows(source, "train"), split_rows(source, "test")[record.targets].to_numpy()
    assert record.scores["test"]["blend"] == pytest.approx(task.score(probabilities, truth, "test"), nan_ok=True)
    labels = train[record.targets].to_numpy()
    with_ecfp = MoleculeFeatures("rdkit2d", (), "ecfp")
    trees = DescriptorTrees.fit("binary", record.targets, tree_inputs(with_ecfp, train["smiles"]), labels)
    assert tree_inputs(with_ecfp, test["smiles"]).shape[1] == 217 + 2048
    np.testing.assert_allclose(parts["trees"], trees.predict(tree_inputs(with_ecfp, test["smiles"])), rtol=1e-12)
    kernel = FingerprintKernel.fit("binary", record.targets, ecfp_count_matrix(train["smiles"]), labels)
    np.testing.assert_allclose(parts["kernel"], kernel.predict(ecfp_count_matrix(test["smiles"])), rtol=1e-12)
    brier = {part: valid[[f"{name}_{part}" for name in names]].to_numpy() for part in parts}
    assert blend_weights(brier, split_rows(source, "valid")[record.targets].to_numpy(), record.targets) == (
        record.blend_weights
    )


@pytest.mark.slow
def test_a_moved_binary_ensemble_predicts_labels_and_every_parts_probability_as_it_recorded(
    binary_saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moved, read from an empty directory, fitting nothing: the test rows' SMILES come back with each label, its
    blended probability and every part's (members, std, ensemble, trees on descriptors + ECFP, kernel) as test.csv
    recorded them, float32 rounding apart."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from graphormer_urpe.evaluation.kernel import TanimotoProcess

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("predict fitted a cheap part")

    monkeypatch.setattr(HistGradientBoostingClassifier, "fit", no_fit)
    monkeypatch.setattr(TanimotoProcess, "fit", no_fit)
    moved = tmp_path / "elsewhere" / "model"
    shutil.copytree(binary_saved, moved)
    expected = pd.read_csv(binary_saved / "test.csv")
    monkeypatch.chdir(tmp_path / "elsewhere")
    expected[["smiles"]].to_csv("new.csv", index=False)
    predicted, columns = SavedEnsemble(moved).predict(Path("new.csv"))
    assert not any(predicted.errors)
    record = SavedEnsemble(moved).record
    for label in record.targets:
        np.testing.assert_array_equal(np.asarray(columns[label], dtype=np.int64), expected[label], err_msg=label)
        for suffix in ("", "_member0", "_member1", "_std", "_ensemble", "_trees", "_kernel"):
            name = f"{label}_probability{suffix}"
            np.testing.assert_allclose(columns[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert list(columns)[:4] == ["polar", "polar_probability", "ringed", "ringed_probability"]


def test_only_a_smiles_tables_runs_make_an_ensemble_and_trees_refuse_classes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused from the members' configs before anything is predicted: a dataset that is not a SMILES table, and
    trees for a multi-class label (they predict values and binary labels)."""
    from graphormer_urpe import GraphormerConfig
    from graphormer_urpe.evaluation import ensemble
    from graphormer_urpe.run.checkpoints import RunConfig

    def members_of(source: str, source_args: dict) -> None:
        config = RunConfig(
            data_class_path="graphormer_urpe.data.datamodule.GraphDataModule",
            data_args={},
            source_class_path=source,
            source_args=source_args,
            model_class_path="graphormer_urpe.tasks.Classification",
        )
        task = Classification(
            GraphormerConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2, num_outputs=3),
            target_kind="multiclass",
        )
        monkeypatch.setattr(ensemble, "model_of", lambda checkpoint: (task, config))
        monkeypatch.setattr(ensemble, "load_checkpoint", lambda checkpoint: {})

    members_of("graphormer_urpe.data.sources.QM9", {})
    with pytest.raises(DataError, match="predicts the rows of a SMILES table .*, not of QM9"):
        plan_ensemble([tmp_path / "a.ckpt"], tmp_path / "e", trees=False)
    (tmp_path / "t.csv").write_text("smiles,rings\nCCO,0\nc1ccccc1,1\nC1CC1,1\n")
    members_of(
        "graphormer_urpe.data.sources.SmilesTable",
        {"path": str(tmp_path / "t.csv"), "targets": ["rings"], "task": "multiclass", "descriptors": "rdkit2d"},
    )
    with pytest.raises(DataError, match="this table has a multiclass label: ensemble without --trees"):
        plan_ensemble([tmp_path / "a.ckpt"], tmp_path / "e", trees=True)
    with pytest.raises(DataError, match="this table has a multiclass label: ensemble without --kernel"):
        plan_ensemble([tmp_path / "a.ckpt"], tmp_path / "e", trees=False, kernel=True)
    assert plan_ensemble([tmp_path / "a.ckpt"], tmp_path / "e", trees=False).target_kind == "multiclass"
    assert not (tmp_path / "e").exists()


@pytest.mark.slow
def test_of_two_writers_of_one_ensemble_the_second_is_refused_in_one_line(
    with_descriptors: list[Path], tmp_path: Path
) -> None:
    """Two commands planned the same ``--out`` before either wrote it (two ``ensemble`` or two sweeps started
    together): the first writes it, the second is refused clearly, nothing of its own left, the first's kept."""
    out = tmp_path / "ens"
    first, second = (plan_ensemble(with_descriptors, out, trees=False) for _ in range(2))
    written = build_ensemble(first, "first")
    with pytest.raises(DataError, match=f"--out {out} was written by another process while this ensemble was made"):
        build_ensemble(second, "second")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ens"] and SavedEnsemble(out).record == written


def finished_run(where: Path, best: str = "best-4.ckpt", recorded_in: Path | None = None) -> Path:
    """A run directory as ``train`` leaves it, as far as an ensemble reads it: ``checkpoints/<best>`` and
    ``metrics.json`` naming it by the absolute path it had in ``recorded_in`` (default: ``where``)."""
    (where / "checkpoints").mkdir(parents=True)
    (where / "checkpoints" / best).write_text(str(where))
    recorded = (recorded_in or where).absolute() / "checkpoints" / best
    (where / "metrics.json").write_text(json.dumps({"best_checkpoint": str(recorded), "global_step": 4}))
    return where


def test_a_run_directory_gives_its_own_best_checkpoint_wherever_it_was_moved(tmp_path: Path) -> None:
    """``metrics.json`` records the best checkpoint's absolute path: a copy of the run reads its own file, never
    the one at the recorded path (which a new run of the same name may have replaced)."""
    original = finished_run(tmp_path / "runs" / "x")
    copy = tmp_path / "copy_x"
    shutil.copytree(original, copy)
    (original / "checkpoints" / "best-4.ckpt").write_text("a new run named x")
    assert member_checkpoints([copy]) == [copy / "checkpoints" / "best-4.ckpt"]
    (copy / "checkpoints" / "best-4.ckpt").unlink()
    with pytest.raises(
        DataError,
        match=f"--runs {copy}: its best checkpoint {copy / 'checkpoints' / 'best-4.ckpt'} "
        r"\(best_checkpoint of its metrics.json\) is not there",
    ):
        member_checkpoints([copy])


def test_one_run_given_twice_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = finished_run(tmp_path / "runs" / "x")
    other = finished_run(tmp_path / "runs" / "y")
    monkeypatch.chdir(tmp_path)
    best = run / "checkpoints" / "best-4.ckpt"
    for twice in ([run, run], [run, Path("runs/x/")], [run, best], [Path("runs/x/checkpoints/best-4.ckpt"), run]):
        with pytest.raises(
            DataError, match=f"--runs {twice[0]} and {twice[1]} are the same run \\({best.resolve()}\\)"
        ):
            member_checkpoints(twice)
    assert member_checkpoints([run, other]) == [best, other / "checkpoints" / "best-4.ckpt"]


def written_record(directory: Path, **changed: object) -> Path:
    """An ensemble's directory holding two members, a tree file per target and a record, ``changed`` as edited into
    its ``ensemble.json``."""
    files = {"members": ["members/member0.ckpt", "members/member1.ckpt"], "trees": ["trees/target0.skops"]}
    for path in (p for paths in files.values() for p in paths):
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(path)
    record = EnsembleRecord(
        format=2,
        target_kind="regression",
        targets=["y"],
        smiles_column="smiles",
        members=[SavedFile(p, "0" * 64) for p in files["members"]],
        sources=[],
        trees=[SavedFile(p, "0" * 64) for p in files["trees"]],
        tree_inputs=["rdkit2d"],
        kernel=None,
        blend_weights={"y": {"ensemble": 0.75, "trees": 0.25}},
        blend_rule=BLEND_RULE,
        descriptor_reference_sha1=None,
        data_spec={},
        data_identity={},
        scores={},
    )
    stored = json.loads(record.to_json()) | changed
    (directory / RECORD_FILE).write_text(json.dumps(stored))
    return directory


@pytest.mark.parametrize(
    ("changed", "refusal"),
    [
        ({"blend_weights": {"y": {"ensemble": 0.75, "trees": 0.3}}}, "'blend_weights.y' sum to 1.05, not 1"),
        (
            {"blend_weights": {"y": {"ensemble": -0.25, "trees": 1.25}}},
            "'blend_weights.y.ensemble' is -0.25, not a weight in [0, 1]",
        ),
        ({"blend_weights": {"y": {"ensemble": "0.75", "trees": 0.25}}}, "'blend_weights.y.ensemble' is '0.75'"),
        (
            {"blend_weights": {"y": {"ensemble": 0.5, "kernel": 0.5}}},
            "'blend_weights.y' must weigh some of the parts ensemble, trees",
        ),
        (
            {"blend_weights": {"z": {"ensemble": 1.0}}},
            "'blend_weights' must give the weights of each target, in order: y",
        ),
        ({"blend_weights": None}, "'blend_weights' must give the weights of each target"),
        ({"blend_rule": 1}, "'blend_rule' must name the rule that chose the weights"),
        ({"tree_inputs": ["maccs"]}, "'tree_inputs' must list what the trees read, of rdkit2d, ecfp"),
        ({"targets": ["y", "z"]}, "'trees' lists 1 files for 2 targets"),
        ({"targets": "y"}, "'targets' must be a list of the targets' names"),
        ({"target_kind": "ordinal"}, "'target_kind' is 'ordinal', not one of regression, binary, multiclass"),
        ({"members": []}, "'members' lists no member"),
        ({"members": [{"path": 3, "sha256": "0"}]}, "'members' must list files as {path, sha256} strings"),
        (
            {"members": [{"path": "../elsewhere.ckpt", "sha256": "0"}]},
            "'members' names ../elsewhere.ckpt, not a file inside",
        ),
        (
            {"kernel": [{"path": "/abs/target0.npz", "sha256": "0"}]},
            "'kernel' names /abs/target0.npz, not a file inside",
        ),
        ({"trees": None}, "'blend_weights' are given for an ensemble without trees or kernel"),
    ],
)
def test_an_edited_ensemble_record_is_refused_naming_the_file_and_the_key(
    tmp_path: Path, changed: dict, refusal: str
) -> None:
    """``ensemble.json`` is read before anything is predicted: a blend weight (which no SHA-256 covers) edited
    into one that is no blend's, or a value of the wrong type, is refused rather than applied."""
    assert SavedEnsemble(written_record(tmp_path / "kept")).record.blend_weights == {
        "y": {"ensemble": 0.75, "trees": 0.25}
    }
    with pytest.raises(CheckpointError) as refused:
        SavedEnsemble(written_record(tmp_path / "edited", **changed))
    assert str(refused.value).startswith(f"{tmp_path / 'edited' / RECORD_FILE}: ")
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


def test_an_ensemble_of_format_1_reads_its_tree_weight_as_the_blends(tmp_path: Path) -> None:
    """A directory the previous release wrote (trees only, one weight w per target) predicts as it did:
    ``(1 - w) * ensemble + w * trees``; an edited weight is refused as in format 2."""
    stored = json.loads((written_record(tmp_path / "new") / RECORD_FILE).read_text())
    for key in ("tree_inputs", "kernel", "blend_weights", "blend_rule"):
        del stored[key]
    old = stored | {"format": 1, "tree_weights": {"y": 0.25}, "blend_metric": "val/mae"}
    written_record(tmp_path / "old")
    (tmp_path / "old" / RECORD_FILE).write_text(json.dumps(old))
    record = SavedEnsemble(tmp_path / "old").record
    assert record.blend_weights == {"y": {"ensemble": 0.75, "trees": 0.25}} and record.tree_inputs == ["rdkit2d"]
    assert record.kernel is None and record.blend_rule == "the best validation val/mae of 5 weights (format 1)"
    (tmp_path / "old" / RECORD_FILE).write_text(json.dumps(old | {"tree_weights": {"y": 1.5}}))
    with pytest.raises(CheckpointError, match="'blend_weights.y.ensemble' is -0.5, not a weight in"):
        SavedEnsemble(tmp_path / "old")


def test_a_member_the_record_lists_must_be_in_the_directory(tmp_path: Path) -> None:
    written_record(tmp_path)
    (tmp_path / "members" / "member1.ckpt").unlink()
    with pytest.raises(
        CheckpointError,
        match=f"{tmp_path / 'members' / 'member1.ckpt'} is missing from the ensemble "
        f"{tmp_path} \\(its ensemble.json lists it under 'members'\\)",
    ):
        SavedEnsemble(tmp_path)
