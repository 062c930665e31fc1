"""ZINC's raw files as PyG downloads them (Benchmarking-GNNs pickles, subset index files; listed in
docs/reference/testing.md), generated small, for PyG's own ``ZINC`` to read in tests."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch


def write_zinc_raw(
    raw: Path,
    sizes: dict[str, int],
    subset_sizes: dict[str, int],
    seed: int = 0,
    atoms: Callable[[np.random.Generator], int] | None = None,
    rings: int = 0,
) -> dict:
    """Write ``sizes[split]`` random molecules per PyG split into ``raw`` (created; must not exist),
    ``subset_sizes[split]`` of them listed in its ``.index`` file; returns per split the molecules (dicts as in the
    pickles) and the subset's rows. A molecule has ``atoms(rng)`` atoms (default: 2 to 11), a random tree of bonds
    and up to ``rings`` ring-closing bonds (:func:`zinc_like_atoms` and ``rings=2`` give ZINC's sizes)."""
    rng = np.random.default_rng(seed)
    raw.mkdir(parents=True)
    molecules = {}
    for split, size in sizes.items():
        mols = []
        for _ in range(size):
            n = int(rng.integers(2, 12)) if atoms is None else atoms(rng)
            adjacency = torch.zeros(n, n, dtype=torch.long)
            for k in range(1, n):
                j, bond = int(rng.integers(0, k)), int(rng.integers(1, 4))
                adjacency[k, j] = adjacency[j, k] = bond
            for _ in range(rings):
                a, b = (int(i) for i in rng.integers(0, n, 2))
                if a != b and not adjacency[a, b]:
                    adjacency[a, b] = adjacency[b, a] = 1
            mols.append(
                {
                    "atom_type": torch.from_numpy(rng.integers(0, 28, n)),
                    "bond_type": adjacency,
                    "logP_SA_cycle_normalized": torch.tensor([float(rng.normal())]),
                    "num_atom": n,
                }
            )
        with open(raw / f"{split}.pickle", "wb") as f:
            pickle.dump(mols, f)
        subset = sorted(rng.choice(size, subset_sizes[split], replace=False).tolist())
        (raw / f"{split}.index").write_text(",".join(map(str, subset)) + "\n")
        molecules[split] = (mols, subset)
    return molecules


def zinc_like_atoms(rng: np.random.Generator) -> int:
    """Heavy atoms of a ZINC-sized molecule: normal(23.2, 4.5) rounded, clipped to ZINC's 9-38."""
    return int(np.clip(round(rng.normal(23.2, 4.5)), 9, 38))
