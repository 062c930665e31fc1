"""Self-supervised pretraining for drug-like molecules: predict each molecule's RDKit 2D descriptors from its graph
(as chemprop's CheMeleon does with Mordred descriptors), on the MOSES corpus that the ``molsets`` wheel ships.
See docs/small-data.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from rdkit import Chem

from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.sources.base import seeded_split
from graphormer_urpe.data.sources.descriptors import (
    DESCRIPTOR_SET,
    descriptor_reference,
    moses_smiles,
    moses_smiles_file,
    normalised_descriptors,
)
from graphormer_urpe.data.sources.featurize import molecule_graphs, molecule_spec
from graphormer_urpe.data.sources.molecules import MoleculeSource, MoleculeTable
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import ConfigError, check_int

#: MOSES's training file: 1,584,663 molecules.
MOSES_TRAIN_SIZE = 1_584_663


class DescriptorTargets(MoleculeTable):
    """SMILES whose targets are their normalised descriptors that vary over MOSES, computed where the graphs are
    made (in the preprocessing workers, once, then cached with the graphs).

    Shapes: a graph's targets (1, K') float32 in [-1, 1], NaN where a descriptor is missing."""

    def __init__(self, smiles: list[str]) -> None:
        super().__init__(smiles, np.zeros((len(smiles), 0), dtype=np.float32))

    def graphs(self, start: int, stop: int) -> Iterator[tuple[int, RawGraph | str]]:
        informative = descriptor_reference().informative
        targets = np.full((stop - start, len(informative)), np.nan, dtype=np.float32)
        for k, smiles in enumerate(self.smiles[start:stop]):
            mol = Chem.MolFromSmiles(smiles) if smiles else None
            if mol is not None:  # an unparsable SMILES gets its reason from molecule_graphs
                targets[k] = normalised_descriptors(mol)[informative]
        yield from zip(range(start, stop), molecule_graphs(self.smiles[start:stop], targets))


class MosesDescriptors(MoleculeSource):
    """MOSES molecules (Polykovskiy et al. 2020; drug-like molecules of ZINC, 250-350 Da, 8-27 heavy atoms) with
    their :data:`~graphormer_urpe.data.sources.descriptors.DESCRIPTOR_SET` descriptors that vary over MOSES as
    regression targets, already on one scale (in [-1, 1]: train with ``normalize_targets: false``).

    Args:
        molecules: molecules drawn (with ``seed``) from MOSES's 1,584,663 training molecules; null takes them all.
        valid_fraction: share of the drawn molecules held out to validate, and the same share to test.
        seed: seed of the draw and of the split.
    """

    name = "moses_descriptors"

    def __init__(self, molecules: int | None = 50_000, valid_fraction: float = 0.02, seed: int = 0) -> None:
        if molecules is not None:
            check_int("data.source.molecules", molecules, 100, MOSES_TRAIN_SIZE, hint=", or null (every molecule)")
        if not 0.0 < valid_fraction < 0.25:
            raise ConfigError("data.source.valid_fraction", valid_fraction, "must be a share in (0, 0.25), e.g. 0.02")
        self.molecules = molecules
        self.valid_fraction = valid_fraction
        self.seed = seed

    @property
    def spec(self) -> DataSpec:
        reference = descriptor_reference()
        return molecule_spec([reference.names[k] for k in reference.informative])

    def origin(self) -> str:
        return f"{moses_smiles_file('train')} ({DESCRIPTOR_SET} descriptor targets)"

    def options(self) -> dict:
        return {**super().options(), "molecules": self.molecules, "valid_fraction": self.valid_fraction,
                "seed": self.seed, "descriptors": DESCRIPTOR_SET, "reference_sha1": descriptor_reference().sha1}

    def ensure_raw(self, root: Path) -> None:
        moses_smiles_file("train")

    def open(self, root: Path) -> DescriptorTargets:
        smiles = moses_smiles("train")
        if self.molecules is not None and self.molecules < len(smiles):
            rows = np.sort(np.random.default_rng(self.seed).choice(len(smiles), size=self.molecules, replace=False))
            smiles = [smiles[row] for row in rows]
        return DescriptorTargets(smiles)

    def splits(self, root: Path, reader: DescriptorTargets) -> dict[str, np.ndarray]:
        return seeded_split(reader.num_rows, self.seed, (1.0 - 2 * self.valid_fraction, self.valid_fraction))
