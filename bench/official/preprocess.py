"""Structural preprocessing speed: ours vs the official Graphormer algorithm, one core, one run.

    python bench/official/preprocess.py [--graphs 2000]

Both turn a ZINC-sized molecule (see ``bench.common.zinc_like_graph``) into what the model needs:

* ours: shortest-path distances by frontier expansion, the first edge of one shortest path per
  pair, and degrees, computed once and cached: one graph at a time (``graph_structure``) and as
  the cache builds them, a chunk at a time (``graph_structures``), also with ``path_order
  official`` (official Floyd-Warshall's paths, vectorised over the chunk);
* Graphormer-style: what the official ``preprocess_item`` computes on every access of every epoch,
  re-implemented here with the same algorithm: Floyd-Warshall with an intermediate-node path
  matrix (vectorised over (i, j) per k with numpy, faster than a scalar loop) and the
  ``[n, n, max_dist, F]`` edge-feature path tensor filled by the same per-pair recursive path walk
  in Python as ``algos.gen_edge_input``.

The figure for the official Cython build quoted in docs/benchmarks.md (about 550 molecules/s) comes from
the issue tracker; this script measures the re-implementation side by side with ours.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)

from bench.common import zinc_like_graph
from graphormer_urpe.data.structure import graph_structure, graph_structures

UNREACHABLE = 510  # the official code's "no path" distance


def floyd_warshall_with_paths(adjacency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distances and intermediate-node matrix, as ``algos.floyd_warshall`` (-1: direct edge)."""
    n = len(adjacency)
    dist = np.where(adjacency, 1, UNREACHABLE).astype(np.int64)
    np.fill_diagonal(dist, 0)
    path = np.full((n, n), -1, dtype=np.int64)
    for k in range(n):
        through_k = dist[:, k : k + 1] + dist[k : k + 1, :]
        better = through_k < dist
        dist = np.where(better, through_k, dist)
        path = np.where(better, k, path)
    path[dist >= UNREACHABLE] = UNREACHABLE
    return dist, path


def path_nodes(path: np.ndarray, i: int, j: int) -> list[int]:
    k = path[i, j]
    return [] if k == -1 else path_nodes(path, i, k) + [k] + path_nodes(path, k, j)


def official_style(n: int, edge_index: np.ndarray, edge_attr: np.ndarray) -> np.ndarray:
    """The per-graph work of the official ``preprocess_item``: SPD and the edge-path tensor."""
    adjacency = np.zeros((n, n), dtype=bool)
    adjacency[edge_index[0], edge_index[1]] = True
    attn_edge_type = np.zeros((n, n, edge_attr.shape[1]), dtype=np.int64)
    attn_edge_type[edge_index[0], edge_index[1]] = edge_attr + 1
    dist, path = floyd_warshall_with_paths(adjacency)
    max_dist = int(dist[dist < UNREACHABLE].max(initial=0))
    edge_input = -np.ones((n, n, max(max_dist, 1), edge_attr.shape[1]), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i == j or path[i, j] == UNREACHABLE:
                continue
            nodes = [i] + path_nodes(path, i, j) + [j]
            for hop in range(len(nodes) - 1):
                edge_input[i, j, hop] = attn_edge_type[nodes[hop], nodes[hop + 1]]
    return edge_input


def rate(fn, graphs) -> float:
    started = time.process_time()
    for graph in graphs:
        fn(*graph)
    return len(graphs) / (time.process_time() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    graphs = []
    for _ in range(args.graphs):
        n, edges = zinc_like_graph(rng)
        graphs.append((n, edges, rng.integers(1, 4, (edges.shape[1], 1))))
    ours = rate(lambda n, e, a: graph_structure(n, e), graphs)
    started = time.process_time()
    graph_structures([g[0] for g in graphs], [g[1] for g in graphs])
    batched = len(graphs) / (time.process_time() - started)
    started = time.process_time()
    graph_structures([g[0] for g in graphs], [g[1] for g in graphs], path_order="official")
    batched_official = len(graphs) / (time.process_time() - started)
    official = rate(official_style, graphs[: max(1, args.graphs // 4)])
    print(
        f"{args.graphs} ZINC-sized molecules ({np.mean([g[0] for g in graphs]):.1f} atoms on average), "
        f"one core, process CPU time"
    )
    print(f"{'method':64} {'molecules/s':>12}")
    print(f"{'ours: SPD + first edges + degrees, once':64} {ours:12.0f}")
    print(f"{'ours, a chunk at a time as the cache builds it':64} {batched:12.0f}")
    print(f"{'ours, a chunk at a time, path_order official (Floyd-Warshall paths)':64} {batched_official:12.0f}")
    print(f"{'Graphormer-style: Floyd-Warshall + edge-path tensor, per epoch':64} {official:12.0f}")
    print(f"speed-up: {ours / official:.1f}x per pass (and ours runs once, theirs every epoch)")


if __name__ == "__main__":
    main()
