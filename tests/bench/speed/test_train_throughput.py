"""bench/speed/train_throughput.py's settings: the recipe's draws its molecules' sizes from MoleculeACE's
CHEMBL1871_Ki training rows (a fake wheel in the release's layout here), runs the network the recipe fine-tunes and
batches by the recipe's window."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import yaml
from rdkit import Chem

from bench.common import exit_code
from bench.speed import train_throughput
from graphormer_urpe.configs import shipped_config
from graphormer_urpe.testing.data_packages import write_moleculeace

#: Training rows (heavy atoms 1, 3, 6, 2) and one test row, which must not count.
ROWS = [("C", 5.0, 0, "train"), ("CCO", 6.0, 0, "train"), ("c1ccccc1", 7.0, 0, "train"), ("CN", 5.5, 0, "train")]
ROWS += [("CCCCCCCCCC", 6.5, 1, "test")]


def test_the_recipes_setting_draws_chembl1871_training_sizes_and_batches_by_the_configs_window(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uncached here, so that no later test sees these fake sizes
    monkeypatch.setattr(train_throughput, "chembl1871_sizes", train_throughput.chembl1871_sizes.__wrapped__)
    write_moleculeace(site, "CHEMBL1871_Ki", ROWS)
    sizes = train_throughput.chembl1871_sizes()
    # the benchmark's validation rule keeps round(0.1 * 4) = 0 of these train rows apart: all four train
    assert sorted(sizes.tolist()) == sorted(Chem.MolFromSmiles(s).GetNumHeavyAtoms() for s, *_ in ROWS[:4])
    rng = np.random.default_rng(0)
    drawn = {train_throughput.chembl1871_like_atoms(rng) for _ in range(200)}
    assert drawn == {1, 2, 3, 6}
    setting = train_throughput.SETTINGS["chembl"]  # the network the recipe fine-tunes, batched as the recipe does
    recipe = yaml.safe_load(shipped_config("small_molecules").read_text())
    assert recipe["init_from"] == "pretrained" and setting.config == "pretrain_moses"
    assert setting.bucket_window == recipe["data"]["init_args"]["bucket_window"] == 4
    zinc = yaml.safe_load(shipped_config("zinc_subset").read_text())
    assert train_throughput.SETTINGS["zinc"].bucket_window == zinc["data"]["init_args"]["bucket_window"]


def test_the_recipes_setting_without_the_moleculeace_wheel_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(train_throughput, "chembl1871_sizes", train_throughput.chembl1871_sizes.__wrapped__)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # as on a machine without the wheel
    argv = ["--settings", "chembl", "--batch-size", "2", "--modes", "eager", "--attention", "urpe"]
    assert exit_code(train_throughput.main, argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["error: MoleculeACE is not installed: pip install --no-deps MoleculeACE==3.0.0"]
