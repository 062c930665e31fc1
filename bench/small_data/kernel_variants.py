"""Rule 12 of docs/small-data.md: another fingerprint for the recipe's kernel part, chosen on MoleculeACE's
validation rows only.

    python bench/small_data/kernel_variants.py   # bench/results/moleculeace/kernel_variants.md

Each variant (:data:`VARIANTS`) is a Gaussian process as the recipe's kernel part
(:class:`graphormer_urpe.evaluation.kernel.Posterior`: noise by marginal likelihood) on the mean of Tanimoto's
kernel on the count fingerprints it names (each 2,048 positions, counts capped at 255), fitted on a set's training
rows. Scored on the set's validation rows alone, and in the blend that the recipe's rule (inverse MSE, parts within
1.5x of the best) makes of it with the shipped arm's stored network ensemble and trees. ``today`` is the recipe's
own kernel (ECFP4), so its figure is the stored kernel's. No test row is read.

The rule, fixed before any figure: the variant with the lowest mean over the sets of its validation RMSE relative to
``today``'s replaces the kernel only if that mean is at most :data:`KERNEL_BOUND` and its blend's at most
:data:`BLEND_BOUND`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdFingerprintGenerator

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.small_data import moleculeace
from graphormer_urpe.evaluation.kernel import MAX_COUNT, Posterior, tanimoto

#: Positions of every fingerprint here, as the recipe's.
BITS = 2048


@functools.cache
def generator(name: str):
    """RDKit's generator of the count fingerprint ``name``: Morgan radius 2 (``ecfp4``, the recipe's) or 3
    (``ecfp6``), Morgan on pharmacophoric atom features (``fcfp4``), atom pairs (``atompairs``)."""
    if name == "atompairs":
        return rdFingerprintGenerator.GetAtomPairGenerator(fpSize=BITS)
    if name == "fcfp4":
        features = rdFingerprintGenerator.GetMorganFeatureAtomInvGen()
        return rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=BITS, atomInvariantsGenerator=features)
    return rdFingerprintGenerator.GetMorganGenerator(radius={"ecfp4": 2, "ecfp6": 3}[name], fpSize=BITS)


#: Each variant: the fingerprints whose Tanimoto kernels it averages.
VARIANTS = {
    "today": ("ecfp4",),
    "ecfp6": ("ecfp6",),
    "ecfp4+atompairs": ("ecfp4", "atompairs"),
    "ecfp4+fcfp4": ("ecfp4", "fcfp4"),
}
#: The chosen variant's mean validation RMSE ratios to today's kernel, alone and in the blend, must be at most these.
KERNEL_BOUND = 0.98
BLEND_BOUND = 0.99


def counts(smiles: Sequence[str], name: str) -> np.ndarray:
    """The count fingerprints ``name`` of the molecules. Shapes: (N, BITS) uint8."""
    rows = [generator(name).GetCountFingerprintAsNumPy(Chem.MolFromSmiles(text)) for text in smiles]
    return np.minimum(np.stack(rows), MAX_COUNT).astype(np.uint8)


def kernel_matrices(train: Sequence[str], valid: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per fingerprint of :data:`VARIANTS`, Tanimoto's kernel among the training molecules and from the validation
    molecules to them, computed once for every variant that averages it. Shapes: (T, T), (V, T)."""
    matrices = {}
    for name in sorted({name for names in VARIANTS.values() for name in names}):
        train_counts = counts(train, name)
        matrices[name] = (tanimoto(train_counts, train_counts), tanimoto(counts(valid, name), train_counts))
    return matrices


def variant_prediction(
    variant: str, matrices: dict[str, tuple[np.ndarray, np.ndarray]], targets: np.ndarray
) -> np.ndarray:
    """The variant's process fitted on the training molecules (``targets``, (T,)), at the validation molecules, from
    :func:`kernel_matrices`. Shapes: (V,)."""
    names = VARIANTS[variant]
    posterior = Posterior.fit(np.mean([matrices[name][0] for name in names], axis=0), targets)
    return posterior.mean + np.mean([matrices[name][1] for name in names], axis=0) @ posterior.weights


def set_figures(name: str) -> dict[str, tuple[float, float]]:
    """Per variant, its validation RMSE alone and in the blend, on set ``name``; empty where the shipped arm has
    not finished there."""
    shipped = moleculeace.shipped_validation(name)
    if shipped is None:
        return {}
    parts, train, valid, truth = shipped.parts, shipped.train, shipped.valid, shipped.truth
    matrices = kernel_matrices(list(train["smiles"]), list(valid["smiles"]))
    figures = {}
    for variant in VARIANTS:
        kernel = variant_prediction(variant, matrices, train["y"].to_numpy(np.float64))
        blended = moleculeace.product_blend(
            {"ensemble": parts["ensemble"], "trees": parts["trees"], "kernel": kernel}, truth
        )
        figures[variant] = (moleculeace.rmse(kernel, truth), moleculeace.rmse(blended, truth))
    return figures


def verdict_text(figures: dict[str, dict[str, tuple[float, float]]]) -> str:
    """The table (per set and variant, validation RMSE alone / in the blend), the mean ratios to ``today`` and the
    rule's verdict, as Markdown; ``figures`` maps each set to :func:`set_figures`'s result."""
    lines = [
        "# Rule 12: another fingerprint for the kernel, on the validation rows",
        "",
        "Written by `python bench/small_data/kernel_variants.py`. The rule, fixed before any figure: the variant with "
        f"the lowest mean validation RMSE ratio to today's kernel replaces it only if that mean is at most "
        f"{KERNEL_BOUND} and its blend's (with {moleculeace.SHIPPED_ARM}'s network ensemble and trees) at most "
        f"{BLEND_BOUND}. Validation RMSE, the kernel alone / the blend.",
        "",
        f"| set | {' | '.join(VARIANTS)} |",
        f"|---|{'---|' * len(VARIANTS)}",
    ]
    finished = {name: by_variant for name, by_variant in figures.items() if by_variant}
    for name, by_variant in finished.items():
        cells = [f"{by_variant[v][0]:.4f} / {by_variant[v][1]:.4f}" for v in VARIANTS]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    missing = [name for name, by_variant in figures.items() if not by_variant]
    if missing:
        lines += ["", f"**No verdict yet**: {moleculeace.SHIPPED_ARM} has not finished on {', '.join(missing)}."]
        return "\n".join(lines) + "\n"
    ratios = {
        variant: tuple(
            float(np.mean([by_variant[variant][k] / by_variant["today"][k] for by_variant in finished.values()]))
            for k in (0, 1)
        )
        for variant in VARIANTS
        if variant != "today"
    }
    cells = [f"{ratios[v][0]:.3f} / {ratios[v][1]:.3f}" if v in ratios else "1 / 1" for v in VARIANTS]
    lines += [f"| mean ratio | {' | '.join(cells)} |", ""]
    best = min(ratios, key=lambda variant: ratios[variant][0])
    chosen = ratios[best][0] <= KERNEL_BOUND and ratios[best][1] <= BLEND_BOUND
    lines.append(f"**{best} {'replaces' if chosen else 'does not replace'} today's kernel.**")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    moleculeace.variants_main(argv, __doc__.split("\n\n")[0], set_figures, verdict_text, "kernel_variants.md")


if __name__ == "__main__":
    main()
