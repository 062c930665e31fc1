"""The lookup of B and C by relation id, side by side in one run: ``F.embedding`` vs one ``gather``.

    python bench/speed/relation_lookup.py [--batch 256] [--heads 8] [--relations 40] [--rounds 20]

Both compute ``out[b, h, i, j] = table[relation[b, i, j], h]`` as a contiguous ``(B, H, T, T)``
float32 tensor and its gradient with respect to the ``(R, H)`` table, for padded sizes T of
bucketed ZINC/PCQM4Mv2 batches (17, 25) and of a batch padded to PCQM4Mv2's largest molecule (52):

* *embedding*: ``F.embedding(relation, table, padding_idx).permute(0, 3, 1, 2).contiguous()``, the
  lookup Graphormer used before (and the official code's ``nn.Embedding``);
* *gather*: :func:`graphormer_urpe.model.attention.lookup_by_relation`, what the model uses now.

Times are process CPU milliseconds of forward + backward, fastest of ``--rounds``, one thread. A
Graphormer step looks up B (and, for URPE, C) once and back-propagates into each once.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from graphormer_urpe.constants import PAD_RELATION
from graphormer_urpe.model.attention import lookup_by_relation


def embedding_lookup(table: torch.Tensor, relation: torch.Tensor) -> torch.Tensor:
    """The former lookup. (R, H), (B, T, T) -> (B, H, T, T) contiguous"""
    return F.embedding(relation, table, padding_idx=PAD_RELATION).permute(0, 3, 1, 2).contiguous()


def fastest_ms(
    lookup: Callable, table: torch.Tensor, relation: torch.Tensor, upstream: torch.Tensor, rounds: int
) -> float:
    """Fastest forward + backward of ``lookup`` in CPU milliseconds."""
    best = float("inf")
    for _ in range(rounds):
        table.grad = None
        started = time.process_time()
        lookup(table, relation).backward(upstream)
        best = min(best, time.process_time() - started)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--relations", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, 1 thread; batch {args.batch}, {args.heads} heads, {args.relations} relation ids")
    print(f"{'T':>4} {'embedding ms':>13} {'gather ms':>10} {'speed-up':>9}")
    for tokens in (17, 25, 52):
        table = torch.randn(args.relations, args.heads, generator=generator).requires_grad_()
        relation = torch.randint(0, args.relations, (args.batch, tokens, tokens), generator=generator)
        upstream = torch.randn(args.batch, args.heads, tokens, tokens, generator=generator)
        embedding = fastest_ms(embedding_lookup, table, relation, upstream, args.rounds)
        gather = fastest_ms(lookup_by_relation, table, relation, upstream, args.rounds)
        print(f"{tokens:>4} {embedding:>13.2f} {gather:>10.2f} {embedding / gather:>8.1f}x")


if __name__ == "__main__":
    main()
