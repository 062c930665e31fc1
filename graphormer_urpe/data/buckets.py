"""Size-aware batching: global batches of graphs of similar size, so that little attention is padding.

A padded batch costs ``B * T^2`` attention entries where T is its largest graph (plus the graph
token), so one large molecule in a batch of small ones makes every graph pay for its size.
:func:`bucketed_batches` groups graphs of similar size without giving up randomness or any
guarantee of :mod:`graphormer_urpe.data.loaders`:

1. the epoch's seeded permutation (the one unbucketed training uses) is cut into *windows* of
   ``window`` global batches;
2. each window is sorted by graph size (stably: graphs of equal size keep their random order) and
   cut into global batches, which therefore hold graphs of neighbouring sizes;
3. the order of the full global batches of the epoch is shuffled with the same seeded generator;
   a short last batch (the epoch's remainder) stays last.

Every step is a function of (seed, epoch, sizes) only, so the global batches are the same for any
number of processes and a resumed run skips exactly the batches it has trained on. Each global batch
is listed in ascending size, so process r's contiguous slice holds graphs of similar size too and
pads little. :func:`size_sorted` orders an evaluation shard the same way; it still holds every graph
once, and metrics and predictions (gathered by graph index) do not depend on the order.

Items are dataset positions and sizes come from a per-position array, so any dataset with known
sizes (node counts, subgraph sizes) can use it.
"""

from __future__ import annotations

import numpy as np
import torch


def bucketed_batches(
    order: np.ndarray,
    sizes: np.ndarray,
    global_batch: int,
    window: int,
    generator: torch.Generator,
) -> list[np.ndarray]:
    """Cut an epoch order into global batches of similar-sized items (see the module docstring).

    Args:
        order: the epoch's (shuffled, padded) order of dataset positions.
        sizes: size of every dataset position (e.g. its node count).
        global_batch: items per global batch.
        window: global batches sorted together; 1 only sorts inside each batch.
        generator: seeded generator that shuffles the order of the full batches.

    Returns:
        The global batches in training order, each sorted by ascending size; all hold
        ``global_batch`` items except possibly the last.

    Shapes:
        order: (L,) int; sizes: (dataset size,) int -> list of (global_batch,) int arrays.
    """
    if window < 1:
        raise ValueError(f"bucket window={window}: a window holds at least one global batch")
    span = window * global_batch
    batches: list[np.ndarray] = []
    for start in range(0, len(order), span):
        chunk = order[start:start + span]
        chunk = chunk[np.argsort(sizes[chunk], kind="stable")]
        batches += [chunk[i:i + global_batch] for i in range(0, len(chunk), global_batch)]
    short = batches.pop() if batches and len(batches[-1]) < global_batch else None
    batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches if short is None else [*batches, short]


def size_sorted(positions: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``positions`` in ascending size, ties in their given order.

    Shapes:
        positions: (L,) int; sizes: (dataset size,) int -> (L,) int.
    """
    return positions[np.argsort(sizes[positions], kind="stable")]
