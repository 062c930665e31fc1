"""Training throughput: today's batching vs size-aware batching, RPE vs URPE, padded vs useful FLOPs.

    python bench/train_throughput.py                       # CPU, one thread: per-core figures
    python bench/train_throughput.py --device cuda --precision bf16-mixed [--compile]

Size distributions (``--distributions``), each a set of real molecules from the embedded QM9 data
(``qm9pack``), joined by single bonds until every graph has the drawn number of heavy atoms:

* ``zinc``: 9-38 atoms, mean ~23 (normal(23.2, 4.5), clipped), ZINC's statistics;
* ``pcqm``: PCQM4Mv2-like: 99.5% from normal(14, 3.2) clipped to 1-30, 0.5% uniform in 31-51
  (mean ~14, maximum 51; an assumed histogram with PCQM4Mv2's range and mean, as no PCQM4Mv2 data
  is embedded), so that most batches of 256 hold one molecule of 31 atoms or more;
* ``qm9``: QM9 itself (the default run's data), molecules drawn at random, 1-9 heavy atoms.

For each distribution the epoch's global batches are built by the project's own sampler
(:class:`~graphormer_urpe.data.loaders.GlobalBatchSampler`) with and without ``bucket_window``;
every batch of a short epoch is timed (the cost of a padded batch varies too much for a sample of
batches to stand for an epoch). A step is forward, backward and AdamW of the ZINC-configured
Graphormer (12 layers, 80 wide, 8 heads). The four variants (today/bucketed x RPE/URPE) are
interleaved batch by batch, so that all see the same machine load, and an epoch's time is the sum
over its batches of each batch's fastest round; on CPU the time is the process's CPU time, on CUDA
the wall time between synchronisations.

FLOPs are matmul FLOPs counted by ``torch.utils.flop_counter`` (forward and backward): *padded*
is what the padded batch executes, *useful* the sum over its graphs of the FLOPs of each graph
alone (no padding). The share of peak divides useful FLOP/s by a 2048 x 2048 matmul's FLOP/s in
the same dtype (slow for float16 on most CPUs: ``16-mixed`` is meant for CUDA).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from common import joined_molecule, padded_share, qm9_molecules, structured_record
from graphormer_urpe.data.batch import GraphBatch, GraphRecord, collate_graphs
from graphormer_urpe.data.loaders import GlobalBatchSampler
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig

#: QM9 molecules (besides the 30 smallest) that the joined molecules are made of.
POOL_SIZE = 4000
PRECISIONS = {"32": None, "16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


def draw_sizes(distribution: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """Heavy-atom counts of ``count`` molecules (see the module docstring). (count,) int"""
    if distribution == "zinc":
        return np.clip(np.round(rng.normal(23.2, 4.5, count)), 9, 38).astype(np.int64)
    sizes = np.clip(np.round(rng.normal(14.0, 3.2, count)), 1, 30).astype(np.int64)
    large = rng.random(count) < 0.005
    sizes[large] = rng.integers(31, 52, int(large.sum()))
    return sizes


def molecules(distribution: str, count: int, pool: list, rng: np.random.Generator) -> list[GraphRecord]:
    """``count`` molecules of ``distribution`` with their structural arrays, as the cache serves them:
    joined QM9 molecules of the drawn sizes, or (``qm9``) the pool's molecules themselves."""
    if distribution == "qm9":
        raws = [pool[i] for i in rng.integers(0, len(pool), count)]
    else:
        by_size: dict[int, list[int]] = {}
        for position, graph in enumerate(pool):
            by_size.setdefault(len(graph.x), []).append(position)
        raws = [joined_molecule(int(size), pool, by_size, rng) for size in draw_sizes(distribution, count, rng)]
    return [structured_record(raw.x, raw.edge_index, raw.edge_attr, rng.normal(size=1).astype(np.float32), index)
            for index, raw in enumerate(raws)]


class Step:
    """One AdamW training step of a ZINC-configured Graphormer on molecules.

    Args:
        attention: ``rpe`` or ``urpe``.
        device: where the model runs.
        precision: a key of :data:`PRECISIONS` (autocast dtype; ``16-mixed`` scales the loss).
        compile: run the model through ``torch.compile``.
    """

    def __init__(self, attention: str, device: torch.device, precision: str, compile: bool) -> None:
        torch.manual_seed(0)
        config = GraphormerConfig(node_vocab=ATOM_VOCAB, edge_vocab=BOND_VOCAB, attention=attention)
        self.model = Graphormer(config).to(device).train()
        self.forward = torch.compile(self.model, dynamic=True) if compile else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.device = device
        self.dtype = PRECISIONS[precision]
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.dtype is torch.float16)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision as Lightning's ``precision`` does it (nothing for 32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def __call__(self, batch: GraphBatch) -> None:
        with self.autocast():
            prediction = self.forward(batch)
        loss = (prediction.squeeze(-1).float() - batch.y.squeeze(-1)).abs().mean()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def flops(self, batch: GraphBatch) -> int:
        """Matmul FLOPs of forward and backward on ``batch`` (no optimiser step, no compile)."""
        with FlopCounterMode(display=False) as counter, self.autocast():
            prediction = self.model(batch)
            (prediction.float() - batch.y).abs().mean().backward()
        self.model.zero_grad(set_to_none=True)
        return counter.get_total_flops()


class Clock:
    """Seconds of one call: process CPU time on CPU (work done, not waiting on a shared machine),
    synchronised wall time on CUDA; tracks CUDA peak memory."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __call__(self, fn: Callable[[], None]) -> float:
        if self.device.type != "cuda":
            started = time.process_time()
            fn()
            return time.process_time() - started
        torch.cuda.synchronize(self.device)
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - started

    @contextlib.contextmanager
    def peak_memory(self, into: list[int]) -> Iterator[None]:
        """Append the CUDA peak memory (bytes) of the block to ``into`` (nothing on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        yield
        if self.device.type == "cuda":
            into.append(torch.cuda.max_memory_allocated(self.device))


def matmul_peak(device: torch.device, dtype: torch.dtype | None, clock: Clock) -> float:
    """FLOP/s of a 2048 x 2048 matmul (fastest of 3) in ``dtype`` (float32 for None)."""
    a, b = (torch.randn(2048, 2048, device=device, dtype=dtype or torch.float32) for _ in range(2))
    a @ b  # warm-up
    return 2 * 2048**3 / min(clock(lambda: a @ b) for _ in range(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distributions", nargs="+", default=["zinc", "pcqm"], choices=["zinc", "pcqm", "qm9"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epoch-batches", type=int, default=16, help="global batches in the simulated epoch")
    parser.add_argument("--window", type=int, default=100, help="bucket_window of the size-aware batching")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (1 = per-core figures)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="32", choices=list(PRECISIONS))
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (dynamic shapes)")
    parser.add_argument("--pool", type=Path, default=None,
                        help="CSV of the pool's SMILES (bench/gpu_bundle.py writes one) instead of qm9pack's")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    clock = Clock(device)
    rng = np.random.default_rng(0)
    pool = qm9_molecules(POOL_SIZE, pool=args.pool)
    steps = {name: Step(name, device, args.precision, args.compile) for name in ("rpe", "urpe")}
    peak = matmul_peak(device, PRECISIONS[args.precision], clock)
    unit = "CPU-second" if device.type == "cpu" else "second"
    print(f"torch {torch.__version__}, {device}, precision {args.precision}, compile {args.compile}, "
          f"{torch.get_num_threads()} threads; global batch {args.batch_size}, bucket_window {args.window}, "
          f"every batch of an epoch of {args.epoch_batches}, {args.rounds} interleaved rounds")
    print(f"matmul 2048x2048 peak: {peak / 1e9:.1f} GFLOP per {unit}")

    for distribution in args.distributions:
        count = args.batch_size * args.epoch_batches
        records = molecules(distribution, count, pool, rng)
        sizes = np.array([len(r.x) for r in records])
        dataset = range(count)
        batchings = {
            "today": GlobalBatchSampler(dataset, args.batch_size, seed=0).epoch_batches(0),
            "bucketed": GlobalBatchSampler(dataset, args.batch_size, seed=0, sizes=sizes,
                                           bucket_window=args.window).epoch_batches(0),
        }
        timed_batches = {name: [collate_graphs([records[i] for i in b]).to(device) for b in batches]
                         for name, batches in batchings.items()}
        print(f"\n{distribution}: {count} molecules, {sizes.min()}-{sizes.max()} atoms, mean {sizes.mean():.1f}; "
              "attention entries that are padding over the epoch: "
              + ", ".join(f"{name} {padded_share(sizes, [np.array(b) for b in batches]):.0%}"
                          for name, batches in batchings.items()))
        # useful FLOPs per graph size: each size alone, no padding
        alone = {(a, n): steps[a].flops(collate_graphs([records[int(np.flatnonzero(sizes == n)[0])]]).to(device))
                 for a in steps for n in np.unique(sizes)}
        flops = {(a, name): (sum(steps[a].flops(batch) for batch in batches),
                             sum(alone[a, int(n)] for batch in batches for n in batch.node_mask.sum(1).tolist()))
                 for a in steps for name, batches in timed_batches.items()}  # sums over the epoch
        for batches in timed_batches.values():  # warm-up (and compilation) of every variant
            for step in steps.values():
                step(batches[0])
        # every batch position is timed for all four variants back to back (in alternating order), so
        # RPE and URPE, today and bucketed, see the same machine load; each batch keeps its fastest round
        times = {key: np.full((args.rounds, args.epoch_batches), np.inf) for key in flops}  # seconds
        memory: dict[tuple[str, str], list[int]] = {key: [] for key in flops}
        keys = list(times)
        for round_index in range(args.rounds):
            for position in range(args.epoch_batches):
                for attention, name in keys if (round_index + position) % 2 == 0 else keys[::-1]:
                    run = functools.partial(steps[attention], timed_batches[name][position])
                    with clock.peak_memory(memory[attention, name]):
                        times[attention, name][round_index, position] = clock(run)
        epoch = {key: seconds.min(axis=0).sum() for key, seconds in times.items()}  # fastest round of each batch
        rounds = {key: seconds.sum(axis=1) for key, seconds in times.items()}  # (rounds,) whole epochs
        epoch_steps = args.epoch_batches
        graphs = args.batch_size * epoch_steps
        header = (f"{'batching':9} {'attention':9} {'GFLOP/step padded':>17} {'useful':>7} "
                  f"{'graphs/' + unit:>17} {'useful of peak':>14}")
        print(header + ("  peak memory" if device.type == "cuda" else ""))
        for attention, name in keys:
            padded, useful = (f / epoch_steps for f in flops[attention, name])
            best = epoch[attention, name]
            line = (f"{name:9} {attention:9} {padded / 1e9:17.2f} {useful / 1e9:7.2f} {graphs / best:17.0f} "
                    f"{useful * epoch_steps / best / peak:14.0%}")
            if memory[attention, name]:
                line += f"  {max(memory[attention, name]) / 2**30:8.2f} GiB"
            print(line)
        for attention in steps:
            speedup = epoch[attention, "today"] / epoch[attention, "bucketed"]
            print(f"size-aware / today, {attention}: {speedup:.2f}x graphs per {unit}")
        for name in timed_batches:
            best = epoch["urpe", name] / epoch["rpe", name]
            median = statistics.median(rounds["urpe", name] / rounds["rpe", name])
            print(f"URPE / RPE time per step, {name}: {best:.3f} (each batch's fastest round), {median:.3f} "
                  "(median of per-round ratios)")

if __name__ == "__main__":
    main()
