from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem

from graphormer_urpe.data.sources.descriptors import descriptor_reference, normalised_descriptors
from graphormer_urpe.data.sources.pretraining import MosesDescriptors
from graphormer_urpe.errors import ConfigError, DatasetMissing
from graphormer_urpe.testing.moses_layout import write_moses_package

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "not a smiles", "CCN(CC)CC", "O=C(O)c1ccccc1", "CCCCCC",
          "c1ccncc1", "CC(C)Cc1ccc(C(C)C(=O)O)cc1", "OCC(O)CO"] * 2


@pytest.fixture
def moses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = write_moses_package(tmp_path / "site", SMILES)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return path


def test_targets_are_the_normalised_descriptors_that_vary_over_moses(moses: Path) -> None:
    source = MosesDescriptors(molecules=None, valid_fraction=0.1, seed=0)
    reader = source.open(moses.parent)
    reference = descriptor_reference()
    assert source.spec.target_names == tuple(reference.names[k] for k in reference.informative)
    graphs = dict(reader.graphs(0, reader.num_rows))
    assert graphs[3] == "RDKit cannot parse"
    expected = normalised_descriptors(Chem.MolFromSmiles(SMILES[2]))[reference.informative]
    np.testing.assert_array_equal(graphs[2].y.reshape(-1), expected)


def test_the_draw_and_the_split_are_fixed_by_the_seed(moses: Path) -> None:
    source = MosesDescriptors(molecules=100, valid_fraction=0.1, seed=0)
    with pytest.raises(ConfigError, match="data.source.molecules"):
        MosesDescriptors(molecules=10)  # fewer than 100 molecules cannot pretrain anything
    reader = MosesDescriptors(molecules=None, valid_fraction=0.1).open(moses.parent)
    splits = source.splits(moses.parent, reader)
    assert [len(splits[name]) for name in ("train", "valid", "test")] == [16, 2, 2]
    assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(20))


def test_a_missing_wheel_is_named_with_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "site-packages" not in p])
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(DatasetMissing, match="pip install --no-deps molsets==0.3.1"):
        MosesDescriptors().ensure_raw(Path("."))
