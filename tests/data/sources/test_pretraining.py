from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import BRICS

from graphormer_urpe.data.sources.descriptors import descriptor_reference, normalised_descriptors
from graphormer_urpe.data.sources.fingerprints import ecfp_counts
from graphormer_urpe.data.sources.pretraining import (
    MosesDescriptors,
    brics_fragments,
    capped_fragment,
    moses_smiles_file,
)
from graphormer_urpe.errors import ConfigError, DatasetMissing
from graphormer_urpe.testing.moses_layout import place_moses_corpus, write_moses_package

SMILES = [
    "CCO",
    "c1ccccc1O",
    "CC(=O)Nc1ccc(O)cc1",
    "not a smiles",
    "CCN(CC)CC",
    "O=C(O)c1ccccc1",
    "CCCCCC",
    "c1ccncc1",
    "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
    "OCC(O)CO",
] * 2


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
    with pytest.raises(DatasetMissing, match="pip install --no-deps molsets==0.3.1") as refused:
        MosesDescriptors().ensure_raw(Path("here"))
    # and where a data root may hold the corpus instead
    assert "place its train.csv.gz at here/moses_descriptors/raw/train.csv.gz" in str(refused.value)


def test_a_corpus_placed_under_the_data_root_is_read_without_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)  # no molsets
    placed = place_moses_corpus(tmp_path / "data", SMILES[:10])
    assert placed == tmp_path / "data" / "moses_descriptors" / "raw" / "train.csv.gz"
    source = MosesDescriptors(molecules=None, valid_fraction=0.1)
    source.ensure_raw(tmp_path / "data")
    assert list(source.open(tmp_path / "data").smiles) == SMILES[:10]
    with pytest.raises(DatasetMissing):  # another root holds none, and there is no wheel
        source.ensure_raw(tmp_path / "elsewhere")


def test_the_data_roots_corpus_comes_before_the_wheels(moses: Path, tmp_path: Path) -> None:
    assert moses_smiles_file("train", tmp_path / "data") == moses  # nothing placed: the wheel's
    place_moses_corpus(tmp_path / "data", ["CCO", "CCN"])
    assert moses_smiles_file("train") == moses  # no root given: the wheel's
    assert list(MosesDescriptors(molecules=None).open(tmp_path / "data").smiles) == ["CCO", "CCN"]


def test_a_fragment_is_capped_with_hydrogens_where_it_was_cut() -> None:
    # 1-phenylimidazole is cut at its N-aryl bond; the ring nitrogen that lost its phenyl becomes [nH]
    fragments = Chem.GetMolFrags(BRICS.BreakBRICSBonds(Chem.MolFromSmiles("c1ccc(cc1)n1ccnc1")), asMols=True)
    assert sorted(capped_fragment(f) for f in fragments) == ["c1c[nH]cn1", "c1ccccc1"]


def test_brics_fragments_are_distinct_whole_molecules_fixed_by_the_seed() -> None:
    molecules = ["CC(=O)Nc1ccc(O)cc1", "Cn1ccnc1C(=O)OCc1ccccc1", "O=C(Nc1ccccc1)c1ccc[nH]1", "not a smiles"]
    fragments = brics_fragments(molecules, 6, seed=0)
    assert len(set(fragments)) == 6
    # each is a whole molecule: no attachment point left, and it is RDKit's canonical SMILES of itself
    assert all(Chem.MolToSmiles(Chem.MolFromSmiles(f)) == f and "*" not in f for f in fragments)
    assert brics_fragments(molecules, 6, seed=0) == fragments
    # acetaminophen: acetyl | NH | phenol; the ester: methylimidazole | carbonyl | O | CH2 | phenyl; the amide:
    # carbonyl | NH | phenyl | pyrrole
    everything = {"CC=O", "N", "Oc1ccccc1", "Cn1ccnc1", "C=O", "O", "C", "c1ccccc1", "c1cc[nH]c1"}
    assert set(brics_fragments(molecules, 9, seed=0)) == everything
    with pytest.raises(ConfigError, match="data.source.fragments.*yield only 9 distinct"):
        brics_fragments(molecules, 10, seed=0)


def test_fragments_are_added_to_the_drawn_molecules_and_to_the_cache_key(moses: Path) -> None:
    plain = MosesDescriptors(molecules=None, valid_fraction=0.1)
    with_fragments = MosesDescriptors(molecules=None, valid_fraction=0.1, fragments=3)
    assert "fragments" not in plain.options()  # the caches of runs without fragments keep their keys
    assert with_fragments.options()["fragments"] == 3
    reader = with_fragments.open(moses.parent)
    assert reader.num_rows == len(SMILES) + 3
    assert list(reader.smiles[: len(SMILES)]) == SMILES
    assert list(reader.smiles[len(SMILES) :]) == brics_fragments(SMILES, 3, seed=0)
    for key, value in (("fragments", -1), ("seed", -1)):
        with pytest.raises(ConfigError, match=f"data.source.{key}"):
            MosesDescriptors(**{key: value})


def test_fingerprint_targets_follow_the_descriptors_as_log1p_of_the_folded_morgan_counts(moses: Path) -> None:
    plain = MosesDescriptors(molecules=None, valid_fraction=0.1)
    source = MosesDescriptors(molecules=None, valid_fraction=0.1, fingerprint_targets=256)
    descriptors = plain.spec.target_names
    assert source.spec.target_names == (*descriptors, *(f"ecfp/{j}" for j in range(256)))
    assert "fingerprint_targets" not in plain.options()  # the caches of runs without them keep their keys
    assert source.options()["fingerprint_targets"] == 256
    assert source.origin() == "MOSES train.csv.gz (rdkit2d descriptor and 256 ECFP count targets)"
    graphs = dict(source.open(moses.parent).graphs(0, len(SMILES)))
    assert graphs[3] == "RDKit cannot parse"
    for row in (1, 2, 8):
        mol = Chem.MolFromSmiles(SMILES[row])
        targets = graphs[row].y.reshape(-1)
        np.testing.assert_array_equal(
            targets[: len(descriptors)], normalised_descriptors(mol)[descriptor_reference().informative]
        )
        # RDKit hashes a substructure to its identifier modulo the positions, and 256 divides 2048: position j of
        # the 256 counts the substructures at positions j, j + 256, ... of the 2048
        folded = ecfp_counts(mol).astype(np.float32).reshape(8, 256).sum(axis=0)
        assert folded.sum() > 0
        np.testing.assert_array_equal(targets[len(descriptors) :], np.log1p(folded))
    for value in (-1, 2049, 2.5):
        with pytest.raises(ConfigError, match="data.source.fingerprint_targets"):
            MosesDescriptors(fingerprint_targets=value)
