"""Synthetic inputs shared by the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphormer_urpe.data.batch import GraphRecord
from graphormer_urpe.data.structure import graph_structure


def zinc_like_graph(rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """A random molecule-shaped graph with ZINC's statistics: 9-38 atoms (mean ~23), a spanning
    tree plus two ring-closing bonds, both directions of every bond listed. Returns (n, edge_index)."""
    n = int(np.clip(round(rng.normal(23.2, 4.5)), 9, 38))
    return n, molecule_like_edges(rng, n)


def molecule_like_edges(rng: np.random.Generator, n: int) -> np.ndarray:
    """(2, e) bonds of a random molecule-shaped graph of n atoms: a spanning tree plus two
    ring-closing bonds, both directions of every bond listed."""
    pairs = [(k, int(rng.integers(0, k))) for k in range(1, n)]
    pairs += [(int(a), int(b)) for a, b in (rng.integers(0, n, 2) for _ in range(2)) if a != b]
    half = np.array(pairs, dtype=np.int64).T
    return np.concatenate([half, half[::-1]], axis=1)


def structured_record(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, y: np.ndarray,
                      index: int) -> GraphRecord:
    """A graph with the structural arrays the cache stores for it (``graph_structure``)."""
    s = graph_structure(len(x), edge_index)
    return GraphRecord(x=x, edge_index=edge_index, edge_attr=edge_attr, spd=s.spd, first_edge=s.first_edge,
                       in_degree=s.in_degree, out_degree=s.out_degree, y=y, index=index)


def random_molecule_record(rng: np.random.Generator, atoms: int, index: int, node_vocab: Sequence[int] = (28,),
                           edge_vocab: Sequence[int] = (4,)) -> GraphRecord:
    """A molecule-shaped graph of ``atoms`` atoms (:func:`molecule_like_edges`), random categorical
    features in the vocabularies and one normal regression target."""
    edges = molecule_like_edges(rng, atoms)
    x = np.stack([rng.integers(0, v, atoms) for v in node_vocab], axis=1)
    edge_attr = np.stack([rng.integers(0, v, edges.shape[1]) for v in edge_vocab], axis=1)
    return structured_record(x, edges, edge_attr, rng.normal(size=1).astype(np.float32), index)


def qm9_pool_smiles(count: int, seed: int = 0) -> np.ndarray:
    """SMILES of the 30 first (smallest: 1-4 heavy atoms) and ``count`` random further QM9 molecules of the
    embedded ``qm9pack`` data. (30 + count,) object"""
    import pandas as pd

    from graphormer_urpe.data.sources.molecules import qm9pack_csvs

    smiles = pd.concat([pd.read_csv(p, usecols=["SMILES"]) for p in qm9pack_csvs()], ignore_index=True)["SMILES"]
    drawn = np.random.default_rng(seed).choice(len(smiles) - 30, count, replace=False)
    return smiles.to_numpy()[np.concatenate([np.arange(30), 30 + drawn])]


def qm9_molecules(count: int, seed: int = 0, pool: Path | None = None) -> list:
    """The molecules of :func:`qm9_pool_smiles` featurised like PCQM4Mv2, or those of ``pool``, a CSV of
    the same SMILES (column ``SMILES``; ``bench/gpu_bundle.py`` writes it, for machines without
    ``qm9pack``). Returns :class:`RawGraph` objects."""
    import pandas as pd

    from graphormer_urpe.data.batch import RawGraph
    from graphormer_urpe.data.sources.featurize import molecule_graphs

    smiles = qm9_pool_smiles(count, seed) if pool is None else pd.read_csv(pool)["SMILES"].to_numpy()
    if len(smiles) != 30 + count:
        raise SystemExit(f"{pool} holds {len(smiles)} SMILES, not the {30 + count} of a pool of {count}")
    graphs = molecule_graphs(smiles, np.zeros((len(smiles), 1), np.float32))
    return [g for g in graphs if isinstance(g, RawGraph)]


def joined_molecule(size: int, pool: list, by_size: dict[int, list[int]], rng: np.random.Generator):
    """A graph of exactly ``size`` heavy atoms made of real molecules from ``pool``: molecules that
    fit the atoms still missing are drawn at random and each is bonded (single bond) to a random
    atom of the ones before. Returns a :class:`RawGraph`. ``by_size`` maps a heavy-atom count to
    the positions in ``pool`` of the molecules of that size (every size 1 .. 9 must occur)."""
    from graphormer_urpe.data.batch import RawGraph

    xs, edges, attrs, offset = [], [], [], 0
    while offset < size:
        fitting = [n for n in by_size if n <= size - offset]
        n = int(rng.choice(fitting))
        part = pool[int(rng.choice(by_size[n]))]
        xs.append(part.x)
        edges.append(part.edge_index + offset)
        attrs.append(part.edge_attr)
        if offset:  # a single, non-conjugated bond to an atom placed before
            a, b = int(rng.integers(0, offset)), offset + int(rng.integers(0, n))
            edges.append(np.array([[a, b], [b, a]], dtype=np.int64))
            attrs.append(np.zeros((2, part.edge_attr.shape[1]), dtype=np.int64))
        offset += n
    return RawGraph(x=np.concatenate(xs), edge_index=np.concatenate(edges, axis=1), edge_attr=np.concatenate(attrs),
                    y=np.zeros(1, np.float32))


def padded_share(sizes: np.ndarray, batches: list[np.ndarray], world: int = 1, graph_token: bool = True) -> float:
    """Share of the attention entries of ``batches`` that are padding, when each of ``world``
    processes pads its slice of each batch to its largest graph (plus the graph token).

    Shapes:
        sizes: (dataset size,) int; batches: global batches of positions.
    """
    token = int(graph_token)
    useful = padded = 0
    for batch in batches:
        share = len(batch) // world
        for rank in range(world):
            tokens = sizes[batch[rank * share:(rank + 1) * share]].astype(np.int64) + token
            useful += int((tokens**2).sum())
            padded += len(tokens) * int(tokens.max()) ** 2
    return 1.0 - useful / padded
