"""Rule 17 of docs/small-data.md: the recipe's trees on the Morgan counts too, chosen on MoleculeACE's validation
rows only.

    python bench/small_data/tree_variants.py   # bench/results/moleculeace/tree_variants.md

Each variant (:data:`VARIANTS`) is the recipe's trees part (:class:`graphormer_urpe.evaluation.blend.DescriptorTrees`
on :func:`~graphormer_urpe.evaluation.blend.tree_inputs`) reading the molecule features it names, fitted on a set's
training rows; ``today`` reads the descriptors alone, as the shipped arm's trees did, and must give back their stored
validation predictions. Scored on the set's validation rows alone, and in the blend that the recipe's rule makes of
it with the shipped arm's stored network ensemble and kernel. No test row is read.

The rule, fixed before any figure of the judged sets: ``with_ecfp`` replaces today's trees only if the mean over
:data:`JUDGED_SETS` of its validation RMSE relative to ``today``'s is at most :data:`TREES_BOUND` and its blend's at
most :data:`BLEND_BOUND`. :data:`SEEN_SETS` (whose trees figures rule 15 showed) are reported, not judged.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.small_data import moleculeace
from graphormer_urpe.data.sources.molecule_features import MoleculeFeatures
from graphormer_urpe.evaluation.blend import DescriptorTrees, tree_inputs

#: Each variant: the molecule features its trees read.
VARIANTS = {
    "today": MoleculeFeatures("rdkit2d"),
    "with_ecfp": MoleculeFeatures("rdkit2d", fingerprints="ecfp"),
}
#: The sets whose trees figures with the counts were seen before the rule (rule 15's four): reported, not judged.
SEEN_SETS = ("CHEMBL237_EC50", "CHEMBL2971_Ki", "CHEMBL3979_EC50", "CHEMBL4792_Ki")
#: The sets that judge the variant.
JUDGED_SETS = tuple(name for name in moleculeace.SETS if name not in SEEN_SETS)
#: ``with_ecfp``'s mean validation RMSE ratios to today's trees, alone and in the blend, must be at most these.
TREES_BOUND = 0.98
BLEND_BOUND = 0.99


def variant_predictions(train_smiles: Sequence[str], train_y: np.ndarray, valid_smiles: Sequence[str]) -> dict:
    """Per variant, its trees fitted on the training molecules (targets ``train_y``, (T,)) at the validation
    molecules. The features are computed once, with the counts; a variant without them reads the descriptors'
    columns alone, which come first. Shapes: each (V,)."""
    widest = MoleculeFeatures("rdkit2d", fingerprints="ecfp")
    train_inputs, valid_inputs = tree_inputs(widest, train_smiles), tree_inputs(widest, valid_smiles)
    predictions = {}
    for variant, features in VARIANTS.items():
        width = len(features.names)
        trees = DescriptorTrees.fit("regression", ["y"], train_inputs[:, :width], train_y[:, None])
        predictions[variant] = trees.predict(valid_inputs[:, :width])[:, 0]
    return predictions


def set_figures(name: str) -> dict[str, tuple[float, float]]:
    """Per variant, its validation RMSE alone and in the blend, on set ``name``; empty where the shipped arm has
    not finished there.

    Raises:
        BenchError: ``today`` does not give back the shipped arm's stored trees (then the comparison would not be
            the product's).
    """
    shipped = moleculeace.shipped_validation(name)
    if shipped is None:
        return {}
    parts, train, valid, truth = shipped.parts, shipped.train, shipped.valid, shipped.truth
    # the product's table reader holds targets in float32: fitted on the float64 ones, a near tie between two splits
    # may fall the other way (on CHEMBL2971_Ki one validation row's prediction moved by 0.009)
    targets = train["y"].to_numpy(np.float32).astype(np.float64)
    predictions = variant_predictions(list(train["smiles"]), targets, list(valid["smiles"]))
    # the stored predictions are rounded to 5 decimals (moleculeace.py's lines)
    if not np.allclose(predictions["today"], parts["trees"], rtol=0, atol=1e-5):
        raise moleculeace.BenchError(
            f"{name}: today's trees here are not the shipped arm's stored trees (largest difference "
            f"{np.abs(predictions['today'] - parts['trees']).max():.2g})"
        )
    figures = {}
    for variant, trees in predictions.items():
        blended = moleculeace.product_blend(
            {"ensemble": parts["ensemble"], "trees": trees, "kernel": parts["kernel"]}, truth
        )
        figures[variant] = (moleculeace.rmse(trees, truth), moleculeace.rmse(blended, truth))
    return figures


def mean_ratios(figures: dict[str, dict[str, tuple[float, float]]], sets: Sequence[str]) -> tuple[float, float]:
    """``with_ecfp``'s mean over ``sets`` of its validation RMSE ratios to today's: the trees alone, the blend."""
    return tuple(
        float(np.mean([figures[name]["with_ecfp"][k] / figures[name]["today"][k] for name in sets])) for k in (0, 1)
    )


def verdict_text(figures: dict[str, dict[str, tuple[float, float]]]) -> str:
    """The table (per set and variant, validation RMSE alone / in the blend, and the ratios), the mean ratios over
    the judged sets and over the seen ones, and the rule's verdict, as Markdown; ``figures`` maps each set to
    :func:`set_figures`'s result."""
    lines = [
        "# Rule 17: the trees on the fingerprint counts too, on the validation rows",
        "",
        "Written by `python bench/small_data/tree_variants.py`. The rule, fixed before any figure of the judged sets: "
        f"the trees reading the descriptors and the Morgan counts replace today's (the descriptors alone) only if the "
        f"mean over {', '.join(JUDGED_SETS)} of their validation RMSE ratio to today's is at most {TREES_BOUND} and "
        f"the blend's (with {moleculeace.SHIPPED_ARM}'s network ensemble and kernel) at most {BLEND_BOUND}. "
        f"{', '.join(SEEN_SETS)} (whose trees figures rule 15 showed) are reported, not judged. Validation RMSE, the "
        "trees alone / the blend.",
        "",
        "| set | judged | today | with_ecfp | ratio |",
        "|---|---|---|---|---|",
    ]
    finished = {name: by_variant for name, by_variant in figures.items() if by_variant}
    for name, by_variant in finished.items():
        today, ecfp = by_variant["today"], by_variant["with_ecfp"]
        lines.append(
            f"| {name} | {'yes' if name in JUDGED_SETS else 'no (seen)'} | {today[0]:.4f} / {today[1]:.4f} | "
            f"{ecfp[0]:.4f} / {ecfp[1]:.4f} | {ecfp[0] / today[0]:.3f} / {ecfp[1] / today[1]:.3f} |"
        )
    missing = [name for name in JUDGED_SETS if not figures.get(name)]
    if missing:
        lines += ["", f"**No verdict yet**: not computed on {', '.join(missing)}."]
        return "\n".join(lines) + "\n"
    trees, blended = mean_ratios(figures, JUDGED_SETS)
    lines += ["", f"Mean ratios over the judged sets: trees {trees:.3f} (at most {TREES_BOUND}), blend {blended:.3f} "
              f"(at most {BLEND_BOUND})."]  # fmt: skip
    seen = [name for name in SEEN_SETS if figures.get(name)]
    if seen:
        seen_trees, seen_blend = mean_ratios(figures, seen)
        lines.append(f"Over the seen sets (not judged): trees {seen_trees:.3f}, blend {seen_blend:.3f}.")
    chosen = trees <= TREES_BOUND and blended <= BLEND_BOUND
    lines += ["", f"**The trees on the counts {'replace' if chosen else 'do not replace'} today's trees.**"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    moleculeace.variants_main(argv, __doc__.split("\n\n")[0], set_figures, verdict_text, "tree_variants.md")


if __name__ == "__main__":
    main()
