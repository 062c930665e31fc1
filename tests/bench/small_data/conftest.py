"""A MoleculeACE set of 40 QM9 molecules in the wheel's layout, and the shipped arm's stored validation parts on it:
what the scripts that vary one cheap part of the recipe (rules 12 and 17) read."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.small_data import moleculeace
from graphormer_urpe.testing.data_packages import sample_molecules, write_moleculeace

#: The set's name (one of the benchmark's, so that the scripts accept it).
SET = "CHEMBL1871_Ki"


@pytest.fixture
def small_set(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """:data:`SET` with 40 QM9 molecules (30 train, of which the validation rows, 10 test), results kept under
    ``tmp_path``: its name, its training and its validation rows."""
    molecules = sample_molecules(40)
    rows = [(smiles, round(-gap, 4), 0, "train" if k < 30 else "test") for k, (smiles, gap) in enumerate(molecules)]
    write_moleculeace(site, SET, rows)
    monkeypatch.setattr(moleculeace, "RESULTS", tmp_path / "results")
    moleculeace.RESULTS.mkdir()
    table = moleculeace.read_set(SET)
    return SET, table[table["split"] == "train"], table[table["split"] == "valid"]


@pytest.fixture
def store_shipped_parts() -> Callable[[dict[str, np.ndarray]], None]:
    """``store(parts)``: the shipped arm's lines on :data:`SET` with these validation predictions of its parts (the
    blend's, unread, the truth's placeholder)."""

    def store(parts: dict[str, np.ndarray]) -> None:
        arm = moleculeace.ARMS[moleculeace.SHIPPED_ARM]
        lines = [
            {
                "set": SET,
                "arm": moleculeace.SHIPPED_ARM,
                "seed": None,
                "part": part,
                "options": arm.options,
                "valid_predictions": parts.get(part, parts["ensemble"]).tolist(),
                "test_predictions": [],
            }
            for part in ("ensemble", "trees", "kernel", "blend")
        ]
        (moleculeace.RESULTS / f"{SET}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    return store


@pytest.fixture
def hand_blend() -> Callable[[dict[str, np.ndarray], np.ndarray], np.ndarray]:
    """``hand_blend(parts, truth)``: the recipe's rule computed by hand, inverse MSE over the parts within 1.5x of
    the best error on ``truth``'s rows."""

    def blended(parts: dict[str, np.ndarray], truth: np.ndarray) -> np.ndarray:
        errors = {part: np.mean((values - truth) ** 2) for part, values in parts.items()}
        admitted = {part: 1 / error for part, error in errors.items() if error <= 1.5 * min(errors.values())}
        return sum(parts[part] * weight / sum(admitted.values()) for part, weight in admitted.items())

    return blended
