"""Molecule featurisation: identical to ogb's smiles2graph, and bad rows reported, not raised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ogb.utils import smiles2graph
from rdkit import Chem, RDConfig, RDLogger

from graphormer_urpe.data.sources import featurize
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB, molecule_graph, molecule_graphs
from graphormer_urpe.data.sources.molecules import qm9pack_csvs

SMILES = [
    "C",
    "O=C1CC2CC(O2)C1=O",
    "CC(=O)CCC1CC1O",
    "c1ccccc1O",
    "C[C@H](N)C(=O)O",
    "[NH4+].[Cl-]",
    "F/C=C/F",
    "OC1=CC=CC=C1C(=O)[O-]",
    "C1=CC=C2C(=C1)C=CC3=CC=CC=C32",
    "[2H]C([2H])([2H])Br",
    "N#N",
]


@pytest.mark.parametrize("smiles", SMILES)
def test_features_equal_ogb_smiles2graph(smiles: str) -> None:
    ours = molecule_graph(smiles, np.zeros(1, np.float32))
    reference = smiles2graph(smiles)
    np.testing.assert_array_equal(ours.x, reference["node_feat"])
    np.testing.assert_array_equal(ours.edge_index, reference["edge_index"])
    np.testing.assert_array_equal(ours.edge_attr, reference["edge_feat"])
    assert (ours.x < np.array(ATOM_VOCAB)).all() and ours.edge_attr.shape[1] == len(BOND_VOCAB)


@pytest.mark.parametrize(
    ("smiles", "reason"),
    [
        ("C1CC", "RDKit cannot parse"),
        ("not a molecule", "RDKit cannot parse"),
        ("", "empty SMILES"),
        ("   ", "empty SMILES"),
        (float("nan"), "empty SMILES"),
        (None, "empty SMILES"),
    ],
)
def test_bad_smiles_give_a_reason(smiles: object, reason: str) -> None:
    assert molecule_graph(smiles, np.zeros(1, np.float32)) == reason


def nci_and_qm9_smiles() -> list[str]:
    """~5,000 drug-like NCI molecules shipped with RDKit (charges, stereo, radicals, metals, salts)
    and 2,000 QM9 molecules."""
    nci = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"
    qm9 = pd.read_csv(qm9pack_csvs()[0], usecols=["SMILES"], nrows=2000)["SMILES"].tolist()
    return [line.split()[0] for line in nci.read_text().splitlines() if line.strip()] + qm9


@pytest.mark.slow
def test_thousands_of_molecules_equal_ogb_in_one_batch() -> None:
    """The batched path the cache uses gives ogb's arrays for every parseable molecule, and the
    same reason as one-by-one featurisation for the others."""
    smiles = nci_and_qm9_smiles() + SMILES + ["[Fe+3]", "*C", "[CH2]", "[U]", "[He]", "C[C@@]1(N)CC1", "[H][H]"]
    RDLogger.DisableLog("rdApp.*")
    graphs = molecule_graphs(smiles, np.arange(len(smiles), dtype=np.float32).reshape(-1, 1))
    parsed = 0
    for k, (text, graph) in enumerate(zip(smiles, graphs)):
        if Chem.MolFromSmiles(text) is None:
            assert graph == "RDKit cannot parse"
            continue
        reference = smiles2graph(text)
        for ours, theirs in (
            (graph.x, reference["node_feat"]),
            (graph.edge_index, reference["edge_index"]),
            (graph.edge_attr, reference["edge_feat"]),
        ):
            assert ours.dtype == theirs.dtype == np.int64 and ours.shape == theirs.shape
            np.testing.assert_array_equal(ours, theirs, err_msg=text)
        assert graph.y[0] == k
        parsed += 1
    assert parsed > 6900


def test_one_molecule_and_a_batch_agree() -> None:
    batch = molecule_graphs(SMILES + ["C1CC", ""], np.zeros((len(SMILES) + 2, 1)))
    for text, graph in zip(SMILES + ["C1CC", ""], batch):
        alone = molecule_graph(text, np.zeros(1, np.float32))
        assert type(alone) is type(graph)
        if isinstance(graph, str):
            assert alone == graph
        else:
            np.testing.assert_array_equal(alone.x, graph.x)
            np.testing.assert_array_equal(alone.edge_attr, graph.edge_attr)


def test_a_value_ogb_would_refuse_is_reported() -> None:
    """ogb calls list.index for bond stereo: a label outside its list (RDKit's atropisomer labels)
    raises in ogb; here the lookup marks it, and the molecule is reported, not featurised."""
    stereo = int(Chem.rdchem.BondStereo.STEREOATROPCW)
    indices = featurize._BOND_TABLES(np.array([[1], [stereo], [0]]))
    assert indices[1, 0] == featurize._REJECTED
    assert featurize._rejection(indices[:, 0], featurize._BOND_COLUMN_NAMES) == "bond stereo outside ogb's vocabulary"
    unusual = featurize._ATOM_TABLES(np.array([[0], [8], [11], [-6], [9], [5], [8], [0], [1]]))
    # unknown element, chirality, degree, charge, H count, radicals, hybridisation: ogb's "misc"
    np.testing.assert_array_equal(unusual[:7, 0], np.array(ATOM_VOCAB[:7]) - 1)
