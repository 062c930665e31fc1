"""The PyG path against our own pipeline, side by side in one run: preprocessing and batching.

    python bench/data/pyg_interop.py [--graphs 2000] [--batch 128]

On ZINC-sized molecules (``bench.common.zinc_like_graph``, one categorical node and edge column):

* preprocessing, once per dataset: ``GraphormerStructure`` (one graph per call, as a PyG
  ``pre_transform`` runs) against ``graph_structures`` (the cache's chunks: graphs of equal size
  stacked);
* batching, every step: PyG's collation (``Batch.from_data_list``, what its ``DataLoader`` does)
  plus ``to_graph_batch``, against ``collate_graphs`` of the cache's records; medians of all batches.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Batch, Data

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import zinc_like_graph
from graphormer_urpe import GraphormerStructure, GraphRecord, collate_graphs, to_graph_batch
from graphormer_urpe.data.structure import graph_structures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    graphs = [zinc_like_graph(rng) for _ in range(args.graphs)]
    features = [(rng.integers(0, 28, (n, 1)), rng.integers(0, 4, (e.shape[1], 1))) for n, e in graphs]

    started = time.perf_counter()
    transform = GraphormerStructure()
    data = [
        transform(Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(e), edge_attr=torch.from_numpy(a)))
        for (n, e), (x, a) in zip(graphs, features)
    ]
    pyg_seconds = time.perf_counter() - started
    started = time.perf_counter()
    flat = graph_structures([n for n, _ in graphs], [e for _, e in graphs])
    cache_seconds = time.perf_counter() - started
    print(
        f"preprocessing {args.graphs} molecules: GraphormerStructure {args.graphs / pyg_seconds:,.0f} graphs/s, "
        f"graph_structures (cache chunks) {args.graphs / cache_seconds:,.0f} graphs/s "
        f"(ratio {pyg_seconds / cache_seconds:.1f}x)"
    )

    records = []
    for k, ((n, e), (x, a)) in enumerate(zip(graphs, features)):
        pairs, nodes = slice(flat.pair_ptr[k], flat.pair_ptr[k + 1]), slice(flat.node_ptr[k], flat.node_ptr[k + 1])
        records.append(
            GraphRecord(
                x=x,
                edge_index=e,
                edge_attr=a,
                spd=flat.spd[pairs].reshape(n, n),
                first_edge=flat.first_edge[pairs].reshape(n, n),
                in_degree=flat.in_degree[nodes],
                out_degree=flat.out_degree[nodes],
                y=np.zeros(1, np.float32),
                index=k,
            )
        )
    collate_times, convert_times, ours_times = [], [], []
    for start in range(0, args.graphs - args.batch + 1, args.batch):
        started = time.perf_counter()
        batch = Batch.from_data_list(data[start : start + args.batch])
        collated = time.perf_counter()
        to_graph_batch(batch)
        collate_times.append(collated - started)
        convert_times.append(time.perf_counter() - collated)
        started = time.perf_counter()
        collate_graphs(records[start : start + args.batch])
        ours_times.append(time.perf_counter() - started)
    collate_ms, convert_ms = 1e3 * statistics.median(collate_times), 1e3 * statistics.median(convert_times)
    ours_ms = 1e3 * statistics.median(ours_times)
    print(
        f"batch of {args.batch}: PyG collation {collate_ms:.1f} ms + to_graph_batch {convert_ms:.1f} ms, "
        f"collate_graphs {ours_ms:.1f} ms (ratio {(collate_ms + convert_ms) / ours_ms:.2f}x; medians of "
        f"{len(ours_times)} batches)"
    )
    stored = sum(
        d.spd.numel() + 2 * d.first_edge.numel() + 2 * (d.in_degree.numel() + d.out_degree.numel()) for d in data
    )
    print(f"structure attributes: {stored / args.graphs:,.0f} bytes per molecule on average")


if __name__ == "__main__":
    main()
