"""``python evaluate.py`` in a checkout is ``graphormer-urpe evaluate`` (``predict`` with ``--predict``), its
earlier option spellings still read."""

from __future__ import annotations

import pytest

import evaluate
from graphormer_urpe.commands import evaluate as evaluate_command
from graphormer_urpe.commands import predict as predict_command


@pytest.fixture
def given(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """What each command the shim called was given (the commands themselves not run)."""
    calls: dict[str, list[str]] = {}
    for name, module in (("evaluate", evaluate_command), ("predict", predict_command)):
        monkeypatch.setattr(module, "main", lambda argv, name=name: calls.setdefault(name, list(argv)))
    return calls


def test_evaluate_py_is_the_evaluate_command_with_its_earlier_spellings(given: dict[str, list[str]]) -> None:
    evaluate.main(
        [
            "--ckpt",
            "c.ckpt",
            "--split=test",
            "--submission-dir",
            "subs",
            "--data-root=data",
            "--allow-other-data",
            "--data.root",
            "d",
        ]
    )
    assert given == {
        "evaluate": [
            "--ckpt",
            "c.ckpt",
            "--split=test",
            "--submission_dir",
            "subs",
            "--data_root",
            "data",
            "--allow_other_data",
            "--data.root",
            "d",
        ]
    }


def test_evaluate_py_with_predict_is_the_predict_command(given: dict[str, list[str]]) -> None:
    evaluate.main(["--ckpt", "c.ckpt", "--predict", "new.csv", "--out", "p.csv", "--smiles-column", "SMILES"])
    assert given == {"predict": ["new.csv", "--model", "c.ckpt", "--out", "p.csv", "--smiles_column", "SMILES"]}
