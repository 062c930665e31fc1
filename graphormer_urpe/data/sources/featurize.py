"""Molecules to graphs with exactly ogb's ``smiles2graph`` features, about twice as fast and never raising: a molecule
RDKit cannot parse, without atoms, or with a value ogb's featuriser raises on gets a reason. See docs/ogb-lsc.md."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from ogb.utils.features import allowable_features, get_atom_feature_dims, get_bond_feature_dims
from rdkit import Chem, RDLogger, rdBase

from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.lsc_formats import SubmissionFormat
from graphormer_urpe.data.spec import DataSpec, TargetKind

#: Categorical vocabulary sizes of ogb's atom features (9 columns) and bond features (3 columns).
ATOM_VOCAB: tuple[int, ...] = tuple(get_atom_feature_dims())
BOND_VOCAB: tuple[int, ...] = tuple(get_bond_feature_dims())
#: Part of every molecular cache key: RDKit releases change which SMILES parse.
FEATURIZER_VERSION = f"ogb-smiles2graph/rdkit-{rdBase.rdkitVersion}"

#: Index of a value ogb's featuriser rejects (it calls ``list.index`` without a fallback).
_REJECTED = -1


def molecule_spec(
    target_names: Sequence[str],
    target_kind: TargetKind = "regression",
    num_outputs: int | None = None,
    submission: SubmissionFormat | None = None,
    molecule_features: Sequence[str] = (),
) -> DataSpec:
    """The :class:`DataSpec` of molecules with ogb's atom and bond vocabularies, one target row per molecule;
    ``num_outputs``: classes of a multi-class target (None: one output per target); ``molecule_features``: names
    of the molecule-level features."""
    return DataSpec(
        node_vocab=ATOM_VOCAB,
        edge_vocab=BOND_VOCAB,
        num_targets=len(target_names),
        num_outputs=len(target_names) if num_outputs is None else num_outputs,
        target_kind=target_kind,
        target_names=tuple(target_names),
        submission=submission,
        molecule_features=tuple(molecule_features),
    )


def silence_rdkit() -> None:
    """Stop RDKit from printing one error per bad SMILES; callers count and report them instead."""
    RDLogger.DisableLog("rdApp.*")


class _LookupTables:
    """ogb's ``allowable_features`` lists (``columns`` from :func:`_column`) as one flat integer table.

    Column c maps a raw integer v (RDKit number, enum value or bool) to ``table[start[c] + v - low[c]]`` when
    ``low[c] <= v < low[c] + size[c]``, else to ``table[start[c] + size[c]]``: ogb's ``misc`` index where ogb
    uses ``safe_index``, :data:`_REJECTED` where it uses ``list.index`` (and would raise).
    """

    def __init__(self, columns: Sequence[tuple[list, dict[int, object], bool]]) -> None:
        tables = []  # per column: the index of every raw value from min(keys) to max(keys), then the fallback
        for allowed, keys, has_fallback in columns:
            fallback = len(allowed) - 1 if has_fallback else _REJECTED
            tables.append(
                np.array(
                    [
                        allowed.index(keys[k]) if k in keys and keys[k] in allowed else fallback
                        for k in range(min(keys), max(keys) + 1)
                    ]
                    + [fallback],
                    dtype=np.int64,
                )
            )
        self.table = np.concatenate(tables)
        self.low = np.array([min(keys) for _, keys, _ in columns], dtype=np.int64)[:, None]
        self.size = np.array([len(table) - 1 for table in tables], dtype=np.int64)[:, None]
        self.start = np.cumsum([0] + [len(table) for table in tables[:-1]], dtype=np.int64)[:, None]

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        """ogb indices of raw values. (C, k) int64 -> (C, k) int64"""
        position = raw - self.low
        inside = (position >= 0) & (position < self.size)
        return self.table[np.where(inside, self.start + position, self.start + self.size)]


def _column(name: str, keys: dict[int, object] | type | None = None, misc: bool = True) -> tuple:
    """ogb's list ``possible_<name>_list``, raw integer -> the entry it stands for (from an RDKit enum, a dict, or
    None: the list's own ints), and whether ogb falls back to ``misc`` for values not in the list."""
    allowed = allowable_features[f"possible_{name}_list"]
    if keys is None:
        keys = {v: v for v in allowed if isinstance(v, int) and not isinstance(v, bool)}
    elif isinstance(keys, type):
        keys = {int(value): str(member) for value, member in keys.values.items()}
    return allowed, keys, misc


_BOOL_KEYS: dict[int, object] = {0: False, 1: True}

# Atom columns in ogb's order. Total degree is not read per atom: it is the bond count of the atom
# (from the bond list) plus its hydrogens, which is how RDKit defines GetTotalDegree.
_ATOM_TABLES = _LookupTables(
    [
        _column("atomic_num"),
        _column("chirality", Chem.rdchem.ChiralType),
        _column("degree"),
        _column("formal_charge"),
        _column("numH"),
        _column("number_radical_e"),
        _column("hybridization", Chem.rdchem.HybridizationType),
        _column("is_aromatic", _BOOL_KEYS, False),
        _column("is_in_ring", _BOOL_KEYS, False),
    ]
)
_BOND_TABLES = _LookupTables(
    [
        _column("bond_type", Chem.rdchem.BondType),
        _column("bond_stereo", Chem.rdchem.BondStereo, False),
        _column("is_conjugated", _BOOL_KEYS, False),
    ]
)
_ATOM_COLUMN_NAMES = (
    "atomic number",
    "chirality",
    "degree",
    "formal charge",
    "hydrogen count",
    "radical electrons",
    "hybridization",
    "aromaticity",
    "ring membership",
)
_BOND_COLUMN_NAMES = ("bond type", "bond stereo", "conjugation")

#: RDKit getters read for every atom, in the order of ``_ATOM_TABLES`` without the degree column.
_ATOM_GETTERS: tuple[Callable, ...] = (
    Chem.Atom.GetAtomicNum,
    Chem.Atom.GetChiralTag,
    Chem.Atom.GetFormalCharge,
    Chem.Atom.GetTotalNumHs,
    Chem.Atom.GetNumRadicalElectrons,
    Chem.Atom.GetHybridization,
    Chem.Atom.GetIsAromatic,
    Chem.Atom.IsInRing,
)
_NUM_HS = 3  # row of GetTotalNumHs in the raw atom values
_BOND_GETTERS: tuple[Callable, ...] = (
    Chem.Bond.GetBeginAtomIdx,
    Chem.Bond.GetEndAtomIdx,
    Chem.Bond.GetBondType,
    Chem.Bond.GetStereo,
    Chem.Bond.GetIsConjugated,
)


def molecule_graph(smiles: object, y: np.ndarray) -> RawGraph | str:
    """One molecule as ``ogb.utils.smiles2graph`` featurises it (edges in ogb's order: both directions of bond k at
    2k and 2k + 1), or a short reason such as ``"RDKit cannot parse"``; ``smiles`` may be NaN (an empty cell).

    Shapes: y (Y,) float32 targets."""
    return molecule_graphs([smiles], np.asarray(y).reshape(1, -1))[0]


def molecule_graphs(
    smiles: Sequence[object], targets: np.ndarray, molecule_features: np.ndarray | None = None
) -> list[RawGraph | str]:
    """:func:`molecule_graph` of R molecules, the numpy work done once for all: each :class:`RawGraph` holds views.

    Shapes: targets (R, Y); molecule_features (R, M) float32, or None (the graphs have none)."""
    atom_columns: list[list] = [[] for _ in _ATOM_GETTERS]
    bond_columns: list[list] = [[] for _ in _BOND_GETTERS]
    sizes: list[tuple[int, int] | str] = []  # (atoms, bonds) of each molecule, or why it has none
    for text in smiles:
        empty = not isinstance(text, str) or not text.strip()
        mol = None if empty else Chem.MolFromSmiles(text)
        if mol is None or mol.GetNumAtoms() == 0:
            if empty:
                sizes.append("empty SMILES")
            else:
                sizes.append("RDKit cannot parse" if mol is None else "no atoms")
            continue
        n, m = mol.GetNumAtoms(), mol.GetNumBonds()
        atoms = list(map(mol.GetAtomWithIdx, range(n)))
        bonds = list(map(mol.GetBondWithIdx, range(m)))
        for column, get in zip(atom_columns, _ATOM_GETTERS):
            column.extend(map(get, atoms))
        for column, get in zip(bond_columns, _BOND_GETTERS):
            column.extend(map(get, bonds))
        sizes.append((n, m))

    counts = np.array([size if isinstance(size, tuple) else (0, 0) for size in sizes], dtype=np.int64).reshape(-1, 2)
    node_ptr = np.concatenate([[0], np.cumsum(counts[:, 0])])
    bond_ptr = np.concatenate([[0], np.cumsum(counts[:, 1])])
    atom_raw = np.array(atom_columns, dtype=np.int64).reshape(len(_ATOM_GETTERS), -1)  # (8, sum n)
    bond_raw = np.array(bond_columns, dtype=np.int64).reshape(len(_BOND_GETTERS), -1)  # (5, sum m)
    # total degree = bonds of the atom + its hydrogens; bond ends are local atom ids, made global here
    bond_offset = np.repeat(node_ptr[:-1], counts[:, 1])
    ends = np.concatenate([bond_raw[0] + bond_offset, bond_raw[1] + bond_offset])
    degree = np.bincount(ends, minlength=atom_raw.shape[1]) + atom_raw[_NUM_HS]
    # (sum n, 9)
    x = np.ascontiguousarray(_ATOM_TABLES(np.concatenate([atom_raw[:2], degree[None], atom_raw[2:]])).T)
    bond_features = _BOND_TABLES(bond_raw[2:]).T  # (sum m, 3)
    edge_index = np.empty((2, 2 * bond_raw.shape[1]), dtype=np.int64)
    edge_index[:, 0::2] = bond_raw[:2]  # (i, j) then (j, i) for every bond, as ogb lists them
    edge_index[:, 1::2] = bond_raw[1::-1]
    edge_attr = np.repeat(bond_features, 2, axis=0)
    rejected: dict[int, str] = {}  # molecule -> why, for values ogb's featuriser would raise on
    for features, names, ptr in (
        (x, _ATOM_COLUMN_NAMES, node_ptr),
        (bond_features, _BOND_COLUMN_NAMES, bond_ptr),
    ):
        for row in np.flatnonzero((features == _REJECTED).any(axis=1)):
            molecule = int(np.searchsorted(ptr, row, side="right")) - 1
            rejected.setdefault(molecule, _rejection(features[row], names))

    targets = np.asarray(targets, dtype=np.float32).reshape(len(sizes), -1)
    graphs: list[RawGraph | str] = []
    for i, size in enumerate(sizes):
        if isinstance(size, str):
            graphs.append(size)
        elif i in rejected:
            graphs.append(rejected[i])
        else:
            n0, n1 = node_ptr[i], node_ptr[i + 1]
            e0, e1 = 2 * bond_ptr[i], 2 * bond_ptr[i + 1]  # two edges per bond
            features = None if molecule_features is None else molecule_features[i]
            graphs.append(
                RawGraph(
                    x=x[n0:n1],
                    edge_index=edge_index[:, e0:e1],
                    edge_attr=edge_attr[e0:e1],
                    y=targets[i],
                    molecule_features=features,
                )
            )
    return graphs


def _rejection(features: np.ndarray, names: Sequence[str]) -> str:
    """Why a row of ogb indices with a rejected entry cannot be used."""
    return f"{names[int(np.argmax(features == _REJECTED))]} outside ogb's vocabulary"
