"""evaluate.py (``graphormer-urpe evaluate`` and, with ``--predict``, ``predict``) refuses before any work: outputs it
would overwrite, splits the checkpoint's data do not have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evaluate


def test_help_prints_the_options_and_exits_zero(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        evaluate.main(["--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "--ckpt CKPT" in shown and "--submission_dir" in shown and "changes the checkpoint's own config" in shown


@pytest.mark.parametrize("extra", [["--split", "valid"], ["--predict", "TABLE"]], ids=["metrics", "predictions"])
def test_out_never_overwrites_a_file(tmp_path: Path, extra: list[str]) -> None:
    """As ``python -m graphormer_urpe.convert`` does: an earlier result is never replaced. (The refusal is
    read from the exception: ``capsys`` would close the stream the package's log handler keeps.)"""
    (tmp_path / "new.csv").write_text("smiles\nCCO\n")
    (tmp_path / "any.ckpt").write_bytes(b"")
    out = tmp_path / "metrics.json"
    out.write_text('{"earlier": "result"}\n')
    with pytest.raises(SystemExit) as refused:
        evaluate.main(["--ckpt", str(tmp_path / "any.ckpt"), *[str(tmp_path / "new.csv") if a == "TABLE" else a
                                                                for a in extra], "--out", str(out)])
    assert refused.value.code == 2
    assert str(refused.value) == f"--out {out} exists; choose another output path (nothing is overwritten)"
    assert out.read_text() == '{"earlier": "result"}\n'


def test_a_hidden_test_split_of_a_table_is_named_as_missing(small_run: Path) -> None:
    """``--split test-dev`` exists for OGB-LSC datasets only: a table's checkpoint is told so, not asked for a
    ``--submission-dir`` it could never use."""
    best = json.loads((small_run / "metrics.json").read_text())["best_checkpoint"]
    for split in ("test-dev", "test-challenge"):
        with pytest.raises(SystemExit) as refused:
            evaluate.main(["--ckpt", best, "--split", split])
        assert refused.value.code == 2
        assert str(refused.value) == (
            f"{best}'s data have no split '{split}': test-dev and test-challenge are the hidden test splits of "
            "OGB-LSC datasets (PCQM4Mv2, MAG240M); evaluate it with --split valid or test")
