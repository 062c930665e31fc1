"""Morgan (ECFP) count fingerprints: a molecule-level feature (``data.source.fingerprints: ecfp``), the descriptor
trees' inputs beside the RDKit descriptors, the Tanimoto kernel's (:mod:`graphormer_urpe.evaluation.kernel`), and
targets of the drug-like pretraining (``MosesDescriptors(fingerprint_targets=N)``, folded into N positions).

Each molecule's circular substructures of radius 0 to :data:`ECFP_RADIUS` (ECFP4, as MoleculeACE's and chemprop's
Morgan featurisers) are hashed into :data:`ECFP_BITS` positions; position j counts the substructures hashed there
(RDKit's ``GetCountFingerprintAsNumPy``, counts capped at 255). Fingerprints carry what activity cliffs turn on:
two molecules that differ by one substituent share all but a few positions.

As a model input a count c enters as ``log1p(c)`` (0 for an absent substructure, 0.69 for one, 1.1 for two, ...):
on the scale of the normalised descriptors, not standardised (a rare substructure's standard deviation over the
training rows would turn its first occurrence in a new molecule into a value of hundreds).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from rdkit import Chem

#: The fingerprint's name, as options and checkpoints spell it (``data.source.fingerprints``).
FINGERPRINT_SET = "ecfp"
#: Fingerprint feature names are ``ecfp/<position>``; a table's feature column may not start so.
FINGERPRINT_PREFIX = f"{FINGERPRINT_SET}/"
#: Radius of the largest substructure (ECFP4: diameter 4).
ECFP_RADIUS = 2
#: Positions of the hashed fingerprint.
ECFP_BITS = 2048


@functools.cache
def _generator(bits: int):  # RDKit's generator object is reused: building one costs as much as a hundred fingerprints
    from rdkit.Chem import rdFingerprintGenerator

    return rdFingerprintGenerator.GetMorganGenerator(radius=ECFP_RADIUS, fpSize=bits)


def ecfp_counts(mol: Chem.Mol, bits: int = ECFP_BITS) -> np.ndarray:
    """The Morgan count fingerprint of ``mol`` hashed into ``bits`` positions (RDKit takes each substructure's
    identifier modulo ``bits``, so fewer positions fold the same substructures together). Shapes: (bits,) uint8."""
    return np.minimum(_generator(bits).GetCountFingerprintAsNumPy(mol), 255).astype(np.uint8)


def ecfp_count_matrix(smiles: Sequence[str]) -> np.ndarray:
    """The count fingerprints of molecules RDKit parses (the tables' read has checked them).

    Shapes: (N, ECFP_BITS) uint8.

    Raises:
        ValueError: a SMILES RDKit cannot parse, named.
    """
    rows = np.zeros((len(smiles), ECFP_BITS), dtype=np.uint8)
    for k, text in enumerate(smiles):
        mol = Chem.MolFromSmiles(text)
        if mol is None:
            raise ValueError(f"RDKit cannot parse the SMILES {text!r}")
        rows[k] = ecfp_counts(mol)
    return rows


def fingerprint_features(mol: Chem.Mol, bits: int = ECFP_BITS) -> np.ndarray:
    """The fingerprint as a model input, and as the pretraining's targets: ``log1p`` of each count.
    Shapes: (bits,) float32."""
    return np.log1p(ecfp_counts(mol, bits).astype(np.float32))


def fingerprint_names(bits: int = ECFP_BITS) -> tuple[str, ...]:
    """The names of the fingerprint's positions, ``ecfp/0`` ... ``ecfp/2047`` (``ecfp/<bits - 1>``)."""
    return tuple(f"{FINGERPRINT_PREFIX}{position}" for position in range(bits))
