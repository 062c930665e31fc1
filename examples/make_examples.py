"""Write the example data shipped in examples/ from the QM9 molecules of the qm9pack package.

    python examples/make_examples.py

Deterministic (seeded sample, RDKit descriptors); rewrites:

* ``examples/qm9_sample.csv``: 500 QM9 molecules (a seeded sample of the 130,831) with
  ``smiles``, ``gap_ev`` (HOMO-LUMO gap, DFT, converted from hartree to eV), ``mu_debye``
  (dipole moment, D), ``polar`` (1 if the dipole moment is above 2.5 D, else 0) and ``rings``
  (RDKit ring count, 3 for three or more: classes 0..3). ``mu_debye`` and ``polar`` are left
  empty in every 25th row (20 rows) to show how missing targets are masked.
* ``examples/tu/QM9SAMPLE/raw/``: the same 500 molecules as graphs in the TU Dortmund layout that
  ``torch_geometric.datasets.TUDataset`` reads (heavy atoms as nodes, bonds in both directions):
  node labels = atomic number, node attributes = Gasteiger partial charge, edge labels = bond
  type (1 single, 2 double, 3 triple, 4 aromatic), edge attributes = electronegativity difference
  (Pauling) from the edge's source to its target atom (signed: the two directions differ), graph
  attributes = HOMO-LUMO gap in eV.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from rdkit import Chem
from rdkit.Chem import AllChem, rdMolDescriptors

EXAMPLES = Path(__file__).resolve().parent
sys.path.insert(0, str(EXAMPLES.parent))

from graphormer_urpe.constants import HARTREE_TO_EV  # noqa: E402
from graphormer_urpe.data.sources.molecules import qm9pack_csvs  # noqa: E402
from graphormer_urpe.testing.tu_format import TUGraph, write_tu_dataset  # noqa: E402

MOLECULES = 500
POLAR_DEBYE = 2.5
MISSING_EVERY = 25


def qm9_sample() -> pd.DataFrame:
    """The example table: a seeded sample of QM9 with two regression targets and two labels."""
    columns = ["SMILES", "HOMO_LUMO_gap_au", "Dipole_debye"]
    qm9 = pd.concat([pd.read_csv(path, usecols=columns) for path in qm9pack_csvs()], ignore_index=True)
    rows = np.sort(np.random.default_rng(0).choice(len(qm9), MOLECULES, replace=False))
    sample = qm9.iloc[rows].reset_index(drop=True)
    rings = [rdMolDescriptors.CalcNumRings(Chem.MolFromSmiles(s)) for s in sample["SMILES"]]
    table = pd.DataFrame(
        {
            "smiles": sample["SMILES"],
            "gap_ev": (sample["HOMO_LUMO_gap_au"] * HARTREE_TO_EV).round(4),
            "mu_debye": sample["Dipole_debye"],
            "polar": (sample["Dipole_debye"] > POLAR_DEBYE).astype("Int64"),
            "rings": np.minimum(rings, 3),
        }
    )
    missing = np.arange(len(table)) % MISSING_EVERY == MISSING_EVERY - 1
    table.loc[missing, ["mu_debye", "polar"]] = pd.NA
    return table


#: TU edge label of each RDKit bond type.
BOND_LABELS = {Chem.BondType.SINGLE: 1, Chem.BondType.DOUBLE: 2, Chem.BondType.TRIPLE: 3, Chem.BondType.AROMATIC: 4}
#: Pauling electronegativity of QM9's heavy elements.
PAULING = {6: 2.55, 7: 3.04, 8: 3.44, 9: 3.98}


def tu_graph(smiles: str, gap_ev: float) -> TUGraph:
    """One molecule as a TU graph (heavy atoms; every bond in both directions)."""
    mol = Chem.MolFromSmiles(smiles)
    AllChem.ComputeGasteigerCharges(mol)
    bonds = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx(), BOND_LABELS[b.GetBondType()]) for b in mol.GetBonds()]
    pairs = np.array([(i, j) for i, j, _ in bonds] + [(j, i) for i, j, _ in bonds], dtype=np.int64).reshape(-1, 2)
    chi = np.array([PAULING[a.GetAtomicNum()] for a in mol.GetAtoms()])
    return TUGraph(
        num_nodes=mol.GetNumAtoms(),
        edge_index=pairs.T,
        node_labels=np.array([a.GetAtomicNum() for a in mol.GetAtoms()]),
        node_attributes=np.array([[a.GetDoubleProp("_GasteigerCharge")] for a in mol.GetAtoms()]),
        edge_labels=np.array([label for *_, label in bonds] * 2),
        edge_attributes=(chi[pairs[:, 1]] - chi[pairs[:, 0]]).reshape(-1, 1),
        graph_attributes=np.array([gap_ev]),
    )


if __name__ == "__main__":
    table = qm9_sample()
    path = EXAMPLES / "qm9_sample.csv"
    table.to_csv(path, index=False)
    print(f"wrote {path}")
    raw = EXAMPLES / "tu" / "QM9SAMPLE" / "raw"
    write_tu_dataset(raw, "QM9SAMPLE", [tu_graph(s, g) for s, g in zip(table["smiles"], table["gap_ev"])])
    print(f"wrote {raw}")
