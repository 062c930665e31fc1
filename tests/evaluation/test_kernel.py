"""The fingerprint kernel of the small-data ensemble: Tanimoto's kernel on counts, the Gaussian process's noise
chosen by its marginal likelihood, its predictions, and its files (no pickle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphormer_urpe.data.sources.fingerprints import ECFP_BITS, ecfp_count_matrix
from graphormer_urpe.errors import CheckpointError, DataError
from graphormer_urpe.evaluation import kernel as kernel_module
from graphormer_urpe.evaluation.kernel import (
    NOISE_RATIOS,
    FingerprintKernel,
    TanimotoProcess,
    check_training_rows,
    tanimoto,
)

SMILES = [
    "CCO",
    "CCCO",
    "CCCCO",
    "c1ccccc1O",
    "c1ccccc1N",
    "c1ccccc1CO",
    "CC(=O)Nc1ccc(O)cc1",
    "CCN(CC)CC",
    "OC(=O)c1ccccc1",
    "CCCCCCCC",
    "c1ccncc1",
    "CC(C)O",
    "ClCCl",
    "NCC(=O)O",
    "CC(=O)OC1=CC=CC=C1C(=O)O",
    "CN1C=NC2=C1C(=O)N(C(=O)N2C)C",
    "C1CCCCC1",
    "C1CCCCC1O",
    "c1ccc2ccccc2c1",
    "CCOC(=O)C",
]


def random_counts(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Sparse counts as fingerprints hold them, with an empty row first. (rows, ECFP_BITS) uint8"""
    counts = (rng.random((rows, ECFP_BITS)) < 0.02) * rng.integers(1, 8, (rows, ECFP_BITS))
    counts[0] = 0
    return counts.astype(np.uint8)


def test_the_kernel_is_the_sum_of_minima_over_the_sum_of_maxima() -> None:
    rng = np.random.default_rng(0)
    a, b = random_counts(rng, 6), random_counts(rng, 5)
    got = tanimoto(a, b)
    for i in range(len(a)):
        for j in range(len(b)):
            union = np.maximum(a[i], b[j]).astype(np.int64).sum()
            expected = np.minimum(a[i], b[j]).astype(np.int64).sum() / union if union else 1.0
            assert got[i, j] == pytest.approx(expected, rel=1e-12)
    assert got[0, 0] == 1.0 and (got[0, 1:] == 0).all()  # two empty fingerprints are alike; empty and not: 0
    # counts, not bits: 3 of a substructure against 1 share a third of it
    one, three = np.zeros((1, ECFP_BITS), np.uint8), np.zeros((1, ECFP_BITS), np.uint8)
    one[0, 7], three[0, 7] = 1, 3
    assert tanimoto(one, three)[0, 0] == pytest.approx(1 / 3)


def test_the_kernel_of_real_molecules_is_a_positive_semidefinite_similarity() -> None:
    counts = ecfp_count_matrix(SMILES)
    matrix = tanimoto(counts, counts)
    np.testing.assert_allclose(matrix, matrix.T, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(np.diag(matrix), 1.0)
    assert np.linalg.eigvalsh(matrix).min() > -1e-10
    assert matrix[0, 1] > matrix[0, 9]  # ethanol is nearer propanol than octane


def log_likelihood(matrix: np.ndarray, y: np.ndarray, ratio: float) -> tuple[float, float]:
    """The profile log marginal likelihood of a ratio, and its s2, computed directly (no eigendecomposition)."""
    covariance = matrix + ratio * np.eye(len(y))
    signal = float(y @ np.linalg.solve(covariance, y) / len(y))
    _, logdet = np.linalg.slogdet(signal * covariance)
    return -0.5 * (len(y) + logdet + len(y) * np.log(2 * np.pi)), signal


def test_the_noise_maximises_the_marginal_likelihood_and_the_prediction_is_the_posterior_mean() -> None:
    counts = ecfp_count_matrix(SMILES)
    rng = np.random.default_rng(1)
    y = counts[:, :64].sum(axis=1) / 10.0 + rng.normal(0, 0.1, len(SMILES))  # a fingerprint-made target
    process = TanimotoProcess.fit(counts[:15], y[:15])
    matrix = tanimoto(counts[:15], counts[:15])
    centred = y[:15] - y[:15].mean()
    likelihoods = [log_likelihood(matrix, centred, ratio)[0] for ratio in NOISE_RATIOS]
    assert process.noise_ratio == NOISE_RATIOS[int(np.argmax(likelihoods))]
    assert process.signal == pytest.approx(log_likelihood(matrix, centred, process.noise_ratio)[1], rel=1e-9)
    weights = np.linalg.solve(matrix + process.noise_ratio * np.eye(15), centred)
    expected = y[:15].mean() + tanimoto(counts[15:], counts[:15]) @ weights
    np.testing.assert_allclose(process.predict(counts[15:]), expected, rtol=1e-9, atol=1e-9)


def test_binary_labels_are_probabilities_and_one_class_is_refused() -> None:
    counts = ecfp_count_matrix(SMILES)
    labels = np.array([[1.0 if "c1" in text else 0.0] for text in SMILES])  # aromatic or not
    kernel = FingerprintKernel.fit("binary", ["aromatic"], counts[:14], labels[:14])
    predicted = kernel.predict(counts[14:])
    assert predicted.shape == (6, 1) and ((predicted >= 0) & (predicted <= 1)).all()
    aromatic = labels[14:, 0] == 1
    assert predicted[aromatic, 0].min() > predicted[~aromatic, 0].max()  # ranks the held-out molecules right
    with pytest.raises(DataError, match="both classes of label 'aromatic'"):
        FingerprintKernel.fit("binary", ["aromatic"], counts[:3], np.zeros((3, 1)))
    with pytest.raises(DataError, match="this table has a multiclass label: ensemble without --kernel"):
        FingerprintKernel.fit("multiclass", ["c"], counts, labels)


def test_each_target_uses_its_known_rows_and_the_files_read_back_exactly(tmp_path: Path) -> None:
    counts = ecfp_count_matrix(SMILES)
    targets = np.stack([np.arange(20.0), np.where(np.arange(20) % 3 == 0, np.nan, np.arange(20.0) ** 0.5)], axis=1)
    kernel = FingerprintKernel.fit("regression", ["a", "b"], counts, targets)
    assert len(kernel.processes[1].weights) == int((~np.isnan(targets[:, 1])).sum())
    names = kernel.save(tmp_path / "kernel")
    assert names == ["target0.npz", "target1.npz"]
    loaded = FingerprintKernel.load("regression", [tmp_path / "kernel" / name for name in names])
    np.testing.assert_array_equal(loaded.predict(counts), kernel.predict(counts))


def test_a_target_known_on_more_rows_than_the_kernel_takes_is_refused_before_its_matrix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The limit counts each target's known rows; the message names the target, the rows and the peak memory."""
    with pytest.raises(DataError, match="the fingerprint kernel would be fitted on 10,001 training rows, more than"):
        check_training_rows(10_001, "t")
    check_training_rows(10_000, "t")
    with pytest.raises(DataError, match=r"about 4 GiB at its peak"):  # 5 x 8 bytes x 10,001^2 = 3.73 GiB
        check_training_rows(10_001, "t")
    counts = ecfp_count_matrix(SMILES)
    targets = np.stack([np.arange(20.0), np.where(np.arange(20) < 5, np.arange(20.0), np.nan)], axis=1)
    monkeypatch.setattr(kernel_module, "MAX_TRAINING_ROWS", 5)
    with monkeypatch.context() as patched:

        def no_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            raise AssertionError("the kernel matrix was built before the refusal")

        patched.setattr(kernel_module, "tanimoto", no_matrix)
        with pytest.raises(DataError, match="target 'a': the fingerprint kernel would be fitted on 20 training rows"):
            FingerprintKernel.fit("regression", ["b", "a"], counts, targets[:, ::-1])
    assert len(FingerprintKernel.fit("regression", ["b"], counts, targets[:, 1:]).processes[0].weights) == 5


def test_a_file_that_is_not_a_kernel_is_refused_without_unpickling(tmp_path: Path) -> None:
    pickled = tmp_path / "pickled.npz"
    np.savez(
        pickled,
        fingerprints=np.array([object()], dtype=object),
        weights=np.zeros(1),
        mean=0.0,
        noise_ratio=1.0,
        signal=1.0,
    )
    with pytest.raises(CheckpointError, match="pickled.npz: not a kernel file"):
        FingerprintKernel.load("regression", [pickled])
    wrong = tmp_path / "wrong.npz"
    np.savez(
        wrong, fingerprints=np.zeros((3, 10), np.uint8), weights=np.zeros(3), mean=0.0, noise_ratio=1.0, signal=1.0
    )
    with pytest.raises(CheckpointError, match=r"wrong.npz: fingerprints uint8 \(3, 10\)"):
        FingerprintKernel.load("regression", [wrong])
    text = tmp_path / "text.npz"
    text.write_text("not a zip")
    with pytest.raises(CheckpointError, match="text.npz: not a kernel file"):
        FingerprintKernel.load("regression", [text])
