"""ZINC's raw files as PyG downloads them (Benchmarking-GNNs pickles, subset index files; listed in
docs/reference/testing.md), generated small, for PyG's own ``ZINC`` to read in tests."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch


def write_zinc_raw(raw: Path, sizes: dict[str, int], subset_sizes: dict[str, int], seed: int = 0) -> dict:
    """Write ``sizes[split]`` random molecules (2 to 11 atoms, a random tree of bonds) per PyG split into ``raw``
    (created; must not exist), ``subset_sizes[split]`` of them listed in its ``.index`` file; returns per split the
    molecules (dicts as in the pickles) and the subset's rows."""
    rng = np.random.default_rng(seed)
    raw.mkdir(parents=True)
    molecules = {}
    for split, size in sizes.items():
        mols = []
        for _ in range(size):
            n = int(rng.integers(2, 12))
            adjacency = torch.zeros(n, n, dtype=torch.long)
            for k in range(1, n):
                j, bond = int(rng.integers(0, k)), int(rng.integers(1, 4))
                adjacency[k, j] = adjacency[j, k] = bond
            mols.append({"atom_type": torch.from_numpy(rng.integers(0, 28, n)), "bond_type": adjacency,
                         "logP_SA_cycle_normalized": torch.tensor([float(rng.normal())]), "num_atom": n})
        with open(raw / f"{split}.pickle", "wb") as f:
            pickle.dump(mols, f)
        subset = sorted(rng.choice(size, subset_sizes[split], replace=False).tolist())
        (raw / f"{split}.index").write_text(",".join(map(str, subset)) + "\n")
        molecules[split] = (mols, subset)
    return molecules
