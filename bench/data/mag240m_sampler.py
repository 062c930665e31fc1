"""Sampled MAG240M subgraphs per second per DataLoader worker, and where the time goes.

    nice -n 10 python bench/data/mag240m_sampler.py --root /tmp/synthetic_mag_1m --papers 1000000

Generates a synthetic MAG240M-layout graph at ``--root`` if there is none (a test and benchmark
tool: graphormer_urpe.testing.mag240m_release), builds its derived files, then times the worker's
whole collate (sampling at the OGB-LSC baseline's fanouts [25, 15], SPD and first edges, feature
gathering, unpadded layout) in one process, i.e. one worker, by CPU time (``process_time``: other work on
a shared machine does not count), and side by side:

* the batched structure (SPD on bit sets in the workers, first edges from the SPD at padding)
  versus ``graph_structure`` run graph by graph on the same subgraphs and ``graph_structures``
  (the cache's batched version, which stacks graphs of equal size);
* the bytes a worker hands over per batch (unpadded) against the padded batch, and the CPU cost of
  padding in the training process (``CompactGraphBatch.pad``, first edges included; here on the
  CPU, on a GPU in training);
* the same collate inside a DataLoader with ``--workers`` processes (throughput per worker, by CPU
  seconds of the workers and by wall time: on a busy machine the latter is lower), the hand-over
  of each batch to the main process included: built in the workers' reused shared-memory slots
  (``SlotRing``, released as the training process does) versus PyTorch's copy of every batch into
  new shared memory.

Target: 1,000 subgraphs per second per worker (8 workers feed a batch of 1024 in about 0.1 s).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import numpy as np
import torch

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.mag240m.derived import MAG240MGraph, prepare_derived
from graphormer_urpe.data.mag240m.release import MAG240MRaw, NodeType
from graphormer_urpe.data.mag240m.sampler import CompactGraphBatch, NeighbourSampler, SubgraphCollator
from graphormer_urpe.data.mag240m.structure import batched_first_edges, batched_graph_structure
from graphormer_urpe.data.structure import graph_structure, graph_structures
from graphormer_urpe.testing.mag240m_release import SyntheticMAG, write_synthetic_mag240m


def open_graph(root: Path, papers: int) -> tuple[MAG240MRaw, MAG240MGraph]:
    raw = MAG240MRaw(root)
    if not (raw.directory / "meta.pt").is_file():
        write_synthetic_mag240m(root, SyntheticMAG(num_papers=papers))
    raw.check()
    prepare_derived(raw, raw.directory / "graphormer")
    return raw, MAG240MGraph(raw.directory, raw.directory / "graphormer", {t: raw.num_nodes(t) for t in NodeType})


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _nbytes(batch: CompactGraphBatch | GraphBatch) -> int:
    """Bytes of all tensors of a batch (the lease, a byte or None, aside)."""
    return sum(getattr(batch, f.name).nbytes for f in dataclasses.fields(batch) if f.name != "lease")


def subgraph_edges(sampler: NeighbourSampler, targets: np.ndarray, rng: np.random.Generator) -> list:
    """(n, edge_index) of each subgraph, as the batch builds them (for the per-graph baseline)."""
    batch = sampler.batch(targets, rng).pad()
    graphs = []
    for b in range(batch.num_graphs):
        n = int(batch.node_mask[b].sum())
        src, dst = np.nonzero(batch.spd[b, :n, :n].numpy() == 1)
        graphs.append((n, np.stack([src, dst])))
    return graphs


class _Phases(torch.utils.data.Sampler):
    """Item indices of the current phase: one DataLoader, persistent workers, an epoch per phase."""

    def __init__(self, phases: list[np.ndarray]) -> None:
        self.phases = phases
        self.current = 0

    def __iter__(self):
        return iter(self.phases[self.current].tolist())

    def __len__(self) -> int:
        return len(self.phases[self.current])


def loader_rates(graph: MAG240MGraph, args: argparse.Namespace, papers: np.ndarray, slots: int) -> dict[str, float]:
    """The collate in a DataLoader with ``--workers`` new processes, batches released as the
    training process does: one epoch over half of ``papers`` (the memory maps cold: every page a
    worker touches the first time costs a page fault, as in training on a graph far larger than
    this one), then one over the other half (steady state: on a 1M-paper graph most pages are
    mapped by then; the targets are still new to the workers).

    Returns:
        Subgraphs per worker CPU second in the ``cold`` and the ``steady`` epoch, per worker per
        wall second (``wall``, steady), and the main process's CPU milliseconds per batch
        (``main_ms``, receiving and releasing it).
    """
    items = [(0, int(p)) for p in papers]
    half = len(items) // 2
    phases = _Phases([np.arange(half), np.arange(half, len(items))])
    collate = SubgraphCollator(graph, args.fanouts, seed=0, slots=slots)
    loader = torch.utils.data.DataLoader(
        items,
        batch_size=args.batch,
        sampler=phases,
        collate_fn=collate,
        num_workers=args.workers,
        persistent_workers=True,
    )
    epoch = iter(loader)
    for batch in epoch:
        batch.release()
    workers = [w.pid for w in epoch._workers]
    cold_cpu = sum(_cpu_seconds(pid) for pid in workers)
    phases.current = 1
    start, main_start = time.perf_counter(), time.process_time()
    for batch in loader:  # batches cross into the main process through shared memory, as in training
        batch.release()
    wall, main = time.perf_counter() - start, time.process_time() - main_start
    steady_cpu = sum(_cpu_seconds(pid) for pid in workers) - cold_cpu
    return {
        "cold": half / cold_cpu,
        "steady": (len(items) - half) / steady_cpu,
        "wall": (len(items) - half) / wall / max(args.workers, 1),
        "main_ms": main * 1000 / len(loader),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--papers", type=int, default=1_000_000, help="size of the graph generated if missing")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[25, 15])
    parser.add_argument("--batch", type=int, default=32, help="targets per collate call (per-GPU batch)")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loader-batches", type=int, default=60, help="batches per DataLoader epoch (two epochs)")
    parser.add_argument("--rounds", type=int, default=3, help="DataLoader runs of each kind, interleaved")
    args = parser.parse_args()
    torch.set_num_threads(1)

    raw, graph = open_graph(args.root, args.papers)
    train = raw.splits()["train"]
    rng = np.random.default_rng(0)
    targets = [rng.choice(train, args.batch, replace=False) for _ in range(args.batches)]
    sampler = NeighbourSampler(graph, args.fanouts)
    collate = SubgraphCollator(graph, args.fanouts, seed=0)
    collate([(0, t) for t in targets[0]])  # map the files, warm the page cache

    start = time.process_time()
    nodes = edges = 0
    for batch_targets in targets:
        batch = collate([(0, t) for t in batch_targets])
        nodes += int(batch.num_nodes.sum())
        edges += len(batch.edge_dst)
    whole = time.process_time() - start
    pad_times = []
    for _ in range(5):  # in the training process, after the move to its device
        start = time.process_time()
        padded = batch.pad()
        pad_times.append(time.process_time() - start)
    padding = float(np.median(pad_times))
    handed_over, padded_bytes = _nbytes(batch) / 2**20, _nbytes(padded) / 2**20
    count = args.batch * args.batches
    start = time.process_time()
    for batch_targets in targets:  # the same pages again: no first-touch page faults on the memory maps
        collate([(0, t) for t in batch_targets])
    warm = time.process_time() - start

    start = time.process_time()
    for i, batch_targets in enumerate(targets):
        sampler.sample(batch_targets, np.random.default_rng(i))
    sampling = time.process_time() - start

    graphs = [subgraph_edges(sampler, t, np.random.default_rng(i)) for i, t in enumerate(targets[:5])]
    start = time.process_time()
    for group in graphs:
        sizes = np.array([n for n, _ in group])
        ptr = np.concatenate([[0], np.cumsum([e.shape[1] for _, e in group])])
        batched_graph_structure(sizes, np.concatenate([e for _, e in group], axis=1), ptr)
    batched_spd = time.process_time() - start
    compacts = [sampler.batch(t, np.random.default_rng(i)) for i, t in enumerate(targets[:5])]  # the same subgraphs
    padded_spd = [c.pad().spd for c in compacts]
    start = time.process_time()
    for compact, spd in zip(compacts, padded_spd):  # on the training device at padding; here on the CPU
        batched_first_edges(spd, compact.num_nodes, compact.out_degree, compact.edge_dst)
    batched_first = time.process_time() - start
    batched = batched_spd + batched_first
    start = time.process_time()
    for group in graphs:
        for n, e in group:
            graph_structure(n, e)
    per_graph = time.process_time() - start
    start = time.process_time()
    for group in graphs:
        graph_structures([n for n, _ in group], [e for _, e in group])
    stacked = time.process_time() - start
    structure_count = sum(len(g) for g in graphs)

    loader_papers = min(args.batch * args.loader_batches * 2, len(train))
    runs: dict[int, list[dict[str, float]]] = {4: [], 0: []}
    for run in range(args.rounds):  # interleaved; new workers each time: their memory maps start cold
        for slots in (4, 0) if run % 2 == 0 else (0, 4):
            runs[slots].append(loader_rates(graph, args, rng.permutation(train)[:loader_papers], slots))
    handover = {slots: {key: float(np.median([r[key] for r in rs])) for key in rs[0]} for slots, rs in runs.items()}

    print(
        f"graph: {graph.num_nodes[NodeType.PAPER]:,} papers, {graph.num_nodes[NodeType.AUTHOR]:,} authors, "
        f"{graph.num_nodes[NodeType.INSTITUTION]:,} institutions ({args.root})"
    )
    print(
        f"fanouts {args.fanouts}, {args.batch} targets per batch, {args.batches} batches; "
        f"mean subgraph: {nodes / count:.0f} nodes, {edges / count:.0f} directed edges"
    )
    print(f"{'one worker, whole collate (CPU time)':<44}{count / whole:>9.0f} subgraphs/s  (target 1,000)")
    print(f"{'  of which sampling':<44}{sampling / whole:>9.0%} of the time")
    print(f"{'  same batches again (memory maps warm)':<44}{count / warm:>9.0f} subgraphs/s")
    print(
        f"{'  bytes handed over, last batch':<44}{handed_over:>9.1f} MiB  (padded: {padded_bytes:.1f} MiB, "
        f"{padded_bytes / handed_over:.2f}x)"
    )
    print(
        f"{'  padding in the training process (CPU)':<44}{padding * 1000:>9.1f} ms per batch (median of 5), "
        f"first edges included"
    )
    ring_rounds = ", ".join(f"{r['steady']:.0f}" for r in runs[4])
    print(
        f"DataLoader, {args.workers} workers, per worker CPU second (target 1,000), {args.loader_batches} batches "
        f"per epoch, median of {args.rounds} interleaved rounds (steady with the ring: {ring_rounds}):"
    )
    print(f"{'':<44}{'steady':>9}{'cold maps':>11}{'wall/worker':>13}{'main ms/batch':>15}")
    for slots, label in ((4, "  slot ring (4 slots)"), (0, "  no ring: new shared memory per batch")):
        r = handover[slots]
        print(f"{label:<44}{r['steady']:>9.0f}{r['cold']:>11.0f}{r['wall']:>13.0f}{r['main_ms']:>15.1f}")
    print(
        f"{'  slot ring / no ring':<44}{handover[4]['steady'] / handover[0]['steady']:>8.2f}x"
        f"{handover[4]['cold'] / handover[0]['cold']:>10.2f}x"
    )
    print(
        f"{'SPD + first edges: batched':<44}{structure_count / batched:>9.0f} subgraphs/s  (SPD on bit sets "
        f"{batched_spd / batched:.0%}, in the workers; first edges {batched_first / batched:.0%}, at padding)"
    )
    print(
        f"{'SPD + first edges: graph_structure per graph':<44}{structure_count / per_graph:>9.0f} subgraphs/s"
        f"  (batched is {per_graph / batched:.1f}x faster)"
    )
    print(
        f"{'SPD + first edges: graph_structures (stacked)':<44}{structure_count / stacked:>9.0f} subgraphs/s"
        f"  (batched is {stacked / batched:.1f}x faster)"
    )


if __name__ == "__main__":
    main()
