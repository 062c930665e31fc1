"""Molecules to graphs with exactly ogb's ``smiles2graph`` features, without its crashes.

ogb's ``smiles2graph`` raises ``AttributeError`` on a SMILES RDKit cannot parse and parses every
string twice when wrapped in a check. :func:`molecule_graph` parses once, reports why a row cannot
be used, and builds the features with the same ogb functions (``atom_to_feature_vector``,
``bond_to_feature_vector``), so the arrays are identical to ``smiles2graph``'s (a test checks it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from ogb.utils.features import (
    atom_to_feature_vector,
    bond_to_feature_vector,
    get_atom_feature_dims,
    get_bond_feature_dims,
)
from rdkit import Chem, RDLogger, rdBase

#: Categorical vocabulary sizes of ogb's atom features (9 columns) and bond features (3 columns).
ATOM_VOCAB: tuple[int, ...] = tuple(get_atom_feature_dims())
BOND_VOCAB: tuple[int, ...] = tuple(get_bond_feature_dims())
#: Part of every molecular cache key: RDKit releases change which SMILES parse.
FEATURIZER_VERSION = f"ogb-smiles2graph/rdkit-{rdBase.rdkitVersion}"


class RawGraph(NamedTuple):
    """A graph before structural preprocessing (n nodes, e directed edges).

    Shapes:
        x: (n, F) int; edge_index: (2, e) int; edge_attr: (e, Fe) int; y: (Y,) float32.
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    y: np.ndarray


def silence_rdkit() -> None:
    """Stop RDKit from printing one error per bad SMILES; callers count and report them instead."""
    RDLogger.DisableLog("rdApp.*")


def molecule_graph(smiles: object, y: np.ndarray) -> RawGraph | str:
    """Featurise one molecule, or say why it cannot be used.

    Args:
        smiles: the SMILES string (pandas gives a float NaN for an empty cell).
        y: (Y,) float32 targets.

    Returns:
        A :class:`RawGraph`, or a short reason such as ``"RDKit cannot parse"``.
    """
    if not isinstance(smiles, str) or not smiles.strip():
        return "empty SMILES"
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return "RDKit cannot parse"
    if mol.GetNumAtoms() == 0:
        return "no atoms"
    x = np.array([atom_to_feature_vector(atom) for atom in mol.GetAtoms()], dtype=np.int64)
    bonds = mol.GetBonds()
    src = np.array([b.GetBeginAtomIdx() for b in bonds], dtype=np.int64)
    dst = np.array([b.GetEndAtomIdx() for b in bonds], dtype=np.int64)
    bond_features = np.array([bond_to_feature_vector(b) for b in bonds], dtype=np.int64).reshape(-1, len(BOND_VOCAB))
    # both directions of every bond, interleaved as ogb does: (i, j), (j, i), ...
    edge_index = np.stack([np.stack([src, dst], 1), np.stack([dst, src], 1)], 1).reshape(-1, 2).T
    edge_attr = np.repeat(bond_features, 2, axis=0)
    return RawGraph(x=x, edge_index=edge_index, edge_attr=edge_attr, y=y)
