"""Synthetic inputs shared by the benchmarks."""

from __future__ import annotations

import numpy as np


def zinc_like_graph(rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """A random molecule-shaped graph with ZINC's statistics: 9-38 atoms (mean ~23), a spanning
    tree plus two ring-closing bonds, both directions of every bond listed. Returns (n, edge_index)."""
    n = int(np.clip(round(rng.normal(23.2, 4.5)), 9, 38))
    return n, molecule_like_edges(rng, n)


def molecule_like_edges(rng: np.random.Generator, n: int) -> np.ndarray:
    """(2, e) bonds of a random molecule-shaped graph of n atoms: a spanning tree plus two
    ring-closing bonds, both directions of every bond listed."""
    pairs = [(k, int(rng.integers(0, k))) for k in range(1, n)]
    pairs += [(int(a), int(b)) for a, b in (rng.integers(0, n, 2) for _ in range(2)) if a != b]
    half = np.array(pairs, dtype=np.int64).T
    return np.concatenate([half, half[::-1]], axis=1)
