"""Training throughput at the ZINC configuration: RPE vs URPE, and FLOP/s against a large matmul.

    python bench/train_throughput.py [--batch-size 256] [--rounds 6]

One run measures everything side by side, interleaving the variants round by round so that both
see the same machine load: a full optimiser step (forward, backward, AdamW) of the 12-layer,
80-wide, 8-head Graphormer on ZINC-sized random molecules (9-38 atoms, mean ~23, trees plus two
ring bonds, padded per batch like real ZINC batches), and a 2048 x 2048 float32 matmul as the
machine's practical peak. FLOPs of a step are counted by ``torch.utils.flop_counter`` (matmuls,
padding included, i.e. what the hardware executes).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from common import zinc_like_graph
from graphormer_urpe.data.batch import GraphRecord, collate_graphs
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig


def zinc_like_batch(batch_size: int, seed: int = 0) -> list[GraphRecord]:
    """Random molecules with ZINC's size statistics (28 atom types, bond types 1-3)."""
    rng = np.random.default_rng(seed)
    records = []
    for index in range(batch_size):
        n, edges = zinc_like_graph(rng)
        s = graph_structure(n, edges)
        records.append(GraphRecord(
            x=rng.integers(0, 28, (n, 1)), edge_index=edges, edge_attr=rng.integers(1, 4, (edges.shape[1], 1)),
            spd=s.spd, first_edge=s.first_edge, in_degree=s.in_degree, out_degree=s.out_degree,
            y=rng.normal(size=1).astype(np.float32), index=index,
        ))
    return records


class Step:
    """One AdamW training step of a ZINC-configured Graphormer."""

    def __init__(self, attention: str, batch) -> None:
        torch.manual_seed(0)
        self.model = Graphormer(GraphormerConfig(attention=attention)).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.batch = batch

    def __call__(self) -> None:
        loss = (self.model(self.batch).squeeze(-1) - self.batch.y.squeeze(-1)).abs().mean()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def flops(self) -> int:
        with FlopCounterMode(display=False) as counter:
            self()
        return counter.get_total_flops()


def timed(fn) -> float:
    """CPU seconds of this process: on a shared machine, work done rather than waiting."""
    started = time.process_time()
    fn()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 = per-core figures)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    batch = collate_graphs(zinc_like_batch(args.batch_size))
    steps = {name: Step(name, batch) for name in ("rpe", "urpe")}
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    matmul_flops = 2 * 2048**3
    flops = {name: step.flops() for name, step in steps.items()}  # also warms up
    times: dict[str, list[float]] = {name: [] for name in (*steps, "matmul")}
    for round_index in range(args.rounds):
        order = list(steps) if round_index % 2 == 0 else list(steps)[::-1]  # no variant always goes first
        for name in order:
            times[name].append(timed(steps[name]))
        times["matmul"].append(min(timed(lambda: a @ b) for _ in range(3)))

    peak = matmul_flops / min(times["matmul"])
    real_nodes = int(batch.node_mask.sum())
    print(f"batch {args.batch_size} graphs, {real_nodes / args.batch_size:.1f} nodes/graph on average, padded to "
          f"{batch.x.shape[1]}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.rounds} interleaved rounds, fastest round of each (process CPU time)")
    print(f"matmul 2048x2048 fp32 peak: {peak / 1e9:.1f} GFLOP per CPU-second")
    print(f"{'variant':8} {'ms/step':>9} {'graphs/s':>9} {'GFLOP/step':>11} {'GFLOP/s':>8} {'of peak':>8}")
    for name in steps:
        seconds = min(times[name])
        rate = flops[name] / seconds
        print(f"{name:8} {seconds * 1e3:9.0f} {args.batch_size / seconds:9.0f} {flops[name] / 1e9:11.2f} "
              f"{rate / 1e9:8.1f} {rate / peak:8.0%}")
    ratio = statistics.median(u / r for u, r in zip(times["urpe"], times["rpe"]))
    print(f"URPE / RPE time per step: {ratio:.3f} (median of per-round ratios)")


if __name__ == "__main__":
    main()
