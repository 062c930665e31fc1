"""bench/small_data/kernel_variants.py: rule 12's kernel variants on MoleculeACE's validation rows; ``today`` is the
recipe's own kernel part, and the verdict applies the rule fixed before."""

from __future__ import annotations

import numpy as np
import pytest

from bench.small_data import kernel_variants, moleculeace
from graphormer_urpe.data.sources.fingerprints import ecfp_count_matrix
from graphormer_urpe.evaluation.kernel import FingerprintKernel


@pytest.fixture
def benchmark(small_set: tuple, store_shipped_parts) -> tuple:
    """The shipped arm's stored validation predictions: the ensemble and the trees made up, the kernel the product's
    own fitted on the training rows."""
    name, train, valid = small_set
    truth = valid["y"].to_numpy(np.float64)
    kernel = FingerprintKernel.fit(
        "regression", ["y"], ecfp_count_matrix(list(train["smiles"])), train["y"].to_numpy(np.float64)[:, None]
    ).predict(ecfp_count_matrix(list(valid["smiles"])))[:, 0]
    parts = {"ensemble": truth + 0.1, "trees": truth - 0.3, "kernel": kernel}
    store_shipped_parts(parts)
    return name, train, valid, parts


def test_today_is_the_recipes_own_kernel_part_and_its_blend(benchmark: tuple, hand_blend) -> None:
    name, train, valid, parts = benchmark
    truth = valid["y"].to_numpy(np.float64)
    matrices = kernel_variants.kernel_matrices(list(train["smiles"]), list(valid["smiles"]))
    today = kernel_variants.variant_prediction("today", matrices, train["y"].to_numpy())
    np.testing.assert_allclose(today, parts["kernel"], rtol=1e-12, atol=1e-12)
    figures = kernel_variants.set_figures(name)
    assert set(figures) == set(kernel_variants.VARIANTS)
    assert figures["today"][0] == pytest.approx(moleculeace.rmse(parts["kernel"], truth), rel=1e-12)
    blended = hand_blend(parts, truth)
    assert figures["today"][1] == pytest.approx(moleculeace.rmse(blended, truth), rel=1e-9)
    assert all(0 < kernel < 5 and 0 < blend < 5 for kernel, blend in figures.values())


def test_a_variant_averages_the_kernels_of_its_fingerprints(benchmark: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    _, train, valid, parts = benchmark
    monkeypatch.setitem(kernel_variants.VARIANTS, "twice", ("ecfp4", "ecfp4"))
    args = (kernel_variants.kernel_matrices(list(train["smiles"]), list(valid["smiles"])), train["y"].to_numpy())
    np.testing.assert_allclose(kernel_variants.variant_prediction("twice", *args), parts["kernel"], rtol=1e-10)
    pairs = kernel_variants.variant_prediction("ecfp4+atompairs", *args)
    assert not np.allclose(pairs, parts["kernel"])  # the atom pairs' kernel changes it


def test_the_verdict_applies_the_rule_fixed_before() -> None:
    """Two sets; ecfp6 0.97x today's kernel on both and its blend 0.985x: chosen; its blend at 1.0x: not; an
    unfinished set: no verdict."""

    def figures(ecfp6_blend: float) -> dict:
        return {
            name: {"today": (1.0, 0.8), "ecfp6": (0.97, 0.8 * ecfp6_blend), "ecfp4+atompairs": (0.99, 0.7),
                   "ecfp4+fcfp4": (1.01, 0.8)}
            for name in ("A", "B")
        }  # fmt: skip

    text = kernel_variants.verdict_text(figures(0.985))
    assert "| mean ratio | 1 / 1 | 0.970 / 0.985 | 0.990 / 0.875 | 1.010 / 1.000 |" in text
    assert text.rstrip().endswith("**ecfp6 replaces today's kernel.**")
    assert kernel_variants.verdict_text(figures(1.0)).rstrip().endswith("**ecfp6 does not replace today's kernel.**")
    unfinished = kernel_variants.verdict_text(figures(0.985) | {"C": {}})
    assert "**No verdict yet**: recipe+nodropout has not finished on C." in unfinished
