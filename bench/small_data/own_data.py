"""What a table of your own molecules costs before training, stage by stage, in one run.

    python bench/small_data/own_data.py [--molecules 50000]

Writes a CSV of QM9 molecules (qm9pack) with two targets, then times, in CPU seconds of this
process (the machine is shared):

* reading and checking the table (``SmilesTable.open`` with a random split: columns, numbers,
  duplicates, training targets);
* the Bemis-Murcko scaffold split alone (RDKit, serial, in the main process);
* featurising and caching in one process (``build_store`` with ``num_workers=0``: the molecular
  pipeline shared with QM9 and PCQM4Mv2; with W workers it divides by W);

and prints molecules per CPU second of each, and each stage's cost relative to featurising.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from graphormer_urpe.constants import HARTREE_TO_EV
from graphormer_urpe.data.cache import CacheSpec, build_store
from graphormer_urpe.data.sources import SmilesTable
from graphormer_urpe.data.sources.molecules import qm9pack_csvs
from graphormer_urpe.data.sources.tables import scaffold_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--molecules", type=int, default=50_000)
    options = parser.parse_args()
    columns = ["SMILES", "HOMO_LUMO_gap_au", "Dipole_debye"]
    qm9 = pd.concat([pd.read_csv(p, usecols=columns) for p in qm9pack_csvs()], ignore_index=True)
    qm9 = qm9.head(options.molecules)
    table = pd.DataFrame(
        {"smiles": qm9["SMILES"], "gap_ev": qm9["HOMO_LUMO_gap_au"] * HARTREE_TO_EV, "mu_debye": qm9["Dipole_debye"]}
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "molecules.csv"
        table.to_csv(path, index=False)
        source = SmilesTable(str(path), targets=["gap_ev", "mu_debye"], split="random")
        started = time.process_time()
        rows = source.open(Path(tmp))
        read = time.process_time() - started
        started = time.process_time()
        scaffold_split(rows.smiles.tolist(), (0.8, 0.1, 0.1))
        scaffold = time.process_time() - started
        spec = CacheSpec(source.spec)
        started = time.process_time()
        build_store(rows, Path(tmp) / "cache", {}, spec, rows.splits, num_workers=0, chunk_size=10_000)
        featurise = time.process_time() - started
    count = len(table)
    print(f"{count:,} QM9 molecules, CPU seconds of one process")
    print(f"{'stage':<48} {'CPU s':>8} {'molecules/CPU s':>16} {'vs featurising':>15}")
    for name, seconds in (
        ("read + check the table (random split)", read),
        ("scaffold split (Bemis-Murcko)", scaffold),
        ("featurise + structure + cache, 1 process", featurise),
    ):
        print(f"{name:<48} {seconds:8.2f} {count / seconds:16,.0f} {seconds / featurise:14.2f}x")


if __name__ == "__main__":
    main()
