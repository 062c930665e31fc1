"""``graphormer-urpe predict``'s bad values: each is one line (exit code 2, no traceback) before any work; nothing is
written, no earlier file touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphormer_urpe.commands.predict import main
from graphormer_urpe.testing.directories import files_of, read_only_directory


def refusal(argv: list[str], where: Path) -> str:
    """The message with which ``predict ARGV`` stops; ``where`` holds exactly the same files afterwards."""
    before, paths = files_of(where), set(where.rglob("*"))
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and files_of(where) == before and set(where.rglob("*")) == paths  # nothing new
    return str(stop.value)


@pytest.mark.slow
def test_every_bad_value_of_predict_is_one_line_before_any_work(small_run: Path, tmp_path: Path) -> None:
    best = json.loads((small_run / "metrics.json").read_text())["best_checkpoint"]
    table = tmp_path / "new.csv"
    table.write_text("id,smiles\na,CCO\n")
    (tmp_path / "earlier.csv").write_text("kept\n")
    (tmp_path / "no_rows.csv").write_text("smiles\n")
    (tmp_path / "other_column.csv").write_text("SMILES\nCCO\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.ckpt").write_text("hello")
    read_only = read_only_directory(tmp_path)
    out = ["--out", str(tmp_path / "p.csv")]
    cases = {
        "model missing": ([str(table), "--model", str(tmp_path / "nope"), *out], "does not exist: name an ensemble's"),
        "model a folder": ([str(table), "--model", str(tmp_path / "folder"), *out], "is not an ensemble's directory"),
        "model not a checkpoint": ([str(table), "--model", str(tmp_path / "notes.ckpt"), *out], "not a checkpoint"),
        "table missing": ([str(tmp_path / "none.csv"), "--model", best, *out], "none.csv, does not exist"),
        "table a folder": ([str(tmp_path / "folder"), "--model", best, *out], "folder, is a directory, not a table"),
        "table without rows": ([str(tmp_path / "no_rows.csv"), "--model", best, *out], "header but no data rows"),
        "SMILES column absent": ([str(tmp_path / "other_column.csv"), "--model", best, *out], "smiles"),
        "smiles_column absent": ([str(table), "--model", best, "--smiles_column", "SMILE", *out], "SMILE"),
        "out exists": ([str(table), "--model", best, "--out", str(tmp_path / "earlier.csv")], "exists; choose"),
        "out is the table": ([str(table), "--model", best, "--out", str(table)], "exists; choose another"),
        "out a folder": ([str(table), "--model", best, "--out", str(tmp_path / "folder")], "is a directory"),
        "out not writable": ([str(table), "--model", best, "--out", str(read_only / "p.csv")], "is not writable"),
        "config with an ensemble": (
            [str(table), "--model", str(tmp_path / "folder"), "--config", "x.yaml", *out],
            "--config changes a checkpoint's config",
        ),
    }
    for case, (argv, expected) in cases.items():
        message = refusal(argv, tmp_path)
        assert expected in message and "\n" not in message, (case, message)
    assert (tmp_path / "earlier.csv").read_text() == "kept\n" and not (tmp_path / "p.csv").exists()


@pytest.mark.slow
def test_a_labels_ensemble_with_the_kernel_predicts_each_label_and_every_parts_probability(
    small_table: Path, tmp_path: Path
) -> None:
    """``ensemble --kernel`` of a binary label's run without molecule features (the kernel reads the fingerprints
    itself), then ``predict --model DIR``: the table's own columns kept, the label of the blended probability, the
    member's, std, ensemble's and kernel's probabilities, the kernel's in [0, 1] as the kernel fitted on the
    training rows predicts them (0/1 regressed, clipped); an unreadable row left empty with its reason."""
    import numpy as np
    import pandas as pd

    from graphormer_urpe.commands.ensemble import main as ensemble
    from graphormer_urpe.data.sources.fingerprints import ecfp_count_matrix
    from graphormer_urpe.evaluation.ensemble import split_rows
    from graphormer_urpe.evaluation.kernel import FingerprintKernel
    from graphormer_urpe.evaluation.new_molecules import model_of
    from graphormer_urpe.testing.runs import small_run_args, train

    label = ("--model.class_path", "graphormer_urpe.tasks.Classification", "--data.source.task", "binary")
    steps = ("--data.source.targets", "[polar]", "--trainer.max_steps", "4", "--trainer.val_check_interval", "2")
    train(small_run_args(small_table, tmp_path / "data", tmp_path / "runs", "--run_name", "r", *label, *steps))
    record = ensemble(["--runs", str(tmp_path / "runs" / "r"), "--kernel", "--out", str(tmp_path / "ens")])
    assert record.target_kind == "binary" and record.cheap_parts == ["kernel"] and record.trees is None
    assert set(record.blend_weights["polar"]) <= {"ensemble", "kernel"}
    table = tmp_path / "new.csv"
    table.write_text("id,smiles\na,CCO\nb,c1ccccc1O\nc,not a molecule\nd,OCC1OCCC=C1\n")
    main(["--model", str(tmp_path / "ens"), str(table), "--out", str(tmp_path / "p.csv")])
    written = pd.read_csv(tmp_path / "p.csv", keep_default_na=False, na_values=[""])
    parts = [f"polar_probability_{part}" for part in ("member0", "std", "ensemble", "kernel")]
    assert list(written.columns) == ["row", "id", "smiles", "polar", "polar_probability", *parts, "error"]
    assert written["id"].tolist() == ["a", "b", "c", "d"] and written["error"].notna().tolist() == [0, 0, 1, 0]
    assert written.iloc[2][["polar", "polar_probability", *parts]].isna().all()
    read = written.drop(index=2)
    assert (read["polar"] == (read["polar_probability"] >= 0.5)).all()
    weights = record.blend_weights["polar"]
    blended = sum(w * read[f"polar_probability_{part}"] for part, w in weights.items())
    np.testing.assert_allclose(read["polar_probability"], blended, rtol=1e-12)
    _, run = model_of(tmp_path / "ens" / record.members[0].path)
    train_rows = split_rows(run.source(), "train")
    kernel = FingerprintKernel.fit(
        "binary", ["polar"], ecfp_count_matrix(train_rows["smiles"]), train_rows[["polar"]].to_numpy()
    )
    expected = kernel.predict(ecfp_count_matrix(read["smiles"].tolist()))[:, 0]
    np.testing.assert_allclose(read["polar_probability_kernel"], expected, rtol=1e-12)
    assert ((expected >= 0) & (expected <= 1)).all()
