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
from graphormer_urpe.data.sources.featurize import (
    FEATURIZER_VERSION,
    molecule_graphs,
    molecule_spec,
    silence_rdkit,
)
from graphormer_urpe.data.sources.molecule_features import NO_FEATURES, MoleculeFeatures
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import ConfigError, DatasetMissing, check_int

#: Rows featurised at once, then handed on: the preprocessing progress moves every so many rows (RDKit's
#: descriptors of a hundred small molecules take about a second; making the graphs of 100 or of 10,000 rows at
#: once runs at the same speed).
ROWS_AT_ONCE = 100


class MoleculeTable:
    """SMILES strings (NaN or empty ones are reported, not parsed) and targets, shared copy-on-write with workers;
    with ``features``, each graph's molecule-level features, computed here in the preprocessing workers.

    Shapes: targets (R, Y) float32 for R SMILES; feature_columns (R, C) float, NaN where missing, for the C
    ``features.columns``."""

    def __init__(
        self,
        smiles: Sequence[object],
        targets: np.ndarray,
        features: MoleculeFeatures = NO_FEATURES,
        feature_columns: np.ndarray | None = None,
    ) -> None:
        self.smiles = np.asarray(smiles, dtype=object)
        self.targets = np.asarray(targets, dtype=np.float32).reshape(len(self.smiles), -1)
        self.num_rows = len(self.smiles)
        self.features = features
        self.feature_columns = np.zeros((self.num_rows, 0)) if feature_columns is None else feature_columns

    def worker_init(self) -> None:
        silence_rdkit()

    def graphs(self, start: int, stop: int, max_nodes: int | None = None) -> Iterator[tuple[int, RawGraph | str]]:
        for first in range(start, stop, ROWS_AT_ONCE):  # yielded as they are made: the progress bar counts them
            last = min(first + ROWS_AT_ONCE, stop)
            yield from zip(range(first, last), self.featurised(first, last, max_nodes))

    def featurised(self, start: int, stop: int, max_nodes: int | None) -> list[RawGraph | str]:
        """Rows ``start .. stop - 1`` as graphs (or reasons), with their molecule-level features (none computed for a
        molecule of more than ``max_nodes`` atoms, which the cache skips)."""
        smiles = self.smiles[start:stop]
        features = self.features.values(smiles, self.feature_columns[start:stop], max_nodes)
        return molecule_graphs(smiles, self.targets[start:stop], features)


def qm9pack_csvs() -> list[Path]:
    """The QM9 CSV files inside the installed ``qm9pack``, found without importing it (its ``__init__`` needs
    ``pkg_resources``, absent from fresh environments)."""
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetMissing("the embedded QM9 data needs the PyPI package qm9pack: pip install qm9pack")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = sorted(data.glob("qm9_part*.csv"))
    if not files:
        raise DatasetMissing(f"qm9pack is installed but {data} holds no qm9_part*.csv; reinstall qm9pack")
    return files


class MoleculeSource(GraphSource):
    """A dataset of SMILES strings and targets (a :class:`MoleculeTable`) with a :func:`molecule_spec`;
    the featuriser and RDKit versions are part of every cache key."""

    def options(self) -> dict:
        return {"featurizer": FEATURIZER_VERSION}


#: QM9's 12 standard targets (Gilmer et al., 2017, and MoleculeNet), as ``targets`` names them: the
#: ``qm9pack`` column and the factor to the unit in the name (energies in eV, from hartree).
QM9_TARGETS: dict[str, tuple[str, float]] = {
    "mu_debye": ("Dipole_debye", 1.0),
    "alpha_bohr3": ("Polarizability_bohr3", 1.0),
    "homo_ev": ("HOMO_au", HARTREE_TO_EV),
    "lumo_ev": ("LUMO_au", HARTREE_TO_EV),
    "gap_ev": ("HOMO_LUMO_gap_au", HARTREE_TO_EV),
    "r2_bohr2": ("R2_bohr2", 1.0),
    "zpve_ev": ("ZPVE_au", HARTREE_TO_EV),
    "u0_ev": ("InternalEnergy_0K_au", HARTREE_TO_EV),
    "u298_ev": ("InternalEnergy_298K_au", HARTREE_TO_EV),
    "h298_ev": ("Enthalphy_298K_au", HARTREE_TO_EV),
    "g298_ev": ("GibbsFreeEnergy_298K_au", HARTREE_TO_EV),
    "cv_cal_mol_k": ("Heatcapacity_Cv_cal_mol_K", 1.0),
}


class QM9(MoleculeSource):
    """QM9 (DFT properties of 130,831 small molecules) from ``qm9pack``, split 80/10/10 with a fixed seed whatever
    the targets. See docs/datasets.md.

    Args:
        targets: the properties to learn, in this order (names of :data:`QM9_TARGETS`).
        seed: seed of the split.
        max_molecules: keep only the first N molecules (quick experiments and tests).
    """

    name = "qm9"

    def __init__(self, targets: Sequence[str] = ("gap_ev",), seed: int = 0, max_molecules: int | None = None) -> None:
        if (
            isinstance(targets, str)
            or not targets
            or len(set(targets)) != len(targets)
            or not set(targets) <= set(QM9_TARGETS)
        ):
            raise ConfigError(
                "data.source.targets",
                targets if isinstance(targets, str) else list(targets),
                f"must be a list of distinct QM9 properties from {', '.join(QM9_TARGETS)}",
            )
        if max_molecules is not None:
            check_int("data.source.max_molecules", max_molecules, 1, hint=", or null (every molecule)")
        self.targets = tuple(targets)
        self.seed = seed
        self.max_molecules = max_molecules

    @property
    def spec(self) -> DataSpec:
        return molecule_spec(self.targets)

    def options(self) -> dict:
        return {
            **super().options(),
            "targets": list(self.targets),
            "seed": self.seed,
            "max_molecules": self.max_molecules,
        }

    def ensure_raw(self, root: Path) -> None:
        qm9pack_csvs()

    def open(self, root: Path) -> MoleculeTable:
        columns = ["SMILES", *(QM9_TARGETS[name][0] for name in self.targets)]
        frames = [pd.read_csv(path, usecols=columns, nrows=self.max_molecules) for path in qm9pack_csvs()]
        table = pd.concat(frames, ignore_index=True).iloc[: self.max_molecules]
        values = np.stack(
            [
                table[column].to_numpy(np.float64) * factor
                for column, factor in (QM9_TARGETS[name] for name in self.targets)
            ],
            axis=1,
        )
        return MoleculeTable(table["SMILES"].tolist(), values)

    def splits(self, root: Path, reader: MoleculeTable) -> dict[str, np.ndarray]:
        return seeded_split(reader.num_rows, self.seed)
