"""``graphormer-urpe ensemble``'s bad values: one line each (exit code 2) before any work, no directory written; and
its summary names the blend's score as the blend's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from graphormer_urpe.commands.ensemble import main
from graphormer_urpe.evaluation.ensemble import EnsembleRecord, SavedFile, summary
from graphormer_urpe.testing.directories import files_of, read_only_directory


@pytest.mark.slow
def test_every_bad_value_of_ensemble_is_one_line_before_any_work(small_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "x").write_text("x")
    moved = tmp_path / "moved"  # a copy whose own best checkpoint is gone: the original's is not read instead
    shutil.copytree(small_run, moved)
    for best in (moved / "checkpoints").glob("best-*.ckpt"):
        best.unlink()
    read_only = read_only_directory(tmp_path)
    cases = {
        "one run twice": (["--runs", str(run), str(run) + "/", "--out", str(tmp_path / "e")], "are the same run"),
        "a moved run without its best checkpoint": (
            ["--runs", str(moved), "--out", str(tmp_path / "e")],
            f"its best checkpoint {moved / 'checkpoints'}",
        ),
        "a run without metrics.json": (["--runs", str(unfinished), "--out", str(tmp_path / "e")], "no "),
        "a run that does not exist": (["--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "e")], "nope"),
        "out exists": (["--runs", str(run), "--out", str(tmp_path / "kept")], "exists; an ensemble is written to"),
        "out not writable": (["--runs", str(run), "--out", str(read_only / "e")], "is not writable"),
        "trees without descriptors": (
            ["--runs", str(run), "--trees", "--out", str(tmp_path / "e")],
            "train with --data.source.descriptors rdkit2d",
        ),
    }
    before = files_of(tmp_path)
    for case, (argv, expected) in cases.items():
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2 and expected in str(stop.value) and "\n" not in str(stop.value), case
        assert files_of(tmp_path) == before and not (tmp_path / "e").exists(), case
    assert json.loads((run / "metrics.json").read_text()) == json.loads((small_run / "metrics.json").read_text())


def test_the_summary_names_the_blends_score_as_the_blends() -> None:
    scores = {
        "test": {
            "ensemble": {"test/mae": 0.5, "test/mae/y": 0.5},
            "trees": {"test/mae": 0.6},
            "kernel": {"test/mae": 0.45},
            "blend": {"test/mae": 0.4},
        }
    }
    record = EnsembleRecord(
        format=2,
        target_kind="regression",
        targets=["y"],
        smiles_column="smiles",
        members=[SavedFile("members/member0.ckpt", "a"), SavedFile("members/member1.ckpt", "b")],
        sources=[],
        trees=[SavedFile("trees/target0.skops", "c")],
        tree_inputs=["rdkit2d"],
        kernel=[SavedFile("kernel/target0.npz", "e")],
        blend_weights={"y": {"ensemble": 0.5, "kernel": 0.5}},
        blend_rule="a rule",
        descriptor_reference_sha1="d",
        data_spec={},
        data_identity={},
        scores=scores,
    )
    assert summary(record) == (
        "test MAE 0.4 of the blend of the ensemble with trees and kernel (weights {'y': "
        "{'ensemble': 0.5, 'kernel': 0.5}}, chosen on validation rows by a rule); the ensemble "
        "of 2 members alone MAE 0.5, the trees alone MAE 0.6, the kernel alone MAE 0.45"
    )
