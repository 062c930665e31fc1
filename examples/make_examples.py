"""Write the example data shipped in examples/ from the QM9 molecules of the qm9pack package.

    python examples/make_examples.py

Deterministic (seeded sample, RDKit descriptors); rewrites:

* ``examples/qm9_sample.csv``: 500 QM9 molecules (a seeded sample of the 130,831) with
  ``smiles``, ``gap_ev`` (HOMO-LUMO gap, DFT, converted from hartree to eV), ``mu_debye``
  (dipole moment, D), ``polar`` (1 if the dipole moment is above 2.5 D, else 0) and ``rings``
  (RDKit ring count, 3 for three or more: classes 0..3). ``mu_debye`` and ``polar`` are left
  empty in every 25th row (20 rows) to show how missing targets are masked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from rdkit import Chem
from rdkit.Chem import rdMolDescriptors

EXAMPLES = Path(__file__).resolve().parent
sys.path.insert(0, str(EXAMPLES.parent))

from graphormer_urpe.constants import HARTREE_TO_EV  # noqa: E402
from graphormer_urpe.data.sources.molecules import qm9pack_csvs  # noqa: E402

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
    table = pd.DataFrame({
        "smiles": sample["SMILES"],
        "gap_ev": (sample["HOMO_LUMO_gap_au"] * HARTREE_TO_EV).round(4),
        "mu_debye": sample["Dipole_debye"],
        "polar": (sample["Dipole_debye"] > POLAR_DEBYE).astype("Int64"),
        "rings": np.minimum(rings, 3),
    })
    missing = np.arange(len(table)) % MISSING_EVERY == MISSING_EVERY - 1
    table.loc[missing, ["mu_debye", "polar"]] = pd.NA
    return table


if __name__ == "__main__":
    path = EXAMPLES / "qm9_sample.csv"
    qm9_sample().to_csv(path, index=False)
    print(f"wrote {path}")
