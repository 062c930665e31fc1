"""bench/small_data/moleculeace.py: the benchmark's own split with the validation rows drawn by the rule fixed first,
its RMSE and cliff RMSE, the SVM arm with the set's shipped hyperparameters, chemprop's arms read from its files (a
fake ``chemprop`` writes them), results kept per set and resumed, and the report's per-set ratios; the data in
MoleculeACE 3.0.0's layout (``graphormer_urpe.testing.data_packages.write_moleculeace``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.small_data import moleculeace
from graphormer_urpe.testing.data_packages import sample_molecules, write_moleculeace

SET = "CHEMBL1871_Ki"


def benchmark_rows(train: int = 30, test: int = 10) -> list[tuple[str, float, int, str]]:
    """Molecules of the QM9 sample as a set: y from the gap, every third test molecule a cliff molecule."""
    molecules = sample_molecules(train + test)
    return [
        (smiles, round(-gap, 4), int(k >= train and k % 3 == 0), "train" if k < train else "test")
        for k, (smiles, gap) in enumerate(molecules)
    ]


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The results directory, a fresh one (the committed results are never written by a test)."""
    directory = tmp_path / "results"
    monkeypatch.setattr(moleculeace, "RESULTS", directory)
    return directory


def test_the_validation_rows_are_a_tenth_of_the_train_split_drawn_by_the_fixed_rule(site: Path) -> None:
    rows = benchmark_rows()
    write_moleculeace(site, SET, rows)
    table = moleculeace.read_set(SET)
    assert table["split"].value_counts().to_dict() == {"train": 27, "test": 10, "valid": 3}
    expected = sorted(np.random.default_rng(0).permutation(30)[:3].tolist())  # positions among the train rows
    assert np.flatnonzero(table["split"].to_numpy() == "valid").tolist() == expected
    assert table["split"].iloc[30:].eq("test").all()  # the benchmark's test split, untouched
    assert table["smiles"].tolist() == [row[0] for row in rows] and table["cliff_mol"].tolist() == [r[2] for r in rows]
    assert moleculeace.svm_hyperparameters(SET) == {"C": 10, "epsilon": 0.1, "gamma": 0.01, "kernel": "rbf"}


def test_a_set_in_another_layout_is_refused_naming_the_file(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as uninstalled:  # as on a machine without the wheel, whatever this one has
        uninstalled.setattr(importlib.util, "find_spec", lambda name: None)
        with pytest.raises(
            moleculeace.BenchError, match="MoleculeACE is not installed: pip install --no-deps MoleculeACE==3.0.0"
        ):
            moleculeace.read_set(SET)
    path = write_moleculeace(site, SET, benchmark_rows())
    path.write_text(path.read_text().replace("cliff_mol", "cliff"))
    with pytest.raises(moleculeace.BenchError, match=rf"{path}: no column\(s\) \['cliff_mol'\]"):
        moleculeace.read_set(SET)
    with pytest.raises(moleculeace.BenchError, match="CHEMBL234_Ki.csv: no such file"):
        moleculeace.read_set("CHEMBL234_Ki")


def test_rmse_and_cliff_rmse_are_the_benchmarks_definitions() -> None:
    table = pd.DataFrame(
        {
            "smiles": list("abcdef"),
            "y": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            "cliff_mol": [0, 1, 0, 1, 1, 0],
            "split": ["train", "valid", "test", "test", "test", "test"],
        }
    )
    predicted = np.array([2.5, 3.0, 3.0, 5.0])  # errors 0.5, 0, -1, 0 on the four test rows
    scores = moleculeace.scores(predicted, table)
    assert scores["test_rmse"] == pytest.approx(np.sqrt((0.25 + 1.0) / 4))
    assert scores["test_cliff_rmse"] == pytest.approx(np.sqrt((0.0 + 1.0) / 2))  # rows 3 and 4 are cliffs


def test_the_svm_arms_fit_the_shipped_hyperparameters_and_a_rerun_resumes(
    site: Path, results: Path, tmp_path: Path
) -> None:
    from sklearn.svm import SVR

    write_moleculeace(site, SET, benchmark_rows(), svm="C: 3\nepsilon: 0.05\ngamma: 0.02\nkernel: rbf\n")
    moleculeace.main(["--sets", SET, "--arms", "svm", "svm+valid", "--work", str(tmp_path / "work")])
    entries = moleculeace.read_results(SET)
    assert [(e["arm"], e["seed"]) for e in entries] == [("svm", 0), ("svm+valid", 0)]
    table = moleculeace.read_set(SET)
    train, test = table[table["split"] == "train"], table[table["split"] == "test"]
    model = SVR(C=3, epsilon=0.05, gamma=0.02, kernel="rbf").fit(moleculeace.ecfp(train["smiles"]), train["y"])
    expected = model.predict(moleculeace.ecfp(test["smiles"]))
    np.testing.assert_allclose(entries[0]["test_predictions"], expected, rtol=0, atol=1e-5)  # rounded to 5 decimals
    assert entries[0]["test_rmse"] == pytest.approx(moleculeace.rmse(expected, test["y"]), rel=1e-12)
    assert entries[0]["val_rmse"] is not None and entries[1]["val_rmse"] is None  # fitted on validation: none
    moleculeace.main(["--sets", SET, "--arms", "svm", "svm+valid", "--work", str(tmp_path / "work")])
    assert moleculeace.read_results(SET) == entries  # nothing run twice, nothing rewritten
    path = results / f"{SET}.jsonl"
    path.write_text(path.read_text().replace('"options": ""', '"options": "--other"', 1))
    with pytest.raises(moleculeace.BenchError, match="arm svm ran with options '--other', now ''"):
        moleculeace.main(["--sets", SET, "--arms", "svm", "--work", str(tmp_path / "work")])


def test_chemprops_arms_read_its_test_predictions_and_validate_on_the_validation_rows(
    site: Path, results: Path, tmp_path: Path, chemprop: str
) -> None:
    write_moleculeace(site, SET, benchmark_rows())
    moleculeace.main(["--sets", SET, "--arms", "chemprop", "--chemprop", chemprop, "--work", str(tmp_path / "w")])
    entries = moleculeace.read_results(SET)
    assert [(e["arm"], e["seed"]) for e in entries] == [("chemprop", 0), ("chemprop", 1), ("chemprop", 2)]
    table = moleculeace.read_set(SET)
    mean = table.loc[table["split"] == "train", "y"].mean()  # the fake predicts the training mean
    for entry in entries:
        np.testing.assert_allclose(entry["test_predictions"], mean, rtol=0, atol=1e-5)
        assert entry["val_rmse"] == pytest.approx(
            moleculeace.rmse(np.full(3, mean), table.loc[table["split"] == "valid", "y"]), rel=1e-6
        )
    # the recorded command names no path of this machine: the program by its name, paths relative to --work
    assert entries[1]["command"].startswith(f"chemprop train --data-path data/{SET}/table.csv ")
    assert all(str(tmp_path) not in entry["command"] for entry in entries)
    argv = json.loads((tmp_path / "w" / "runs" / f"{SET}-chemprop-seed1" / "argv.json").read_text())
    assert argv[argv.index("--pytorch-seed") + 1] == "1" and argv[argv.index("--target-columns") + 1] == "y"
    splits = json.loads((tmp_path / "w" / "data" / SET / "chemprop_splits.json").read_text())[0]
    assert splits["val"] == np.flatnonzero(table["split"].to_numpy() == "valid").tolist()
    with pytest.raises(moleculeace.BenchError, match="chemprop's arms need --chemprop"):
        moleculeace.main(["--sets", SET, "--arms", "chemprop+rdkit"])


def entry(
    arm: str,
    seed: int | None,
    rmse: float,
    cliff: float,
    part: str | None = None,
    predictions: list[float] | None = None,
) -> dict:
    line = {
        "set": SET,
        "arm": arm,
        "seed": seed,
        "options": moleculeace.ARMS[arm].options,
        "test_rmse": rmse,
        "test_cliff_rmse": cliff,
        "val_rmse": 0.5,
        "test_predictions": predictions or [],
    }
    return line | ({"part": part} if part else {})


def test_the_report_takes_each_arms_own_result_and_averages_per_set_ratios(
    site: Path, results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SVM 0.8 / 1.0; chemprop's ensemble (the mean prediction of its seeds) scored here; the final arm's blend
    0.6 / 0.9: ratios 0.75 / 0.9 against SVM, each part of the recipe with its own ratios, and the issue's bounds."""
    write_moleculeace(site, SET, benchmark_rows(train=30, test=4))
    table = moleculeace.read_set(SET)
    test = table[table["split"] == "test"]
    truth = test["y"].to_numpy()
    lines = [
        entry("svm", 0, 0.8, 1.0),
        *(
            entry("chemprop", seed, 0.0, 0.0, predictions=(truth + shift).tolist())
            for seed, shift in ((0, 1.0), (1, -1.0), (2, 0.5))
        ),
        *(entry("chemprop+rdkit", seed, 0.0, 0.0, predictions=(truth + 2.0).tolist()) for seed in (0, 1, 2)),
        entry("recipe+buckets", 0, 0.7, 0.95, part="member"),
        entry("recipe+buckets", 1, 0.72, 0.97, part="member"),
        entry("recipe+buckets", None, 0.65, 0.92, part="ensemble"),
        entry("recipe+buckets", None, 0.6, 0.9, part="blend"),
    ]
    results.mkdir()
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setattr(moleculeace, "held_out_ratios", lambda arm: {})  # rule 4 on one set: waits for all 10
    figures = moleculeace.set_figures(SET, table)
    chemprop = moleculeace.final_figure(figures, "chemprop")
    assert chemprop.what == "ensemble" and chemprop.rmse == pytest.approx(0.5 / 3)  # the mean is truth + 1/6
    assert moleculeace.final_figure(figures, "recipe+buckets").rmse == 0.6
    text = moleculeace.report([SET], final=True)
    assert "| recipe+buckets | blend | SVM | 1 | 0.750 | 0.900 |" in text
    assert "| recipe+buckets | ensemble | SVM | 1 | 0.812 | 0.920 |" in text  # each part of the recipe's
    assert test["cliff_mol"].sum() == 2  # the better chemprop ensemble is off by 1/6 on every row, cliffs too
    assert f"| recipe+buckets | blend | chemprop | 1 | {0.6 / (0.5 / 3):.3f} | {0.9 / (0.5 / 3):.3f} |" in text
    # the bounds on the final arm, met or missed by how much, and on how many of the 10 sets
    assert "| blend | SVM | RMSE | 1 | 0.750 | 0.93 | met (on 1 of 10 sets) |" in text
    assert "| blend | SVM | cliff RMSE | 1 | 0.900 | 0.93 | met (on 1 of 10 sets) |" in text
    assert f"| ensemble | chemprop | RMSE | 1 | {0.65 * 6:.3f} | 0.9 | missed by {0.65 * 6 - 0.9:.3f} (on 1 of" in text
    # before the final reading: the recipe's validation figures only, no test figure, no ratio and no bound
    early = moleculeace.report([SET])
    assert "| recipe+buckets | blend | (final reading) | (final reading) | 0.500 |" in early
    assert "| recipe+buckets | blend | SVM" not in early and "0.600" not in early and "## The bounds" not in early
    assert "| svm | one run | SVM | 1 | 1.000 | 1.000 |" in early


def recipe_lines(arm: str, members: tuple[float, float], ensemble: float, blend: float, name: str = SET) -> list[dict]:
    """A recipe arm's lines with these validation RMSEs (test figures NaN: the selection must not read them)."""
    parts = [("member", 0, members[0]), ("member", 1, members[1]), ("ensemble", None, ensemble)]
    parts += [("trees", None, 0.9), ("blend", None, blend)]
    return [
        entry(arm, seed, float("nan"), float("nan"), part=part)
        | {
            "set": name,
            "val_rmse": value,
            "pretrained": moleculeace.shipped_pretrained(),
            "configuration": moleculeace.configuration(moleculeace.ARMS[arm].options),
        }
        for part, seed, value in parts
    ]


def test_the_second_readings_arm_runs_the_shipped_recipes_configuration() -> None:
    """recipe+nodropout names the window (rule 3) and the dropout (rule 6) that the config holds since, so its
    committed results ran the shipped recipe as users run it and it may run again; the final reading's arm ran on
    the config's content before rule 6 (dropout 0.1), so its committed lines stand and it runs no more."""
    arms = {
        name: moleculeace.configuration(arm.options) for name, arm in moleculeace.ARMS.items() if arm.kind == "recipe"
    }
    assert arms[moleculeace.SHIPPED_ARM] == moleculeace.configuration("--config small_molecules") == arms["recipe"]
    assert moleculeace.stale_sets(moleculeace.SHIPPED_ARM) == []
    assert moleculeace.stale_sets(moleculeace.FINAL_ARM) == list(moleculeace.SETS)


@pytest.mark.parametrize(
    ("candidate", "base", "options", "changed"),
    [
        ("recipe+mse", "recipe+buckets", "--model.loss mse", {("model", "loss"): "mse"}),
        (
            "recipe+nodropout",
            "recipe+buckets",
            "--model.encoder.dropout 0 --model.encoder.attention_dropout 0",
            {("model", "encoder", "dropout"): 0, ("model", "encoder", "attention_dropout"): 0},
        ),
        ("recipe+batch16", "recipe+buckets", "--data.batch_size 16", {("data", "batch_size"): 16}),
        ("recipe+nodropout+mse", "recipe+nodropout", "--model.loss mse", {("model", "loss"): "mse"}),
        ("recipe+nodropout+batch16", "recipe+nodropout", "--data.batch_size 16", {("data", "batch_size"): 16}),
        ("recipe+nodropout+batch64", "recipe+nodropout", "--data.batch_size 64", {("data", "batch_size"): 64}),
        (
            "recipe+nodropout+graphtoken",
            "recipe+nodropout",
            "--model.encoder.molecule_features_into graph_token",
            {("model", "encoder", "molecule_features_into"): "graph_token"},
        ),
    ],
)
def test_each_candidate_for_the_networks_share_changes_only_its_keys_of_the_arm_it_is_judged_against(
    candidate: str, base: str, options: str, changed: dict[tuple[str, ...], object]
) -> None:
    """Rules 5 to 9, 11 and 13 compare a candidate with the arm it may replace on the same parts (the final arm;
    rules 8, 9, 11 and 13 the shipped one): its options are that arm's with some keys set, and its configuration is
    the shipped config with those keys set (they change it, but for rule 6's, which the config holds since the second
    reading)."""
    import yaml

    from graphormer_urpe.configs import shipped_config

    assert moleculeace.ARMS[candidate].kind == "recipe" and candidate in moleculeace.CANDIDATES
    final = moleculeace.ARMS[base]
    assert moleculeace.ARMS[candidate].options == f"{final.options} {options}"
    config = yaml.safe_load(shipped_config("small_molecules").read_text())
    for (section, *path), value in changed.items():
        node = config[section]["init_args"]
        for key in path[:-1]:
            node = node[key]
        adopted = candidate == moleculeace.SHIPPED_ARM  # rule 6's keys are the config's own since its reading
        assert (node[path[-1]] == value) == adopted
        node[path[-1]] = value
    assert moleculeace.configuration(moleculeace.ARMS[candidate].options) == moleculeace.configuration(
        final.options, config
    )


def test_a_recipe_arm_whose_configuration_changed_keeps_its_results_and_adds_none(
    site: Path, results: Path, tmp_path: Path
) -> None:
    """Lines of an arm that ran on a config's earlier content stay readable; the arm refuses to run again (before
    any sweep), and two configurations in one arm's lines are refused."""
    write_moleculeace(site, SET, benchmark_rows(train=30, test=4))
    results.mkdir()
    lines = recipe_lines("recipe", (0.5, 0.6), 0.5, 0.45)
    for line in lines:
        line["configuration"] = "e" * 64  # the config's earlier content
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert len(moleculeace.checked_results(SET)) == 5 and moleculeace.validation_figures(SET, "recipe")["blend"] == 0.45
    assert moleculeace.stale_sets("recipe") == [SET] and moleculeace.stale_sets("recipe+buckets") == []
    with pytest.raises(
        moleculeace.BenchError, match=f"arm recipe ran from another checkpoint or with another configuration on {SET}"
    ):
        moleculeace.main(["--sets", SET, "--arms", "recipe", "--work", str(tmp_path / "work")])
    assert not (tmp_path / "work").exists()  # refused before anything was written or run
    lines[0]["configuration"] = moleculeace.configuration(moleculeace.ARMS["recipe"].options)
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(moleculeace.BenchError, match="arm recipe holds lines of 2 identities"):
        moleculeace.checked_results(SET)


def test_a_recipe_arm_whose_shipped_checkpoint_changed_keeps_its_results_and_adds_none(
    site: Path, results: Path, tmp_path: Path
) -> None:
    """An arm's identity is its options and, for the recipe, the checkpoint it started from and its configuration:
    lines of an earlier shipped checkpoint stay readable (the peers' runs and the report go on), the arm refuses to
    run again before anything is written, and two checkpoints in one arm's lines are refused."""
    write_moleculeace(site, SET, benchmark_rows(train=30, test=4))
    results.mkdir()
    lines = recipe_lines("recipe+buckets", (0.5, 0.6), 0.5, 0.45)
    for line in lines:
        line["pretrained"] = "0" * 64  # the checkpoint shipped before
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [line["val_rmse"] for line in moleculeace.checked_results(SET)] == [0.5, 0.6, 0.5, 0.9, 0.45]
    assert moleculeace.pending([SET], ["svm"]) == [moleculeace.Run(SET, "svm", 0)]
    assert moleculeace.stale_sets("recipe+buckets") == [SET]
    with pytest.raises(moleculeace.BenchError, match=f"arm recipe\\+buckets ran from another checkpoint .* on {SET}"):
        moleculeace.main(["--sets", SET, "--arms", "recipe+buckets", "--work", str(tmp_path / "work")])
    assert not (tmp_path / "work").exists()
    lines[0]["pretrained"] = moleculeace.shipped_pretrained()
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(moleculeace.BenchError, match="arm recipe\\+buckets holds lines of 2 identities"):
        moleculeace.checked_results(SET)


def test_a_candidate_checkpoint_runs_as_an_arm_of_its_own_named_by_its_sha256(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Rule 2's arm: the recipe fine-tuned from another checkpoint is ``recipe@<12 hex digits>``; its lines must have
    started from that file, the shipped recipe's from the shipped one, and the selection holds it to 0.97 and 1."""
    import hashlib

    work = tmp_path / "work"
    checkpoint = work / "candidate.ckpt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"weights")
    sha = hashlib.sha256(b"weights").hexdigest()
    arm = moleculeace.with_checkpoint("recipe", checkpoint)
    assert arm == f"recipe@{sha[:12]}" and moleculeace.arm_of(arm) == moleculeace.ARMS["recipe"]
    lines = recipe_lines("recipe", (0.5, 0.6), 0.5, 0.45) + [
        line | {"arm": arm, "pretrained": sha} for line in recipe_lines("recipe", (0.5, 0.5), 0.48, 0.45)
    ]
    results.mkdir()
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert len(moleculeace.checked_results(SET)) == 10
    lines[-1]["pretrained"] = moleculeace.shipped_pretrained()  # a line of the candidate's arm from another file
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(moleculeace.BenchError, match=f"arm {arm} ran from the pretrained checkpoint sha256 .*, not "):
        moleculeace.checked_results(SET)
    lines[-1]["pretrained"] = sha
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert "is at most 0.97 and its blend's at most 1.0" in moleculeace.selection(arm, "recipe")
    outside = tmp_path / "elsewhere.ckpt"
    outside.write_bytes(b"weights")
    for path, message in ((outside, "put the checkpoint under --work"), (work / "none.ckpt", "no such file")):
        with pytest.raises(SystemExit):
            moleculeace.parse_args(["--arms", "recipe", "--work", str(work), "--init-from", str(path)])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        moleculeace.parse_args(["--selection", "svm", "recipe"])
    assert "--selection svm: not a candidate" in capsys.readouterr().err


def test_a_sweeps_seed_started_from_another_checkpoint_is_refused_before_the_sweep(tmp_path: Path) -> None:
    shipped = moleculeace.shipped_pretrained()
    for seed, sha in ((0, shipped), (1, "f" * 64)):
        run = tmp_path / f"{SET}-recipe-seed{seed}"
        run.mkdir()
        record = {"segments": [{"segment": 0, "initialised_from": {"path": "x.ckpt", "sha256": sha}}]}
        (run / "run.json").write_text(json.dumps(record))
    moleculeace.check_seed_runs(tmp_path, f"{SET}-recipe", (0, 2), shipped)  # seed 2 not started: nothing to check
    with pytest.raises(moleculeace.BenchError, match=f"{SET}-recipe-seed1: started from checkpoint sha256 f{{64}}"):
        moleculeace.check_seed_runs(tmp_path, f"{SET}-recipe", (0, 1, 2), shipped)


def test_the_selection_reads_validation_figures_only_and_applies_the_rule_fixed_before(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ensemble ratios 0.96 and 0.98 (mean 0.97, the bound: chosen); blend ratios 1.0 and 1.0. Test figures are NaN
    in these lines, so a verdict that read them would not be a number."""
    first, second = moleculeace.SELECTION_SETS
    results.mkdir()
    unfinished = moleculeace.selection("recipe+ecfp", "recipe")
    assert "Not finished: " in unfinished and unfinished.rstrip().endswith("**No verdict yet.**")
    # nothing finished: the sets left would need the bounds themselves
    assert (
        "the sets left (2 of 2) would need mean ratios of at most 0.970 (network ensemble) and 1.000 (blend)"
        in unfinished
    )
    lines = {
        first: recipe_lines("recipe", (0.6, 0.7), 0.5, 0.4, first)
        + recipe_lines("recipe+ecfp", (0.6, 0.6), 0.48, 0.4, first),
        second: recipe_lines("recipe", (0.8, 0.8), 1.0, 0.5, second)
        + recipe_lines("recipe+ecfp", (0.8, 0.9), 0.98, 0.5, second),
    }
    for name, written in lines.items():
        (results / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in written))
    text = moleculeace.selection("recipe+ecfp", "recipe")
    assert f"| {first} | seeds | 0.6500 | 0.6000 | 0.923 |" in text
    assert (
        "Mean ratios: network ensemble 0.970 (at most 0.97), blend 1.000 (at most 1.0). "
        "**recipe+ecfp replaces recipe.**" in text
    )
    lines[second][-1]["val_rmse"] = 0.501  # the candidate's blend a little worse: not chosen
    (results / f"{second}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines[second]))
    assert "**recipe+ecfp does not replace recipe.**" in moleculeace.selection("recipe+ecfp", "recipe")
    # a change that only saves time may cost up to 2 %: ensemble ratios 1.01 and 1.02 pass, 1.03 would not
    for name, ensemble in ((first, 0.505), (second, 1.02)):
        faster = recipe_lines("recipe+buckets", (0.6, 0.7), ensemble, 0.4 if name == first else 0.5, name)
        (results / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines[name] + faster))
    assert "(at most 1.02). **recipe+buckets replaces recipe.**" in moleculeace.selection("recipe+buckets", "recipe")


def test_the_validation_reading_judges_a_candidate_on_the_sets_the_shipped_arm_was_not_chosen_on(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule 14: the candidate's network ensemble 0.98x the shipped arm's validation RMSE on each of READING_SETS and
    its blend 1.0x: chosen (bounds 0.98 / 1.0); 0.99x: not. The selection sets' lines (the candidate twice as bad
    there) are not read, nor the test figures (NaN). Unfinished, it says what the sets left would need; a stopped
    candidate whose sets left would need less than HOPELESS_BELOW is not chosen."""
    results.mkdir()
    candidate, shipped = "recipe+nodropout+ecfp", moleculeace.SHIPPED_ARM

    def write(
        ensemble_ratio: float, sets: tuple[str, ...] = moleculeace.SETS, arm: str = candidate, blend_ratio: float = 1.0
    ) -> str:
        for name in sets:
            worse = 2.0 if name in moleculeace.SELECTION_SETS else 1.0
            written = recipe_lines(shipped, (0.7, 0.7), 0.5, 0.4, name)
            written += recipe_lines(arm, (0.7, 0.7), 0.5 * ensemble_ratio * worse, 0.4 * blend_ratio * worse, name)
            (results / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in written))
        return moleculeace.selection(arm, shipped, wider=True)

    text = write(0.98)
    assert text.startswith(f"# Validation reading: {candidate} against {shipped}, on the validation rows of ")
    assert "--validation-reading" in text and all(name in text for name in moleculeace.READING_SETS)
    assert not any(name in text for name in moleculeace.SELECTION_SETS)
    assert "network ensemble 0.980 (at most 0.98), blend 1.000 (at most 1.0). " in text
    assert text.rstrip().endswith(f"**{candidate} replaces {shipped}.**")
    assert write(0.99).rstrip().endswith(f"**{candidate} does not replace {shipped}.**")
    for path in results.iterdir():
        path.unlink()
    unfinished = write(0.98, moleculeace.SETS[:-1])
    assert f"Not finished: {moleculeace.SETS[-1]} {shipped}, {moleculeace.SETS[-1]} {candidate}. " in unfinished
    # 7 of 8 sets at 0.98 / 1.0: the last must reach the bounds themselves
    assert (
        "the sets left (1 of 8) would need mean ratios of at most 0.980 (network ensemble) and 1.000 (blend)"
        in unfinished
    )
    assert unfinished.rstrip().endswith("**No verdict yet.**")
    # rule 14's first candidate, stopped with six of eight sets at 1.026 / 1.014 (its figures' means): the two left
    # would need (8 x 0.98 - 6 x 1.026) / 2 = 0.842 and (8 x 1.0 - 6 x 1.014) / 2 = 0.958
    for path in results.iterdir():
        path.unlink()
    stopped = "recipe+nodropout+graphtoken"
    text = write(1.026, moleculeace.SETS[:-2], arm=stopped, blend_ratio=1.014)
    assert "the sets left (2 of 8) would need mean ratios of at most 0.842 (network ensemble) and 0.958 (blend)" in text
    assert text.rstrip().endswith(
        f"**{stopped} does not replace {shipped}**: the sets left would need a mean network ratio of 0.842, below "
        "0.927, the lowest any candidate reached on any one set; its runs stop."
    )
    # one set at 1.157: the seven left would need (7.84 - 1.157) / 7 = 0.955, not hopeless
    for path in results.iterdir():
        path.unlink()
    assert write(1.157, moleculeace.READING_SETS[:1]).rstrip().endswith("**No verdict yet.**")
    parsed = moleculeace.parse_args(["--validation-reading", candidate, shipped])
    assert parsed.validation_reading == [candidate, shipped]
    for refused, message in ((f"svm {shipped}", "not a candidate"), (f"{candidate} svm", "not a recipe arm")):
        with pytest.raises(SystemExit):
            moleculeace.parse_args(["--validation-reading", *refused.split()])
        error = capsys.readouterr().err
        assert "--validation-reading" in error and message in error


def test_the_second_reading_compares_test_figures_on_the_sets_the_candidate_was_not_chosen_on(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The candidate's network ensemble 0.9x the final arm's test RMSE on every reading set and its blend 1.02x on
    one, 0.98x on the others: both means below 1, so the config takes the change; the blend 1.1x on one set more
    than that loses it. The selection sets' lines (a candidate twice as good there) are not read."""
    results.mkdir()

    checkpoint = "0123456789ab" + "c" * 52  # a candidate checkpoint's SHA-256

    def lines(name: str, arm: str, ensemble: float, blend: float) -> list[dict]:
        parts = [("ensemble", ensemble), ("trees", 0.7), ("blend", blend)]
        options = moleculeace.arm_of(arm).options
        return [
            entry(arm.partition("@")[0], None, rmse, rmse + 0.1, part=part)
            | {
                "set": name,
                "arm": arm,
                "pretrained": checkpoint if "@" in arm else moleculeace.shipped_pretrained(),
                "configuration": moleculeace.configuration(options),
            }
            for part, rmse in parts
        ]

    def write(
        blend_ratios: dict[str, float], candidate_arm: str = "recipe+nodropout", baseline="recipe+buckets"
    ) -> str:
        for name in moleculeace.SETS:
            candidate = (0.3, 0.25) if name in moleculeace.SELECTION_SETS else (0.9, 0.5 * blend_ratios[name])
            written = lines(name, baseline, 1.0, 0.5) + lines(name, candidate_arm, *candidate)
            (results / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in written))
        return moleculeace.second_reading(candidate_arm, baseline)

    first, *others = moleculeace.READING_SETS
    assert len(moleculeace.READING_SETS) == 8 and not set(moleculeace.READING_SETS) & set(moleculeace.SELECTION_SETS)
    text = write({first: 1.02} | {name: 0.98 for name in others})
    assert f"| {first} | blend | 0.500 / 0.600 | 0.510 / 0.610 | 1.020 | 1.017 |" in text
    assert f"| {first} | ensemble | 1.000 / 1.100 | 0.900 / 1.000 | 0.900 | 0.909 |" in text
    assert "- ensemble: mean ratio 0.900 (cliffs 0.909), lower on 8 of 8 sets" in text
    assert f"- blend: mean ratio {(1.02 + 7 * 0.98) / 8:.3f}" in text and "lower on 7 of 8 sets" in text
    assert "**The shipped config takes recipe+nodropout's change.**" in text
    assert moleculeace.SELECTION_SETS[0] not in text
    text = write({first: 1.02, others[0]: 1.1} | {name: 0.98 for name in others[1:]})
    assert "**The shipped config does not take recipe+nodropout's change.**" in text
    (results / f"{first}.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines(first, "recipe+buckets", 1.0, 0.5))
    )
    assert f"**No verdict yet**: not finished: {first} recipe+nodropout." in moleculeace.second_reading(
        "recipe+nodropout", "recipe+buckets"
    )
    for refused, message in (("svm recipe+buckets", "not a candidate"), ("recipe+mse svm", "not a recipe arm")):
        with pytest.raises(SystemExit):
            moleculeace.parse_args(["--second-reading", *refused.split()])
        assert message in capsys.readouterr().err
    # a candidate checkpoint (rule 10): the same rule decides whether it replaces the shipped checkpoint
    text = write({name: 0.98 for name in moleculeace.READING_SETS}, "recipe+nodropout@0123456789ab", "recipe+nodropout")
    assert "**The shipped checkpoint takes recipe+nodropout@0123456789ab's change.**" in text
    parsed = moleculeace.parse_args(["--second-reading", "recipe+nodropout@0123456789ab", "recipe+nodropout"])
    assert parsed.second_reading == ["recipe+nodropout@0123456789ab", "recipe+nodropout"]


def test_blend_rules_are_scored_on_held_out_halves_of_the_validation_rows_only(
    site: Path, results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The network alone is the reference (1.000); parts that equal it leave every rule at 1.000; trees far worse
    than 1.5x the network's error are never admitted, so today's rule equals the network alone; and no test row is
    read (their y are NaN here)."""
    write_moleculeace(site, SET, benchmark_rows(train=40, test=6))
    read = moleculeace.read_set
    table = read(SET)
    monkeypatch.setattr(
        moleculeace,
        "read_set",
        lambda name: read(name).assign(y=np.where(table["split"] == "test", np.nan, table["y"])),
    )
    truth = table.loc[table["split"] == "valid", "y"].to_numpy()
    rng = np.random.default_rng(1)
    network = truth + rng.normal(0, 0.1, truth.shape)

    def write(trees: np.ndarray, kernel: np.ndarray) -> None:
        parts = {"member": network, "ensemble": network, "trees": trees, "kernel": kernel, "blend": network}
        lines = [
            entry("recipe", 0 if part == "member" else None, float("nan"), float("nan"), part=part)
            | {"pretrained": moleculeace.shipped_pretrained(), "valid_predictions": values.tolist()}
            for part, values in parts.items()
        ]
        results.mkdir(exist_ok=True)
        (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    write(network, network)
    row = moleculeace.blend_rules("recipe", splits=20).splitlines()[2]
    assert row == f"| {SET} | {len(truth)} | " + " | ".join(["1.000"] * len(moleculeace.BLEND_RULES)) + " |"
    write(truth + 5.0, network)  # trees 2,500 times the network's error: never admitted; the kernel equals it
    row = moleculeace.blend_rules("recipe", splits=20).splitlines()[2].split(" | ")
    assert row[2:4] == ["1.000", "1.000"] and row[-1] == "1.000 |"


def test_the_least_squares_rule_stacks_on_the_simplex() -> None:
    grid = moleculeace.simplex_grid(3, 20)
    assert grid.shape == (231, 3) and np.allclose(grid.sum(axis=1), 1.0) and grid.min() == 0.0
    truth = np.zeros(4)
    over, under, far = np.ones(4), -np.ones(4), np.full(4, 5.0)
    assert moleculeace.least_squares({"a": over, "b": under, "c": far}, truth) == {"a": 0.5, "b": 0.5}  # MSE 0
    # one part alone is exact: all its weight, no other part's
    assert moleculeace.least_squares({"a": over, "b": truth, "c": far}, truth) == {"b": 1.0}
    # 1 and 3 against a truth of 1.5: 0.75 x 1 + 0.25 x 3 = 1.5
    assert moleculeace.least_squares({"a": over, "b": np.full(4, 3.0)}, np.full(4, 1.5)) == {"a": 0.75, "b": 0.25}


def test_rule_4_replaces_todays_blend_only_by_a_rule_2_percent_better_over_all_ten_sets() -> None:
    def ratios(todays: float, network: float, sets: tuple[str, ...] = moleculeace.SETS) -> dict:
        by_rule = dict.fromkeys(moleculeace.BLEND_RULES, todays + 0.05) | {moleculeace.TODAYS_RULE: todays}
        return {name: by_rule | {"the network ensemble alone": network} for name in sets}

    assert moleculeace.chosen_rule(ratios(1.03, 1.0)) == "the network ensemble alone"  # 1.0 <= 0.98 x 1.03
    assert moleculeace.chosen_rule(ratios(1.01, 1.0)) == moleculeace.TODAYS_RULE  # 1 % lower: not enough
    assert moleculeace.chosen_rule(ratios(1.03, 1.0, moleculeace.SETS[:-1])) is None  # not on all 10 sets yet


def test_the_final_reading_blends_the_final_arms_stored_parts_by_rule_4s_choice(
    site: Path, results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should rule 4 choose "the network ensemble alone", the final arm's blend figure is its ensemble's, whatever
    the stored blend (today's rule) scored; today's rule leaves the stored blend as it is."""
    write_moleculeace(site, SET, benchmark_rows(train=40, test=6))
    table = moleculeace.read_set(SET)
    valid = table.loc[table["split"] == "valid", "y"].to_numpy()
    test = table.loc[table["split"] == "test", "y"].to_numpy()
    shifts = {"ensemble": 0.1, "trees": 0.3, "kernel": -0.2, "blend": 0.05}
    lines = [entry("svm", 0, 0.8, 1.0)] + [
        entry(moleculeace.FINAL_ARM, None, float(abs(shift)), float(abs(shift)), part=part)
        | {"valid_predictions": (valid + shift).tolist(), "test_predictions": (test + shift).tolist()}
        for part, shift in shifts.items()
    ]
    results.mkdir()
    (results / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setattr(moleculeace, "checked_results", moleculeace.read_results)  # identities: not this test's
    monkeypatch.setattr(moleculeace, "held_out_ratios", lambda arm: {})
    monkeypatch.setattr(moleculeace, "chosen_rule", lambda ratios: "the network ensemble alone")
    text = moleculeace.report([SET], final=True)
    assert f"| {moleculeace.FINAL_ARM} | blend | 0.100 | 0.100 | 0.100 |" in text
    assert f"| {moleculeace.FINAL_ARM} | blend | SVM | 1 | {0.1 / 0.8:.3f} | {0.1 / 1.0:.3f} |" in text
    assert "weighs its stored parts by rule 4's choice: the network ensemble alone" in text
    monkeypatch.setattr(moleculeace, "chosen_rule", lambda ratios: moleculeace.TODAYS_RULE)
    text = moleculeace.report([SET], final=True)
    assert f"| {moleculeace.FINAL_ARM} | blend | 0.050 | 0.050 | 0.500 |" in text  # the stored line's figures


def test_the_grid_rule_is_the_earlier_releases_and_the_stability_table_reads_validation_rows_only(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = np.array([0.0, 0.0, 0.0, 0.0])
    first, second = np.array([1.0, 1.0, 1.0, 1.0]), np.array([-0.5, -0.5, -0.5, -0.5])
    assert moleculeace.grid_weight(first, second, truth) == 0.75  # |1 - 1.5 w| is least at w = 2/3 -> 0.75
    assert moleculeace.grid_weight(truth, first, truth) == 0.0
    write_moleculeace(site, SET, benchmark_rows(train=40, test=6))
    read = moleculeace.read_set

    def no_test_rows(name: str) -> pd.DataFrame:
        table = read(name)
        return table.assign(y=np.where(table["split"] == "test", np.nan, table["y"]))  # a test row read would NaN

    monkeypatch.setattr(moleculeace, "read_set", no_test_rows)
    text = moleculeace.blend_stability([SET], resamples=20)
    row = text.splitlines()[-1].split(" | ")
    assert row[0] == f"| {SET}" and row[1] == "4" and "nan" not in text


@pytest.mark.slow
def test_the_recipes_arm_records_every_part_of_its_ensemble(
    site: Path, results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe as the arm runs it (graphormer-urpe sweep on the set's table, the split as a column), one epoch a
    seed: each seed's run, the ensemble, the trees, the kernel and the blend, scored against the set's rows."""
    write_moleculeace(site, SET, benchmark_rows(train=40, test=8))
    options = moleculeace.ARMS["recipe"].options + " --trainer.max_epochs 1"
    monkeypatch.setitem(moleculeace.ARMS, "recipe", moleculeace.Arm("recipe", options, (0, 1)))
    monkeypatch.setenv("PYTHONPATH", str(site))  # the sweep's processes read the same (fake) MoleculeACE: unused
    moleculeace.main(["--sets", SET, "--arms", "recipe", "--work", str(tmp_path / "work")])
    entries = moleculeace.read_results(SET)
    assert [(e["part"], e["seed"]) for e in entries] == [
        ("member", 0),
        ("member", 1),
        ("ensemble", None),
        ("trees", None),
        ("kernel", None),
        ("blend", None),
    ]
    table = moleculeace.read_set(SET)
    for entry in entries:
        assert entry["test_rmse"] == pytest.approx(
            moleculeace.scores(np.array(entry["test_predictions"]), table)["test_rmse"], abs=1e-4
        )
    members = np.array([entry["test_predictions"] for entry in entries[:2]])
    np.testing.assert_allclose(entries[2]["test_predictions"], members.mean(axis=0), rtol=0, atol=2e-5)
    assert entries[2]["cpu_seconds"] > 0 and entries[0]["cpu_seconds"] is None  # the sweep's, once
    assert {entry["pretrained"] for entry in entries} == {moleculeace.shipped_pretrained()}
    assert {entry["configuration"] for entry in entries} == {moleculeace.configuration(options)}
    moleculeace.main(["--sets", SET, "--arms", "recipe", "--work", str(tmp_path / "work")])  # done: not run again
    assert moleculeace.read_results(SET) == entries
