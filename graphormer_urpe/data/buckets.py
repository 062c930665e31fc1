"""Size-aware batching: global batches of graphs of similar size, little padding (``docs/throughput.md``)."""

from __future__ import annotations

import numpy as np
import torch


def bucketed_batches(
    order: np.ndarray, sizes: np.ndarray, global_batch: int, window: int, generator: torch.Generator
) -> list[np.ndarray]:
    """Cut an epoch's shuffled ``order`` into global batches of similar-sized items: windows of ``window`` global
    batches sorted by size (stably), the full batches' order shuffled by ``generator``, a short last batch kept last.
    Shapes: order (L,) int; sizes (dataset size,) int -> list of (global_batch,) int arrays, each in ascending size.
    """
    if window < 1:
        raise ValueError(f"bucket window={window}: a window holds at least one global batch")
    span = window * global_batch
    batches: list[np.ndarray] = []
    for start in range(0, len(order), span):
        chunk = size_sorted(order[start : start + span], sizes)
        batches += [chunk[i : i + global_batch] for i in range(0, len(chunk), global_batch)]
    short = batches.pop() if batches and len(batches[-1]) < global_batch else None
    batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches if short is None else [*batches, short]


def size_sorted(positions: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``positions`` in ascending size, ties in their given order. Shapes: (L,), (dataset size,) -> (L,) int."""
    return positions[np.argsort(sizes[positions], kind="stable")]
