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
