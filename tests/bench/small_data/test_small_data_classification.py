"""bench/small_data/small_data_classification.py: the benchmark's rows read from qc-b3db 1.1.1's layout
(``graphormer_urpe.testing.data_packages.write_b3db_classification``), chemprop needed unless ``--cheap-parts``, and
the cheap parts measured alone as the saved ensemble fits them: the trees on descriptors, on descriptors + ECFP
counts, the kernel and their blends, scored by the project's metric definitions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.common import configuration
from bench.small_data import small_data_classification as bench
from graphormer_urpe.data.sources.fingerprints import ecfp_count_matrix
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
from graphormer_urpe.evaluation.blend import DescriptorTrees, blend_weights, tree_inputs
from graphormer_urpe.evaluation.kernel import FingerprintKernel
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.data_packages import write_b3db_classification


def write_labels(site: Path, count: int) -> None:
    """``count`` molecules of the QM9 sample, labelled BBB+ when polar, and one repeated molecule."""
    table = pd.read_csv(REPO_DIR / "examples" / "qm9_sample.csv").head(count)
    rows = list(zip(table["smiles"], table["polar"]))
    write_b3db_classification(site, [*rows, rows[0]])


def test_the_table_is_b3dbs_labels_cleaned_and_drawn_with_seed_0(site: Path) -> None:
    write_labels(site, 30)
    table = bench.b3db_table(20)
    assert list(table.columns) == ["smiles", "bbb"] and len(table) == 20
    assert set(table["bbb"]) == {0, 1} and not table["smiles"].duplicated().any()
    pd.testing.assert_frame_equal(table, bench.b3db_table(20))
    assert len(bench.b3db_table(100)) == 30  # the repeat dropped


def test_chemprop_is_needed_unless_the_cheap_parts_alone_are_measured(
    site: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as stop:
        bench.main(["--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    assert "--chemprop CHEMPROP is required (the chemprop 2.3.1 executable), unless --cheap-parts" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


def test_a_directory_of_recipe_runs_on_another_config_content_is_refused_before_anything_is_written(
    site: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    line = {"split": 0, "arm": "recipe, ensemble", "seed": None, "roc_auc": 0.9, "pr_auc": 0.9}
    for earlier in ({"configuration": "e" * 64}, {}):  # another content, or an entry from before the field
        (out / bench.RUNS).write_text(json.dumps(line | earlier) + "\n")
        with pytest.raises(bench.BenchError, match="ran on another content of small_molecules_classification.yaml"):
            bench.main(["--out", str(out), "--chemprop", "chemprop"])
        assert sorted(path.name for path in out.iterdir()) == [bench.RUNS]
    today = {"configuration": configuration(bench.RECIPE_CONFIG)}
    bench.check_recipe_configuration([line | today, {"split": 0, "arm": "chemprop", "seed": 0}], out / bench.RUNS)


@pytest.mark.slow
def test_the_cheap_parts_are_fitted_on_the_training_rows_and_blended_on_the_validation_rows(
    site: Path, tmp_path: Path
) -> None:
    """Each part refitted here on the split's training rows scores what the benchmark recorded, on the validation
    and test rows; the trees with ECFP read the 2,048 counts beside the 217 descriptors; each blend's weights are
    the project's rule on the validation rows; the report has every part's split and mean rows."""
    write_labels(site, 120)
    out = tmp_path / "out"
    rows = bench.main(["--cheap-parts", "--out", str(out), "--molecules", "100", "--split-seeds", "3"])
    results = json.loads((out / "cheap_parts.json").read_text())
    assert results["summary"] == json.loads(json.dumps(rows))
    assert results["setup"]["molecules"] == 100 and results["setup"]["split_seeds"] == [3]
    entries = {row["part"]: row for row in rows if row["split"] == 3}
    assert list(entries) == ["trees", "trees+ecfp", "kernel", "trees + kernel", "trees+ecfp + kernel"]
    table = pd.read_csv(out / "data" / "split3" / "table.csv")
    frames = {name: table[table["split"] == name] for name in ("train", "valid", "test")}
    assert {name: len(frame) for name, frame in frames.items()} == {
        name: counts["rows"] for name, counts in results["setup"]["splits"]["3"].items()
    }
    labels = {name: frame[["bbb"]].to_numpy(np.float64) for name, frame in frames.items()}
    smiles = {name: frame["smiles"].tolist() for name, frame in frames.items()}
    predicted = {}
    for part, features in (
        ("trees", MoleculeFeatures("rdkit2d")),
        ("trees+ecfp", MoleculeFeatures("rdkit2d", (), "ecfp")),
    ):
        trees = DescriptorTrees.fit("binary", ["bbb"], tree_inputs(features, smiles["train"]), labels["train"])
        predicted[part] = {rows: trees.predict(tree_inputs(features, smiles[rows])) for rows in ("valid", "test")}
    assert tree_inputs(MoleculeFeatures("rdkit2d", (), "ecfp"), smiles["test"]).shape[1] == 217 + 2048
    kernel = FingerprintKernel.fit("binary", ["bbb"], ecfp_count_matrix(smiles["train"]), labels["train"])
    predicted["kernel"] = {rows: kernel.predict(ecfp_count_matrix(smiles[rows])) for rows in ("valid", "test")}
    for name, parts in bench.CHEAP_BLENDS.items():
        weights = blend_weights({p: predicted[p]["valid"] for p in parts}, labels["valid"], ["bbb"])["bbb"]
        assert entries[name]["weights"] == pytest.approx(weights)
        predicted[name] = {rows: sum(w * predicted[p][rows] for p, w in weights.items()) for rows in ("valid", "test")}
    for part, values in predicted.items():
        assert entries[part]["valid_brier"] == pytest.approx(np.mean((values["valid"] - labels["valid"]) ** 2))
        for rows in ("valid", "test"):
            expected = bench.scores(values[rows][:, 0], labels[rows][:, 0])
            assert entries[part][f"{rows}_roc_auc"] == pytest.approx(expected["roc_auc"], nan_ok=True), (part, rows)
            assert entries[part][f"{rows}_pr_auc"] == pytest.approx(expected["pr_auc"], nan_ok=True), (part, rows)
    report = (out / "cheap_parts.md").read_text()
    assert report.count("| trees+ecfp + kernel | ") == 2 and "| kernel | mean | " in report
    assert "Test figures report only: nothing is chosen on them." in report
