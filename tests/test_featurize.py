"""Molecule featurisation: identical to ogb's smiles2graph, and bad rows reported, not raised."""

from __future__ import annotations

import numpy as np
import pytest
from ogb.utils import smiles2graph

from graphormer_urpe.data.featurize import ATOM_VOCAB, BOND_VOCAB, molecule_graph

SMILES = [
    "C", "O=C1CC2CC(O2)C1=O", "CC(=O)CCC1CC1O", "c1ccccc1O", "C[C@H](N)C(=O)O", "[NH4+].[Cl-]",
    "F/C=C/F", "OC1=CC=CC=C1C(=O)[O-]", "C1=CC=C2C(=C1)C=CC3=CC=CC=C32", "[2H]C([2H])([2H])Br", "N#N",
]


@pytest.mark.parametrize("smiles", SMILES)
def test_features_equal_ogb_smiles2graph(smiles: str) -> None:
    ours = molecule_graph(smiles, np.zeros(1, np.float32))
    reference = smiles2graph(smiles)
    np.testing.assert_array_equal(ours.x, reference["node_feat"])
    np.testing.assert_array_equal(ours.edge_index, reference["edge_index"])
    np.testing.assert_array_equal(ours.edge_attr, reference["edge_feat"])
    assert (ours.x < np.array(ATOM_VOCAB)).all() and ours.edge_attr.shape[1] == len(BOND_VOCAB)


@pytest.mark.parametrize(("smiles", "reason"), [
    ("C1CC", "RDKit cannot parse"), ("not a molecule", "RDKit cannot parse"), ("", "empty SMILES"),
    ("   ", "empty SMILES"), (float("nan"), "empty SMILES"), (None, "empty SMILES"),
])
def test_bad_smiles_give_a_reason(smiles: object, reason: str) -> None:
    assert molecule_graph(smiles, np.zeros(1, np.float32)) == reason
