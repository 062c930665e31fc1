"""Molecular datasets given as SMILES plus targets: one reader, featurised like PCQM4Mv2."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from graphormer_urpe.constants import HARTREE_TO_EV
from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.sources.base import GraphSource, seeded_split
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB, FEATURIZER_VERSION, molecule_graphs
from graphormer_urpe.errors import DatasetMissing, check_int


class MoleculeTable:
    """SMILES strings and their targets, held once and shared (copy-on-write) with workers.

    Args:
        smiles: R SMILES strings (NaN or empty entries are reported, not parsed).
        targets: (R, Y) float32.
    """

    def __init__(self, smiles: Sequence[object], targets: np.ndarray) -> None:
        self.smiles = np.asarray(smiles, dtype=object)
        self.targets = np.asarray(targets, dtype=np.float32).reshape(len(self.smiles), -1)
        self.num_rows = len(self.smiles)

    def graphs(self, start: int, stop: int) -> Iterator[tuple[int, RawGraph | str]]:
        """Rows ``start .. stop - 1``, featurised together (one chunk's memory, see ``molecule_graphs``)."""
        yield from zip(range(start, stop), molecule_graphs(self.smiles[start:stop], self.targets[start:stop]))


def qm9pack_csvs() -> list[Path]:
    """The QM9 CSV files inside the installed ``qm9pack``, found without importing it.

    ``import qm9pack`` fails in fresh environments (its ``__init__`` needs ``pkg_resources``), so
    the package directory is located with ``importlib.util.find_spec``.
    """
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetMissing("the embedded QM9 data needs the PyPI package qm9pack: pip install qm9pack")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = sorted(data.glob("qm9_part*.csv"))
    if not files:
        raise DatasetMissing(f"qm9pack is installed but {data} holds no qm9_part*.csv; reinstall qm9pack")
    return files


class MoleculeSource(GraphSource):
    """A dataset of SMILES strings and targets, featurised exactly like PCQM4Mv2.

    Subclasses (QM9, PCQM4Mv2, SMILES tables) return a :class:`MoleculeTable` from ``open``;
    the featuriser and RDKit versions are part of every cache key, since RDKit releases change
    which SMILES parse.
    """

    node_vocab = ATOM_VOCAB
    edge_vocab = BOND_VOCAB

    def options(self) -> dict:
        return {"featurizer": FEATURIZER_VERSION}


class QM9Gap(MoleculeSource):
    """QM9 HOMO-LUMO gap in eV (DFT, converted from hartree), the embedded offline default.

    130,831 molecules from the ``qm9pack`` package, featurised with ogb's ``smiles2graph``
    features exactly as PCQM4Mv2, split 80/10/10 at random with a fixed seed.

    Args:
        seed: seed of the split.
        max_molecules: keep only the first N molecules (quick experiments and tests).
    """

    name = "qm9_gap"
    columns = ("SMILES", "HOMO_LUMO_gap_au")
    target_names = ("gap_ev",)

    def __init__(self, seed: int = 0, max_molecules: int | None = None) -> None:
        if max_molecules is not None:
            check_int("data.source.max_molecules", max_molecules, 1, hint=", or null (every molecule)")
        self.seed = seed
        self.max_molecules = max_molecules

    def options(self) -> dict:
        return {**super().options(), "seed": self.seed, "max_molecules": self.max_molecules}

    def ensure_raw(self, root: Path) -> None:
        qm9pack_csvs()

    def open(self, root: Path) -> MoleculeTable:
        frames = [pd.read_csv(path, usecols=list(self.columns), nrows=self.max_molecules) for path in qm9pack_csvs()]
        table = pd.concat(frames, ignore_index=True).iloc[: self.max_molecules]
        gap_ev = table["HOMO_LUMO_gap_au"].to_numpy(np.float64) * HARTREE_TO_EV
        return MoleculeTable(table["SMILES"].tolist(), gap_ev.reshape(-1, 1))

    def splits(self, root: Path, reader: MoleculeTable) -> dict[str, np.ndarray]:
        return seeded_split(reader.num_rows, self.seed)
