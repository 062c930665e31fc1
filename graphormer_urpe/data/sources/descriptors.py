"""Molecule-level RDKit 2D descriptors on one comparable scale: the model's optional molecule features and the
self-supervised targets of the drug-like pretraining. See docs/small-data.md.

RDKit's 2D descriptors span many orders of magnitude (``Ipc`` reaches 1e30, counts are small integers, charges are
fractions) and a few are infinite or fail for some molecules. Each descriptor is therefore mapped through its
empirical distribution on a fixed reference corpus (quantile normalisation, like chemprop's CDF-normalised
``v1_rdkit_2d_normalized``, with the CDF taken from data instead of a fitted family):

    u = ECDF_ref(x)          in [0, 1], ties at their mid-rank, linear between the stored quantiles,
                             0 below the reference's smallest value and 1 above its largest
    z = 2 u - 1              in [-1, 1]; the reference median maps to 0

The reference (``rdkit2d_reference.json`` beside this file) holds :data:`REFERENCE_QUANTILES` quantiles of every
descriptor over molecules of the MOSES training set. A descriptor that is constant there (a functional group MOSES
filtered out, such as nitro groups) still says whether a molecule lies below (-1), at (0) or above (+1) that value.

MOSES is lead-like (molecular weight 250-350): 94 % of FreeSolv's molecules weigh less than any MOSES molecule, so
the clipped scale above gives them all the same -1. As a *model input* (``tails="extend"``) a value outside the
reference's range [q_0, q_100] therefore keeps its order, on a logarithmic tail that continues the scale's mean
slope 2 / (q_100 - q_0):

    z = +1 + ln(1 + 2 (x - q_100) / (q_100 - q_0))    above the range
    z = -1 - ln(1 + 2 (q_0 - x) / (q_100 - q_0))      below it

(continuous at +-1; the logarithm keeps ``Ipc``'s 1e30 near 70 instead of 1e28). As a *pretraining target*
(``tails="clip"``) the value stays in [-1, 1], a bounded regression target.

A descriptor RDKit cannot compute for a molecule, or whose value is NaN or infinite, is *missing*: NaN in
:func:`normalised_descriptors`; as a model input it becomes 0 (the median), as a pretraining target it is left out
of the loss.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import Descriptors
from rdkit.Chem.EState import EState

from graphormer_urpe.errors import DatasetMissing

#: The descriptor set's name, as options and checkpoints spell it.
DESCRIPTOR_SET = "rdkit2d"
#: Descriptor feature names are ``rdkit2d/<RDKit name>``; a table's feature column may not start so.
DESCRIPTOR_PREFIX = f"{DESCRIPTOR_SET}/"
#: How a descriptor outside the reference's range enters the model: on the logarithmic tail, so the many small
#: molecules below MOSES's smallest weight keep their order (docs/small-data.md).
DESCRIPTOR_TAILS = "extend"
#: The reference distribution of every descriptor, written by
#: ``bench/small_data/descriptor_reference.py`` (a maintainer's tool).
REFERENCE_FILE = Path(__file__).with_name("rdkit2d_reference.json")
#: Quantiles stored per descriptor (0 %, 1 %, ... 100 %).
REFERENCE_QUANTILES = 101


#: RDKit's four E-state descriptors reduce the same per-atom E-state indices, and each of its functions computes
#: them anew (``force=1``); here they are computed once a molecule and reduced as RDKit's functions reduce them, so
#: the values are the same (about a tenth of the descriptors' time saved).
ESTATE_REDUCTIONS: dict[str, Callable[[np.ndarray], float]] = {
    "MaxEStateIndex": lambda indices: max(indices),
    "MinEStateIndex": lambda indices: min(indices),
    "MaxAbsEStateIndex": lambda indices: max(abs(x) for x in indices),
    "MinAbsEStateIndex": lambda indices: min(abs(x) for x in indices),
}


def raw_descriptors(mol: Chem.Mol, names: Sequence[str]) -> np.ndarray:
    """RDKit's value of each descriptor in ``names`` for ``mol``, NaN where RDKit fails or gives a non-finite value.

    Shapes: (K,) float64 for K names."""
    functions = _descriptor_functions()
    values = np.full(len(names), np.nan)
    estate = None  # the E-state indices, once needed
    for k, name in enumerate(names):
        try:
            if name in ESTATE_REDUCTIONS:
                if estate is None:
                    estate = EState.EStateIndices(mol)
                values[k] = float(ESTATE_REDUCTIONS[name](estate))
            else:
                values[k] = float(functions[name](mol))
        except Exception:  # noqa: BLE001 -- RDKit raises many types for the odd molecule; the value is then missing
            continue
    values[~np.isfinite(values)] = np.nan
    return values


@functools.cache
def _descriptor_functions() -> dict[str, object]:
    return dict(Descriptors.descList)


@dataclass(frozen=True)
class DescriptorReference:
    """The reference distribution that :func:`normalised_descriptors` maps through.

    Shapes: quantiles (K, Q), non-decreasing along Q, for K descriptors.
    """

    names: tuple[str, ...]
    quantiles: np.ndarray
    provenance: dict
    sha1: str  # of the reference file: part of every cache key of descriptor features or targets

    @functools.cached_property
    def informative(self) -> np.ndarray:
        """Indices of the descriptors that vary on the reference (the others are constant over MOSES).

        Shapes: (K',) int64."""
        return np.flatnonzero(self.quantiles[:, 0] < self.quantiles[:, -1])

    def normalise(self, raw: np.ndarray, tails: Literal["clip", "extend"] = "clip") -> np.ndarray:
        """Raw descriptor values to ``2 ECDF_ref(x) - 1``; NaN stays NaN. Outside the reference's range the value is
        -1 or +1 (``tails="clip"``), or continues on the logarithmic tail of the module docstring (``"extend"``; a
        descriptor constant on the reference keeps -1, 0, +1).

        Shapes: raw (R, K) or (K,) float -> the same shape, float32."""
        if tails not in ("clip", "extend"):
            raise ValueError(f"tails={tails!r}: must be 'clip' or 'extend'")
        values = np.asarray(raw, dtype=np.float64)
        flat = values.reshape(-1, len(self.names))
        out = np.full(flat.shape, np.nan)
        for k, (points, ranks) in enumerate(self._steps):
            known = ~np.isnan(flat[:, k])
            x = flat[known, k]
            z = 2.0 * np.interp(x, points, ranks, left=0.0, right=1.0) - 1.0
            low, high = points[0], points[-1]
            if tails == "extend" and high > low:
                above, below = x > high, x < low
                z[above] = 1.0 + np.log1p(2.0 * (x[above] - high) / (high - low))
                z[below] = -1.0 - np.log1p(2.0 * (low - x[below]) / (high - low))
            out[known, k] = z
        return out.astype(np.float32).reshape(values.shape)

    @functools.cached_property
    def _steps(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per descriptor: its distinct reference quantiles and the mid-rank (in [0, 1]) of each, so a value equal
        to a repeated quantile (a count shared by many molecules) maps to the middle of its run."""
        positions = np.linspace(0.0, 1.0, self.quantiles.shape[1])
        steps = []
        for row in self.quantiles:
            points, inverse = np.unique(row, return_inverse=True)
            ranks = np.bincount(inverse, weights=positions) / np.bincount(inverse)
            steps.append((points, ranks))
        return steps


@functools.cache
def descriptor_reference() -> DescriptorReference:
    """The shipped reference; :class:`DatasetMissing` naming the descriptors this RDKit does not know."""
    data = REFERENCE_FILE.read_bytes()
    stored = json.loads(data)
    names = tuple(stored["names"])
    unknown = [name for name in names if name not in _descriptor_functions()]
    if unknown:
        raise DatasetMissing(
            f"RDKit {rdBase.rdkitVersion} lacks the descriptors {', '.join(unknown)} of the "
            f"{DESCRIPTOR_SET} set (made with RDKit {stored['provenance']['rdkit']}); install "
            "that RDKit release or a newer one"
        )
    return DescriptorReference(
        names, np.asarray(stored["quantiles"], dtype=np.float64), stored["provenance"], hashlib.sha1(data).hexdigest()
    )


def normalised_descriptors(mol: Chem.Mol, tails: Literal["clip", "extend"] = "clip") -> np.ndarray:
    """The :data:`DESCRIPTOR_SET` descriptors of one molecule on the reference's scale, NaN where missing: in
    [-1, 1] (``tails="clip"``, the pretraining targets) or beyond it on a logarithmic tail (``"extend"``, the model's
    molecule features); see :meth:`DescriptorReference.normalise`.

    Shapes: (K,) float32 for the K descriptors of the reference."""
    reference = descriptor_reference()
    return reference.normalise(raw_descriptors(mol, reference.names), tails)


def descriptor_features(mol: Chem.Mol) -> np.ndarray:
    """The descriptors as the model and the descriptor trees read them: on the reference's scale with the
    :data:`DESCRIPTOR_TAILS` tails, NaN where missing. Shapes: (K,) float32."""
    return normalised_descriptors(mol, tails=DESCRIPTOR_TAILS)
