"""The preprocessed-graph cache: flat arrays plus offsets, built in parallel, resumable chunks.

Layout of one cache directory (``ROOT/<dataset>/processed/<name>-<key hash>/``)::

    manifest.json          key, totals, chunk list; written last, so its presence means "complete"
    splits.npz             source rows of every split (train/valid/test ...)
    chunk_00000/           one chunk of consecutive source rows
        chunk.json         rows covered, graphs kept, skipped rows with reasons, file sizes + CRC32
        x.npy              (sum n, F) int16      node features
        in_degree.npy      (sum n,) int16        out_degree.npy (sum n,) int16
        edge_index.npy     (sum e, 2) int16      local node ids
        edge_attr.npy      (sum e, Fe) int16
        spd.npy            (sum n^2,) uint8      first_edge.npy (sum n^2,) int16
        y.npy              (G, Y) float32        source_row.npy (G,) int64
        node_ptr.npy, edge_ptr.npy, pair_ptr.npy   (G + 1,) int64 offsets

Every array is opened with ``np.load(mmap_mode="r")``: DataLoader workers share the page cache
instead of each holding millions of Python objects. A chunk is written to a temporary directory
and renamed into place only when complete, so an interrupted build resumes at the first missing
chunk; a chunk whose files do not match their recorded sizes and checksums is rebuilt, never used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import shutil
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm.auto import tqdm

from graphormer_urpe.data.batch import GraphRecord
from graphormer_urpe.data.featurize import RawGraph
from graphormer_urpe.data.transforms import MAX_NODES, graph_structure

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
MANIFEST = "manifest.json"
CHUNK_META = "chunk.json"
SPLITS = "splits.npz"
#: Skipped rows listed by index in logs and manifests (the count is always complete).
SHOWN_SKIPS = 10


class CacheError(RuntimeError):
    """A cache file is missing, truncated or inconsistent."""


class RowReader(Protocol):
    """Raw rows of a dataset, readable in any order from worker processes."""

    num_rows: int

    def graphs(self, start: int, stop: int) -> Iterator[tuple[int, RawGraph | str]]:
        """Rows ``start .. stop - 1`` as ``(row, graph)`` or ``(row, reason it is unusable)``."""


@dataclass(frozen=True)
class GraphSpec:
    """What every graph of a dataset looks like; graphs that do not match are skipped and counted.

    Args:
        node_vocab: values per node-feature column; every value must be below it.
        edge_vocab: values per edge-feature column.
        num_targets: Y, targets per graph.
        max_nodes: larger graphs are skipped and counted.
    """

    node_vocab: Sequence[int]
    edge_vocab: Sequence[int]
    num_targets: int
    max_nodes: int = 512

    def problem(self, graph: RawGraph) -> str | None:
        """Why ``graph`` cannot be cached, or None."""
        n = graph.x.shape[0]
        if len(graph.y) != self.num_targets:
            return f"{len(graph.y)} targets, expected {self.num_targets}"
        if n == 0:
            return "no nodes"
        if n > min(self.max_nodes, MAX_NODES):
            return f"{n} nodes > max_nodes={self.max_nodes}"
        if graph.edge_index.size and (graph.edge_index.min() < 0 or graph.edge_index.max() >= n):
            return "edge_index refers to a missing node"
        for name, values, vocab in (("node", graph.x, self.node_vocab), ("edge", graph.edge_attr, self.edge_vocab)):
            if values.shape[1] != len(vocab):
                return f"{values.shape[1]} {name}-feature columns, expected {len(vocab)}"
            if values.size and ((values < 0).any() or (values >= np.asarray(vocab)).any()):
                column = int(np.argmax(((values < 0) | (values >= np.asarray(vocab))).any(axis=0)))
                return f"{name}-feature column {column} outside 0..{vocab[column] - 1}"
        return None


# ----------------------------------------------------------------------------- writing


def encode_chunk(rows: Iterator[tuple[int, RawGraph | str]], spec: GraphSpec) -> tuple[dict[str, np.ndarray], list]:
    """Preprocess rows into the flat arrays of one chunk.

    Returns:
        The arrays (see the module docstring) and the skipped rows as ``[row, reason]`` pairs.
    """
    parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                          ("x", "in_degree", "out_degree", "edge_index", "edge_attr",
                                           "spd", "first_edge", "y", "source_row")}
    sizes: dict[str, list[int]] = {"node_ptr": [], "edge_ptr": [], "pair_ptr": []}
    skipped: list = []
    for row, graph in rows:
        reason = graph if isinstance(graph, str) else spec.problem(graph)
        if reason is not None:
            skipped.append([int(row), reason])
            continue
        n = graph.x.shape[0]
        structure = graph_structure(n, graph.edge_index)
        parts["x"].append(graph.x.astype(np.int16))
        parts["in_degree"].append(structure.in_degree)
        parts["out_degree"].append(structure.out_degree)
        parts["edge_index"].append(np.asarray(graph.edge_index, dtype=np.int16).T)
        parts["edge_attr"].append(graph.edge_attr.astype(np.int16))
        parts["spd"].append(structure.spd.ravel())
        parts["first_edge"].append(structure.first_edge.ravel())
        parts["y"].append(np.asarray(graph.y, dtype=np.float32).reshape(1, -1))
        parts["source_row"].append(np.array([row], dtype=np.int64))
        sizes["node_ptr"].append(n)
        sizes["edge_ptr"].append(graph.edge_index.shape[1])
        sizes["pair_ptr"].append(n * n)
    arrays = {name: (np.concatenate(chunks) if chunks else _empty(name, spec)) for name, chunks in parts.items()}
    for name, counts in sizes.items():
        arrays[name] = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    return arrays, skipped


def _empty(name: str, spec: GraphSpec) -> np.ndarray:
    """A zero-row array of the right dtype and width, for a chunk in which every row was skipped."""
    shapes = {"x": (0, len(spec.node_vocab)), "edge_index": (0, 2), "edge_attr": (0, len(spec.edge_vocab)),
              "y": (0, spec.num_targets)}
    dtypes = {"spd": np.uint8, "y": np.float32, "source_row": np.int64}
    return np.zeros(shapes.get(name, (0,)), dtype=dtypes.get(name, np.int16))


def _file_record(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "crc32": _crc32(path)}


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            crc = zlib.crc32(block, crc)
    return crc


def write_chunk(path: Path, arrays: Mapping[str, np.ndarray], meta: dict) -> None:
    """Write one chunk atomically: into a temporary directory, renamed into place when complete."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files = {}
    for name, array in arrays.items():
        np.save(tmp / f"{name}.npy", np.ascontiguousarray(array))
        files[f"{name}.npy"] = _file_record(tmp / f"{name}.npy")
    (tmp / CHUNK_META).write_text(json.dumps({**meta, "files": files}))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- checking and reading


def chunk_problem(path: Path, verify_checksums: bool = True) -> str | None:
    """Why the chunk at ``path`` cannot be used (missing, truncated, corrupt), or None."""
    meta_path = path / CHUNK_META
    if not meta_path.is_file():
        return "missing or incomplete"
    meta = json.loads(meta_path.read_text())
    for name, record in meta["files"].items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != record["bytes"]:
            return f"{name} has {file.stat().st_size} bytes, expected {record['bytes']} (truncated?)"
        if verify_checksums and _crc32(file) != record["crc32"]:
            return f"{name} does not match its checksum (corrupted)"
    return None


class Chunk:
    """Memory-mapped arrays of one chunk."""

    def __init__(self, path: Path) -> None:
        self.meta = json.loads((path / CHUNK_META).read_text())
        self.arrays = {name[:-4]: np.load(path / name, mmap_mode="r") for name in self.meta["files"]}
        a = self.arrays
        counts = {len(a["y"]), len(a["source_row"]), len(a["node_ptr"]) - 1, len(a["edge_ptr"]) - 1}
        if len(counts) != 1 or a["node_ptr"][-1] != len(a["x"]) or a["edge_ptr"][-1] != len(a["edge_attr"]) \
                or a["pair_ptr"][-1] != len(a["spd"]):
            raise CacheError(f"{path}: array lengths disagree with their offsets; delete the directory to rebuild")
        self.num_graphs = len(a["y"])

    def record(self, local: int, index: int) -> GraphRecord:
        """Graph ``local`` of this chunk as numpy arrays (views into the memory map)."""
        a = self.arrays
        n0, n1 = a["node_ptr"][local], a["node_ptr"][local + 1]
        e0, e1 = a["edge_ptr"][local], a["edge_ptr"][local + 1]
        p0, p1 = a["pair_ptr"][local], a["pair_ptr"][local + 1]
        n = n1 - n0
        return GraphRecord(
            x=a["x"][n0:n1],
            edge_index=a["edge_index"][e0:e1].T,
            edge_attr=a["edge_attr"][e0:e1],
            spd=a["spd"][p0:p1].reshape(n, n),
            first_edge=a["first_edge"][p0:p1].reshape(n, n),
            in_degree=a["in_degree"][n0:n1],
            out_degree=a["out_degree"][n0:n1],
            y=a["y"][local],
            index=index,
        )


class GraphStore:
    """Read-only view of a complete cache directory: graph ``g`` of the dataset in O(1).

    Args:
        directory: a cache directory with a ``manifest.json``.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.manifest = json.loads((self.directory / MANIFEST).read_text())
        self.chunks = [Chunk(self.directory / name) for name in self.manifest["chunks"]]
        self.chunk_start = np.cumsum([0] + [c.num_graphs for c in self.chunks])
        self.source_row = np.concatenate([np.asarray(c.arrays["source_row"]) for c in self.chunks])
        self.num_nodes = np.concatenate([np.diff(c.arrays["node_ptr"]) for c in self.chunks])

    def __len__(self) -> int:
        return int(self.chunk_start[-1])

    def record(self, index: int) -> GraphRecord:
        """Graph ``index`` (0 .. len - 1, in source-row order)."""
        chunk = int(np.searchsorted(self.chunk_start, index, side="right")) - 1
        return self.chunks[chunk].record(index - int(self.chunk_start[chunk]), index)

    def targets(self) -> np.ndarray:
        """(G, Y) float32 targets of every graph."""
        return np.concatenate([np.asarray(c.arrays["y"]) for c in self.chunks])

    def split_indices(self) -> dict[str, np.ndarray]:
        """Graph indices of every split, source rows that were skipped left out."""
        with np.load(self.directory / SPLITS) as splits:
            rows = {name: splits[name] for name in splits.files}
        return {name: self.indices_of_rows(r) for name, r in rows.items()}

    def indices_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Graph indices of the given source rows that are in the cache."""
        position = np.searchsorted(self.source_row, rows)
        position = np.minimum(position, max(len(self.source_row) - 1, 0))
        found = self.source_row[position] == rows if len(self.source_row) else np.zeros(len(rows), bool)
        return position[found]


# ----------------------------------------------------------------------------- building


@contextlib.contextmanager
def exclusive_build(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock for building ``directory``; other processes wait here, on any node
    whose file system supports POSIX locks (local disks, NFS). The lock is the sibling file
    ``.<name>.lock`` and is released when its holder exits, even after a crash."""
    lock_path = directory.parent / f".{directory.name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process that is building %s (lock %s)", directory, lock_path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as error:  # e.g. Lustre mounted without -o flock
            log.warning("cannot lock %s (%s): make sure only one job builds %s at a time", lock_path, error, directory)
        yield


@dataclass
class BuildSummary:
    """What a cache build did."""

    graphs: int
    skipped: list
    seconds: float
    rebuilt_chunks: int


_WORKER_READER: RowReader | None = None


def _init_worker(reader: RowReader) -> None:
    global _WORKER_READER
    _WORKER_READER = reader
    from graphormer_urpe.data.featurize import silence_rdkit

    silence_rdkit()


def _build_chunk(task: tuple[Path, int, int, GraphSpec]) -> tuple[int, list]:
    path, start, stop, spec = task
    arrays, skipped = encode_chunk(_WORKER_READER.graphs(start, stop), spec)
    write_chunk(path, arrays, {"start": start, "stop": stop, "graphs": len(arrays["y"]), "skipped": skipped})
    return stop - start, skipped


def build_store(
    reader: RowReader,
    directory: Path,
    key: Mapping,
    spec: GraphSpec,
    splits: Mapping[str, np.ndarray],
    num_workers: int,
    chunk_size: int = 10_000,
    description: str = "preprocessing",
) -> BuildSummary:
    """Preprocess every row of ``reader`` into ``directory``, reusing valid chunks of a previous run.

    Args:
        reader: the raw rows.
        directory: the cache directory (created).
        key: everything the cache depends on; stored in the manifest.
        spec: vocabularies and size limit that every graph must satisfy.
        splits: source rows of each split, saved with the cache.
        num_workers: worker processes; 0 preprocesses in this process.
        chunk_size: rows per chunk (bounds the memory of each worker).
        description: progress-bar label.
    """
    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    ranges = [(s, min(s + chunk_size, reader.num_rows)) for s in range(0, reader.num_rows, chunk_size)]
    names = [f"chunk_{i:05d}" for i in range(len(ranges))]
    todo, rebuilt = [], 0
    for name, (start, stop) in zip(names, ranges):
        problem = chunk_problem(directory / name)
        if problem is None and json.loads((directory / name / CHUNK_META).read_text())["stop"] == stop:
            continue
        if (directory / name).exists():
            log.warning("%s/%s: %s; rebuilding it", directory, name, problem)
            rebuilt += 1
        todo.append((directory / name, start, stop, spec))
    done_rows = reader.num_rows - sum(stop - start for _, start, stop, _ in todo)
    if done_rows:
        log.info("resuming %s: %d of %d rows already preprocessed", directory, done_rows, reader.num_rows)

    with tqdm(total=reader.num_rows, initial=done_rows, desc=description, unit="graph", dynamic_ncols=True) as bar:
        if num_workers > 0 and len(todo) > 1:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            context = multiprocessing.get_context(method)
            with context.Pool(num_workers, initializer=_init_worker, initargs=(reader,)) as pool:
                for rows, _ in pool.imap_unordered(_build_chunk, todo):
                    bar.update(rows)
        else:
            _init_worker(reader)
            for task in todo:
                bar.update(_build_chunk(task)[0])

    chunk_metas = [json.loads((directory / name / CHUNK_META).read_text()) for name in names]
    skipped = [s for meta in chunk_metas for s in meta["skipped"]]
    graphs = sum(meta["graphs"] for meta in chunk_metas)
    np.savez(directory / SPLITS, **{name: np.asarray(rows, dtype=np.int64) for name, rows in splits.items()})
    seconds = time.perf_counter() - started
    manifest = {
        "format": CACHE_FORMAT, "key": dict(key), "chunks": names, "rows": reader.num_rows,
        "graphs": graphs, "skipped": len(skipped), "skipped_examples": skipped[:SHOWN_SKIPS],
        "build_seconds": round(seconds, 2),
    }
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, directory / MANIFEST)
    return BuildSummary(graphs=graphs, skipped=skipped, seconds=seconds, rebuilt_chunks=rebuilt)
