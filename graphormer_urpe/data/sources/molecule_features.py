"""Molecule-level features of a SMILES table: RDKit 2D descriptors and Morgan (ECFP) count fingerprints computed
from each SMILES, and numeric columns of the table, one vector of M values per molecule
(``GraphBatch.molecule_features``). See docs/own-data.md.

The vector is ``[normalised descriptors (K), log1p fingerprint counts (F), feature columns (C)]``, NaN where a value
is missing. The cache stores it as computed; the model standardises the columns with the training split's
statistics (:func:`feature_statistics`, stored in the checkpoint; descriptors and fingerprints are on one scale
already) and reads a missing value as 0 (for a descriptor, the reference median)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from rdkit import Chem

from graphormer_urpe.data.sources.descriptors import (
    DESCRIPTOR_PREFIX,
    DESCRIPTOR_SET,
    DESCRIPTOR_TAILS,
    descriptor_features,
    descriptor_reference,
)
from graphormer_urpe.data.sources.fingerprints import (
    ECFP_BITS,
    ECFP_RADIUS,
    FINGERPRINT_PREFIX,
    FINGERPRINT_SET,
    fingerprint_features,
    fingerprint_names,
)
from graphormer_urpe.errors import ConfigError

#: Prefixes of the features that are on one scale as computed (not standardised by :func:`feature_statistics`).
SCALED_PREFIXES = (DESCRIPTOR_PREFIX, FINGERPRINT_PREFIX)


@dataclass(frozen=True)
class MoleculeFeatures:
    """Which molecule-level features a SMILES table gives: a descriptor set (or None), feature columns and a
    fingerprint (or None).

    Example:
        >>> features = MoleculeFeatures("rdkit2d", ("logS",))
        >>> features.names[0], features.names[-1], len(features.names)
        ('rdkit2d/MaxAbsEStateIndex', 'logS', 218)
        >>> with_ecfp = MoleculeFeatures("rdkit2d", ("logS",), "ecfp")
        >>> with_ecfp.names[217], with_ecfp.names[-2], len(with_ecfp.names)
        ('ecfp/0', 'ecfp/2047', 2266)
        >>> MoleculeFeatures().names  # off: no feature, M = 0
        ()
    """

    descriptors: str | None = None
    columns: tuple[str, ...] = ()
    fingerprints: str | None = None

    def __post_init__(self) -> None:
        if self.descriptors not in (None, DESCRIPTOR_SET):
            raise ConfigError(
                "data.source.descriptors",
                self.descriptors,
                f"must be {DESCRIPTOR_SET} (RDKit's 2D descriptors) or null (none)",
            )
        if self.fingerprints not in (None, FINGERPRINT_SET):
            raise ConfigError(
                "data.source.fingerprints",
                self.fingerprints,
                f"must be {FINGERPRINT_SET} (Morgan count fingerprints, radius {ECFP_RADIUS}, "
                f"{ECFP_BITS} positions) or null (none)",
            )
        columns = self.columns
        if isinstance(columns, str) or not all(isinstance(name, str) and name for name in columns):
            raise ConfigError("data.source.feature_columns", columns, "must be a list of column names, e.g. [logP]")
        if len(set(columns)) != len(columns) or any(name.startswith(SCALED_PREFIXES) for name in columns):
            raise ConfigError(
                "data.source.feature_columns",
                list(columns),
                f"must name distinct columns, none starting with {' or '.join(SCALED_PREFIXES)}",
            )
        object.__setattr__(self, "columns", tuple(columns))

    @property
    def names(self) -> tuple[str, ...]:
        """The M feature names, as ``DataSpec.molecule_features`` records them."""
        descriptors = [DESCRIPTOR_PREFIX + name for name in descriptor_reference().names] if self.descriptors else []
        fingerprints = fingerprint_names() if self.fingerprints else ()
        return (*descriptors, *fingerprints, *self.columns)

    def options(self) -> dict:
        """The part of a cache key that the features decide; empty when off (so other caches keep their keys)."""
        options: dict = {}
        if self.descriptors:
            options |= {
                "descriptors": self.descriptors,
                "descriptor_reference_sha1": descriptor_reference().sha1,
                "descriptor_tails": DESCRIPTOR_TAILS,
            }
        if self.fingerprints:
            options |= {"fingerprints": self.fingerprints, "ecfp_radius": ECFP_RADIUS, "ecfp_bits": ECFP_BITS}
        if self.columns:
            options["feature_columns"] = list(self.columns)
        return options

    def values(self, smiles: Sequence[object], columns: np.ndarray, max_nodes: int | None = None) -> np.ndarray | None:
        """The features of R molecules: descriptors and fingerprints from each SMILES (NaN for one RDKit cannot parse,
        and for one of more than ``max_nodes`` atoms: :func:`to_describe`), then the columns as given; None when
        there is no feature.

        Shapes: columns (R, C) float -> (R, M) float32, NaN where missing."""
        if not self.names:
            return None
        parts = []
        molecules = [to_describe(text, max_nodes) for text in smiles]
        if self.descriptors:
            parts.append(computed(molecules, len(descriptor_reference().names), descriptor_features))
        if self.fingerprints:
            parts.append(computed(molecules, ECFP_BITS, fingerprint_features))
        parts.append(np.asarray(columns, dtype=np.float32).reshape(len(smiles), len(self.columns)))
        return np.concatenate(parts, axis=1)


def computed(
    molecules: Sequence[Chem.Mol | None], width: int, features: Callable[[Chem.Mol], np.ndarray]
) -> np.ndarray:
    """``features(mol)`` of each molecule, NaN for a missing one (None). Shapes: (R, width) float32."""
    values = np.full((len(molecules), width), np.nan, dtype=np.float32)
    for k, mol in enumerate(molecules):
        if mol is not None:
            values[k] = features(mol)
    return values


def to_describe(smiles: object, max_nodes: int | None = None) -> Chem.Mol | None:
    """The molecule of ``smiles`` if its descriptors are worth computing: RDKit parses it, into at least one and at
    most ``max_nodes`` atoms (None: any number). :func:`~graphormer_urpe.data.sources.featurize.molecule_graphs` gives
    the others their reason and the cache skips those above ``max_nodes`` ("1000 nodes > max_nodes=512"), so no time
    goes to them: RDKit's descriptors of a chain of 400 atoms take seconds, of 1,000 minutes."""
    mol = Chem.MolFromSmiles(smiles) if isinstance(smiles, str) and smiles.strip() else None
    if mol is None or not 0 < mol.GetNumAtoms() <= (max_nodes or mol.GetNumAtoms()):
        return None
    return mol


#: No molecule-level feature (M = 0): every dataset but a SMILES table configured with some.
NO_FEATURES = MoleculeFeatures()


def feature_statistics(names: Sequence[str], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation that standardise each feature: the training values' (NaN ignored, the std at
    least 1e-6) for a feature column, 0 and 1 for a descriptor (already on one scale: [-1, 1] and its tails) and for
    a fingerprint position (``log1p`` of a count).

    Shapes: values (G, M) -> two (M,) float64. ValueError naming a feature column without a known value."""
    values = np.asarray(values, dtype=np.float64).reshape(-1, len(names))
    mean, std = np.zeros(len(names)), np.ones(len(names))
    for k, name in enumerate(names):
        if name.startswith(SCALED_PREFIXES):
            continue
        known = values[:, k][np.isfinite(values[:, k])]
        if not len(known):
            raise ValueError(
                f"feature column '{name}' has no value in the training split, so it cannot be "
                "standardised; fill it or remove it from data.source.feature_columns"
            )
        mean[k], std[k] = known.mean(), max(known.std(), 1e-6)
    return mean, std
