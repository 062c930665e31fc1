"""The kernel part of the small-data ensemble (``graphormer-urpe ensemble --kernel``): a Gaussian process on Morgan
count fingerprints (:mod:`graphormer_urpe.data.sources.fingerprints`) with the Tanimoto kernel, one per target.

Tanimoto's kernel on counts (MinMax; positive definite, Ralaivola et al. 2005) of fingerprints a and b:

    k(a, b) = sum_j min(a_j, b_j) / sum_j max(a_j, b_j)            (1 for two empty fingerprints)

On the n training rows where a target is known, with y centred on its training mean m:

    y - m ~ N(0, s2 (K + lam I))          prediction at x:  m + k(x, X) (K + lam I)^-1 (y - m)

``lam`` (the noise's share) maximises the marginal likelihood over :data:`NOISE_RATIOS`, with ``s2`` at its
closed-form optimum ``s2 = (y - m)^T (K + lam I)^-1 (y - m) / n``; one eigendecomposition ``K = Q diag(l) Q^T``
serves every ``lam``. With ``z = Q^T (y - m)`` the profile log-likelihood is

    L(lam) = -n/2 log s2(lam) - 1/2 sum_i log(l_i + lam) - n/2 (1 + log 2 pi),  s2(lam) = sum_i z_i^2 / (l_i + lam) / n

No other choice is made: nothing is tuned on the validation rows. A binary label is regressed as 0/1 (a
least-squares classifier) and the prediction clipped to [0, 1], the probability of label 1 that the blend and
ROC-AUC read.

The kernel matrix is dense: fitting n rows holds about five (n, n) float64 arrays at its peak (measured: 623 MiB
for 4,000 rows) and the decomposition grows with n^3, so a process is fitted on at most :data:`MAX_TRAINING_ROWS`
rows (:func:`check_training_rows`: about 4 GiB and a few CPU minutes there).

Saved as one ``target<k>.npz`` per target (NumPy arrays only, read with ``allow_pickle=False``): the training
rows' fingerprints, the weights ``(K + lam I)^-1 (y - m)``, ``m``, ``lam`` and ``s2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from graphormer_urpe.data.sources.fingerprints import ECFP_BITS
from graphormer_urpe.errors import CheckpointError, DataError
from graphormer_urpe.evaluation.blend import check_part_targets

#: The noise-to-signal ratios the marginal likelihood chooses from.
NOISE_RATIOS = tuple(float(ratio) for ratio in np.logspace(-3, 1, 33))
#: The largest count a fingerprint position holds (uint8).
MAX_COUNT = 255
#: The most rows one target's process is fitted on (its dense kernel matrix; the module's docstring).
MAX_TRAINING_ROWS = 10_000
#: Peak bytes of a fit per entry of the (n, n) kernel matrix: about five float64 arrays of that shape.
PEAK_BYTES_PER_ENTRY = 5 * 8


def check_training_rows(rows: int, where: str) -> None:
    """Refuse (:class:`DataError`) a kernel part fitted on more than :data:`MAX_TRAINING_ROWS` rows, before any work:
    ``where`` names the table or target in the message."""
    if rows > MAX_TRAINING_ROWS:
        gib = PEAK_BYTES_PER_ENTRY * rows**2 / 2**30
        raise DataError(
            f"{where}: the fingerprint kernel would be fitted on {rows:,} training rows, more than the "
            f"{MAX_TRAINING_ROWS:,} it takes (its dense kernel matrix: about {gib:.0f} GiB at its peak, and its "
            "decomposition grows with the cube of the rows); leave out --kernel, the ensemble and the trees scale"
        )


def unary(counts: np.ndarray) -> sparse.csr_matrix:
    """The counts written in unary: position j with count c sets columns ``j * 255 + 0 .. c - 1``, so that the dot
    product of two rows is ``sum_j min(a_j, b_j)``. Shapes: (N, ECFP_BITS) uint8 -> (N, ECFP_BITS * 255) sparse."""
    rows, positions = np.nonzero(counts)
    repeats = counts[rows, positions].astype(np.int64)
    starts = np.repeat(np.cumsum(repeats) - repeats, repeats)
    levels = np.arange(int(repeats.sum())) - starts  # 0 .. c - 1 within each (row, position)
    columns = np.repeat(positions.astype(np.int64) * MAX_COUNT, repeats) + levels
    data = np.ones(len(columns), dtype=np.float64)
    return sparse.csr_matrix(
        (data, (np.repeat(rows, repeats), columns)), shape=(counts.shape[0], counts.shape[1] * MAX_COUNT)
    )


def tanimoto(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tanimoto's (MinMax) kernel between two sets of count fingerprints. Shapes: (N, F), (P, F) uint8 -> (N, P)."""
    shared = (unary(a) @ unary(b).T).toarray()  # sum_j min(a_j, b_j)
    union = a.sum(axis=1, dtype=np.float64)[:, None] + b.sum(axis=1, dtype=np.float64)[None, :] - shared
    return np.divide(shared, union, out=np.ones_like(shared), where=union > 0)


@dataclass(frozen=True)
class Posterior:
    """A Gaussian process fitted on a kernel matrix of its n training rows (the module's docstring): the prediction
    at x is ``mean + k(x, X) @ weights``. Shapes: weights (n,) float64."""

    weights: np.ndarray
    mean: float
    noise_ratio: float  # lam
    signal: float  # s2

    @classmethod
    def fit(cls, matrix: np.ndarray, targets: np.ndarray) -> Posterior:
        """``lam`` by marginal likelihood over :data:`NOISE_RATIOS`, ``s2`` at its optimum. Shapes: (n, n) positive
        semi-definite, (n,)."""
        y = np.asarray(targets, dtype=np.float64)
        mean = float(y.mean())
        eigenvalues, vectors = np.linalg.eigh(matrix)
        eigenvalues = np.clip(eigenvalues, 0.0, None)  # K is positive semi-definite; rounding may say -1e-15
        z = vectors.T @ (y - mean)
        n = len(y)
        best = None
        for ratio in NOISE_RATIOS:
            signal = float(np.sum(z**2 / (eigenvalues + ratio)) / n)
            likelihood = -0.5 * n * np.log(max(signal, 1e-300)) - 0.5 * np.sum(np.log(eigenvalues + ratio))
            if best is None or likelihood > best[0]:
                best = (likelihood, ratio, signal)
        _, ratio, signal = best
        return cls(vectors @ (z / (eigenvalues + ratio)), mean, ratio, signal)


@dataclass(frozen=True)
class TanimotoProcess:
    """One target's fitted process: the prediction at x is ``mean + tanimoto(x, fingerprints) @ weights``.

    Shapes: fingerprints (n, ECFP_BITS) uint8, weights (n,) float64.
    """

    fingerprints: np.ndarray
    weights: np.ndarray
    mean: float
    noise_ratio: float  # lam
    signal: float  # s2

    @classmethod
    def fit(cls, fingerprints: np.ndarray, targets: np.ndarray) -> TanimotoProcess:
        """The process of these training rows, ``lam`` by marginal likelihood. Shapes: (n, F) uint8, (n,)."""
        posterior = Posterior.fit(tanimoto(fingerprints, fingerprints), targets)
        return cls(fingerprints, posterior.weights, posterior.mean, posterior.noise_ratio, posterior.signal)

    def predict(self, fingerprints: np.ndarray) -> np.ndarray:
        """The posterior mean at each row. Shapes: (N, F) uint8 -> (N,) float64."""
        return self.mean + tanimoto(fingerprints, self.fingerprints) @ self.weights


class FingerprintKernel:
    """One :class:`TanimotoProcess` per target: :meth:`fit` on the training rows, :meth:`predict`, :meth:`save` and
    :meth:`load` (``.npz``, no pickle).

    Args:
        kind: ``regression`` or ``binary``.
        processes: each target's process, in the targets' order.
    """

    def __init__(self, kind: str, processes: Sequence[TanimotoProcess]) -> None:
        self.kind = kind
        self.processes = list(processes)

    @classmethod
    def fit(cls, kind: str, names: Sequence[str], fingerprints: np.ndarray, targets: np.ndarray) -> FingerprintKernel:
        """Fit one process per target on the rows where it is known. Shapes: fingerprints (N, F), targets (N, Y).

        Raises:
            DataError: another kind of target, or a binary label with one class among the known rows
                (:func:`~graphormer_urpe.evaluation.blend.check_part_targets`), or a target known on more than
                :data:`MAX_TRAINING_ROWS` rows (:func:`check_training_rows`).
        """
        check_part_targets("kernel", kind, names, targets)
        known_rows = ~np.isnan(targets)
        for k, name in enumerate(names):
            check_training_rows(int(known_rows[:, k].sum()), f"target '{name}'")
        processes = []
        for k in range(len(names)):
            known = known_rows[:, k]
            processes.append(TanimotoProcess.fit(fingerprints[known], targets[known, k]))
        return cls(kind, processes)

    def predict(self, fingerprints: np.ndarray) -> np.ndarray:
        """Each target's prediction: a value, or the probability of label 1. Shapes: (N, F) -> (N, Y) float64."""
        predicted = np.stack([process.predict(fingerprints) for process in self.processes], axis=1)
        return np.clip(predicted, 0.0, 1.0) if self.kind == "binary" else predicted

    def save(self, directory: Path) -> list[str]:
        """Write one ``target<k>.npz`` per target into ``directory``; returns their names."""
        directory.mkdir(parents=True, exist_ok=True)
        names = [f"target{k}.npz" for k in range(len(self.processes))]
        for name, process in zip(names, self.processes):
            np.savez_compressed(
                directory / name,
                fingerprints=process.fingerprints,
                weights=process.weights,
                mean=process.mean,
                noise_ratio=process.noise_ratio,
                signal=process.signal,
            )
        return names

    @classmethod
    def load(cls, kind: str, files: Sequence[Path]) -> FingerprintKernel:
        """The processes saved by :meth:`save`.

        Raises:
            CheckpointError: a file that is not one (not an ``.npz`` of NumPy arrays, a missing or misshapen array).
        """
        processes = []
        for path in files:
            try:
                with np.load(path, allow_pickle=False) as stored:
                    arrays = {key: stored[key] for key in ("fingerprints", "weights", "mean", "noise_ratio", "signal")}
            except (OSError, ValueError, KeyError) as error:
                raise CheckpointError(
                    f"{path}: not a kernel file of an ensemble ({type(error).__name__}: {str(error)[:200]})"
                ) from None
            fingerprints, weights = arrays["fingerprints"], arrays["weights"]
            if (
                fingerprints.dtype != np.uint8
                or fingerprints.ndim != 2
                or fingerprints.shape[1] != ECFP_BITS
                or weights.shape != (len(fingerprints),)
            ):
                raise CheckpointError(
                    f"{path}: fingerprints {fingerprints.dtype} {fingerprints.shape} and weights "
                    f"{weights.shape}, expected uint8 (n, {ECFP_BITS}) and (n,)"
                )
            processes.append(
                TanimotoProcess(
                    fingerprints,
                    weights.astype(np.float64),
                    float(arrays["mean"]),
                    float(arrays["noise_ratio"]),
                    float(arrays["signal"]),
                )
            )
        return cls(kind, processes)
