"""bench/small_data/tree_variants.py: rule 17's trees on the fingerprint counts too, on MoleculeACE's validation rows;
``today`` gives back the shipped arm's stored trees (or the script refuses), and the verdict applies the rule fixed
before, on the judged sets alone."""

from __future__ import annotations

import numpy as np
import pytest

from bench.small_data import moleculeace, tree_variants
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
from graphormer_urpe.evaluation.blend import DescriptorTrees, tree_inputs


@pytest.fixture
def benchmark(small_set: tuple, store_shipped_parts) -> tuple:
    """The shipped arm's stored validation predictions: the ensemble and the kernel made up, the trees the
    product's own on the descriptors, fitted on the training rows (their targets in float32, as the product's table
    reader holds them; rounded to 5 decimals, as the lines store them)."""
    name, train, valid = small_set
    truth = valid["y"].to_numpy(np.float64)
    features = MoleculeFeatures("rdkit2d")
    targets = train["y"].to_numpy(np.float32).astype(np.float64)[:, None]
    trees = DescriptorTrees.fit("regression", ["y"], tree_inputs(features, list(train["smiles"])), targets).predict(
        tree_inputs(features, list(valid["smiles"]))
    )[:, 0]
    parts = {"ensemble": truth + 0.1, "trees": np.round(trees, 5), "kernel": truth - 0.2}
    store_shipped_parts(parts)
    return name, train, valid, parts


def test_today_is_the_recipes_own_trees_and_with_ecfp_reads_the_counts(
    benchmark: tuple, store_shipped_parts, hand_blend
) -> None:
    name, train, valid, parts = benchmark
    truth = valid["y"].to_numpy(np.float64)
    figures = tree_variants.set_figures(name)
    assert set(figures) == set(tree_variants.VARIANTS)
    assert figures["today"][0] == pytest.approx(moleculeace.rmse(parts["trees"], truth), abs=1e-5)
    blended = hand_blend(parts, truth)
    assert figures["today"][1] == pytest.approx(moleculeace.rmse(blended, truth), abs=1e-5)
    predictions = tree_variants.variant_predictions(
        list(train["smiles"]), train["y"].to_numpy(np.float64), list(valid["smiles"])
    )
    features = MoleculeFeatures("rdkit2d", fingerprints="ecfp")
    with_counts = DescriptorTrees.fit(
        "regression", ["y"], tree_inputs(features, list(train["smiles"])), train["y"].to_numpy(np.float64)[:, None]
    ).predict(tree_inputs(features, list(valid["smiles"])))[:, 0]
    np.testing.assert_array_equal(predictions["with_ecfp"], with_counts)
    # stored trees that are not today's: refused, naming the set
    store_shipped_parts(parts | {"trees": parts["trees"] + 0.01})
    with pytest.raises(moleculeace.BenchError, match=f"{name}: today's trees here are not the shipped arm's"):
        tree_variants.set_figures(name)


def test_the_verdict_judges_the_unseen_sets_only() -> None:
    """The judged sets at 0.97 / 0.985 of today's: chosen, whatever the seen sets say (2.0 there); the blend at 1.0:
    not; a judged set not computed: no verdict."""

    def figures(blend_ratio: float) -> dict:
        judged = {
            name: {"today": (1.0, 0.8), "with_ecfp": (0.97, 0.8 * blend_ratio)} for name in tree_variants.JUDGED_SETS
        }
        seen = {name: {"today": (1.0, 0.8), "with_ecfp": (2.0, 1.6)} for name in tree_variants.SEEN_SETS}
        return judged | seen

    text = tree_variants.verdict_text(figures(0.985))
    assert "Mean ratios over the judged sets: trees 0.970 (at most 0.98), blend 0.985 (at most 0.99)." in text
    assert "Over the seen sets (not judged): trees 2.000, blend 2.000." in text
    assert f"| {tree_variants.SEEN_SETS[0]} | no (seen) | 1.0000 / 0.8000 | 2.0000 / 1.6000 | 2.000 / 2.000 |" in text
    assert text.rstrip().endswith("**The trees on the counts replace today's trees.**")
    refused = tree_variants.verdict_text(figures(1.0))
    assert refused.rstrip().endswith("**The trees on the counts do not replace today's trees.**")
    unfinished = tree_variants.verdict_text(figures(0.985) | {tree_variants.JUDGED_SETS[0]: {}})
    assert f"**No verdict yet**: not computed on {tree_variants.JUDGED_SETS[0]}." in unfinished
    assert set(tree_variants.JUDGED_SETS) | set(tree_variants.SEEN_SETS) == set(moleculeace.SETS)
    assert not set(tree_variants.JUDGED_SETS) & set(tree_variants.SEEN_SETS)
