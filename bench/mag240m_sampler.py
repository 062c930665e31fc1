"""Sampled MAG240M subgraphs per second per DataLoader worker, and where the time goes.

    nice -n 10 python -m bench.mag240m_sampler --root /tmp/synthetic_mag_1m --papers 1000000

Generates a synthetic MAG240M-layout graph at ``--root`` if there is none (a test and benchmark
tool: graphormer_urpe.data.mag240m_synthetic), builds its derived files, then times the worker's
whole collate (sampling at the OGB-LSC baseline's fanouts [25, 15], SPD and first edges, feature
gathering, unpadded layout) in one process, i.e. one worker, by CPU time (``process_time``: other work on
a shared machine does not count), and side by side:

* the batched bit-set structure versus ``graph_structure`` run graph by graph on the same subgraphs
  and ``graph_structures`` (the cache's batched version, which stacks graphs of equal size);
* the bytes a worker hands over per batch (unpadded) against the padded batch, and the CPU cost of
  padding in the training process (``CompactGraphBatch.pad``, here on the CPU);
* the same collate inside a DataLoader with ``--workers`` processes (throughput per worker, by CPU
  seconds of the workers and by wall time: on a busy machine the latter is lower), the hand-over
  of each batch through shared memory included.

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

from graphormer_urpe.data.batch import CompactGraphBatch, GraphBatch
from graphormer_urpe.data.batched_structure import batched_graph_structure
from graphormer_urpe.data.mag240m import MAG240MGraph, MAG240MRaw, NodeType, prepare_derived
from graphormer_urpe.data.mag240m_sampler import NeighbourSampler, SubgraphCollator
from graphormer_urpe.data.mag240m_synthetic import SyntheticMAG, write_synthetic_mag240m
from graphormer_urpe.data.transforms import graph_structure, graph_structures


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
    """Bytes of all tensors of a batch."""
    return sum(getattr(batch, f.name).nbytes for f in dataclasses.fields(batch))


def subgraph_edges(sampler: NeighbourSampler, targets: np.ndarray, rng: np.random.Generator) -> list:
    """(n, edge_index) of each subgraph, as the batch builds them (for the per-graph baseline)."""
    batch = sampler.batch(targets, rng).pad()
    graphs = []
    for b in range(batch.num_graphs):
        n = int(batch.node_mask[b].sum())
        src, dst = np.nonzero(batch.spd[b, :n, :n].numpy() == 1)
        graphs.append((n, np.stack([src, dst])))
    return graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--papers", type=int, default=1_000_000, help="size of the graph generated if missing")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[25, 15])
    parser.add_argument("--batch", type=int, default=32, help="targets per collate call (per-GPU batch)")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
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
    start = time.process_time()
    padded = batch.pad()  # in the training process, after the move to its device
    padding = time.process_time() - start
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
    batched = time.process_time() - start
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

    items = [(0, int(t)) for t in np.concatenate(targets)]
    loader = torch.utils.data.DataLoader(items, batch_size=args.batch, collate_fn=collate,
                                         num_workers=args.workers, persistent_workers=True)
    epoch = iter(loader)
    for _ in epoch:  # start the workers, map the files
        pass
    workers = [w.pid for w in epoch._workers]
    cpu_before = sum(_cpu_seconds(pid) for pid in workers)
    start = time.perf_counter()
    for _ in loader:  # batches cross into the main process through shared memory, as in training
        pass
    loader_rate = count / (time.perf_counter() - start) / max(args.workers, 1)
    loader_cpu_rate = count / (sum(_cpu_seconds(pid) for pid in workers) - cpu_before)

    print(f"graph: {graph.num_nodes[NodeType.PAPER]:,} papers, {graph.num_nodes[NodeType.AUTHOR]:,} authors, "
          f"{graph.num_nodes[NodeType.INSTITUTION]:,} institutions ({args.root})")
    print(f"fanouts {args.fanouts}, {args.batch} targets per batch, {args.batches} batches; "
          f"mean subgraph: {nodes / count:.0f} nodes, {edges / count:.0f} directed edges")
    print(f"{'one worker, whole collate (CPU time)':<44}{count / whole:>9.0f} subgraphs/s  (target 1,000)")
    print(f"{'  of which sampling':<44}{sampling / whole:>9.0%} of the time")
    print(f"{'  same batches again (memory maps warm)':<44}{count / warm:>9.0f} subgraphs/s")
    print(f"{'  bytes handed over, last batch':<44}{handed_over:>9.1f} MiB  (padded: {padded_bytes:.1f} MiB, "
          f"{padded_bytes / handed_over:.2f}x)")
    print(f"{'  padding in the training process (CPU)':<44}{padding * 1000:>9.1f} ms per batch")
    print(f"{'DataLoader, per worker CPU second':<44}{loader_cpu_rate:>9.0f} subgraphs/s  ({args.workers} workers, "
          f"incl. the hand-over to the main process)")
    print(f"{'DataLoader, per worker (wall time)':<44}{loader_rate:>9.0f} subgraphs/s  (lower on a busy machine)")
    print(f"{'SPD + first edges: batched bit sets':<44}{structure_count / batched:>9.0f} subgraphs/s")
    print(f"{'SPD + first edges: graph_structure per graph':<44}{structure_count / per_graph:>9.0f} subgraphs/s"
          f"  (bit sets are {per_graph / batched:.1f}x faster)")
    print(f"{'SPD + first edges: graph_structures (stacked)':<44}{structure_count / stacked:>9.0f} subgraphs/s"
          f"  (bit sets are {stacked / batched:.1f}x faster)")


if __name__ == "__main__":
    main()
