"""URPE's cost over RPE per training step, on fixed batches of chosen padded sizes, side by side.

    python bench/speed/urpe_overhead.py [--steps 10] [--sizes 16 24 24:51]
    PYTHONPATH=/path/to/other/checkout python bench/speed/urpe_overhead.py    # the same on another commit

Each size is a batch of 256 molecule-like graphs (``bench.common.random_molecule_record``): ``24`` = every
graph has 24 atoms (T = 25 with the graph token); ``24:51`` = 24 atoms, but one graph in 12 has 51
(T = 52, most of the batch padding, as in a batch that holds a rare large molecule). A step is
forward, backward and AdamW of the ZINC-configured Graphormer (12 layers, 80 wide, 8 heads, all
dropouts 0.1), one thread, timed in process CPU seconds; RPE and URPE steps alternate, and the
fastest and the median of ``--steps`` are printed with their ratios. The attention's extra work
grows with T^2 and the rest of the step with T, so the ratio depends on T: see
``docs/throughput.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

import graphormer_urpe
from bench.common import random_molecule_record
from graphormer_urpe.data.batch import GraphBatch, collate_graphs
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig


def batch_of(atoms: int, large: int, rng: np.random.Generator) -> GraphBatch:
    """256 graphs of ``atoms`` atoms, every 12th of ``large`` atoms."""
    return collate_graphs(
        [random_molecule_record(rng, large if index % 12 == 0 else atoms, index) for index in range(256)]
    )


def train_step(attention: str, batch: GraphBatch) -> Callable[[], None]:
    """One AdamW step of a fresh model with ``attention``, as a function of no arguments."""
    torch.manual_seed(0)
    model = Graphormer(
        GraphormerConfig(
            num_layers=12,
            hidden_dim=80,
            ffn_dim=80,
            num_heads=8,
            attention=attention,
            dropout=0.1,
            attention_dropout=0.1,
            activation_dropout=0.1,
        )
    )
    optimizer = torch.optim.AdamW(model.parameters())

    def step() -> None:
        loss = model(batch).abs().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sizes", nargs="+", default=["16", "24", "24:51"], help="ATOMS or ATOMS:LARGE")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, 1 thread; graphormer_urpe from {graphormer_urpe.__file__}")
    print(f"{'batch':>8} {'T':>3} {'RPE ms':>8} {'URPE ms':>8} {'URPE/RPE fastest':>17} {'median':>7}")
    for size in args.sizes:
        atoms, _, large = size.partition(":")
        batch = batch_of(int(atoms), int(large or atoms), rng)
        steps = {attention: train_step(attention, batch) for attention in ("rpe", "urpe")}
        times: dict[str, list[float]] = {attention: [] for attention in steps}
        for step in steps.values():  # warm-up
            step()
        for index in range(args.steps):
            for attention in steps if index % 2 == 0 else list(steps)[::-1]:
                started = time.process_time()
                steps[attention]()
                times[attention].append(time.process_time() - started)
        fastest = {attention: min(seconds) for attention, seconds in times.items()}
        median = {attention: statistics.median(seconds) for attention, seconds in times.items()}
        print(
            f"{size:>8} {batch.node_mask.shape[1] + 1:>3} {fastest['rpe'] * 1e3:>8.0f} {fastest['urpe'] * 1e3:>8.0f} "
            f"{fastest['urpe'] / fastest['rpe']:>17.3f} {median['urpe'] / median['rpe']:>7.3f}"
        )


if __name__ == "__main__":
    main()
