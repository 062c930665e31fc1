"""The preprocessed-graph cache: memory-mapped flat arrays in resumable, checksummed chunks (``docs/datasets.md``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import multiprocessing.pool
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm.auto import tqdm

from graphormer_urpe.data.batch import GraphRecord, RawGraph
from graphormer_urpe.data.files import atomic_write_json, file_record, manifest_problem, read_json_object
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import MAX_EDGES, MAX_NODES, PathOrder, graph_structures
from graphormer_urpe.errors import CacheError

log = logging.getLogger(__name__)

CACHE_FORMAT = 2
MANIFEST = "manifest.json"
CHUNK_META = "chunk.json"
SPLITS = "splits.npz"
#: Skipped rows listed by index in logs and manifests (the count is always complete).
SHOWN_SKIPS = 10
#: Fields of a complete manifest and of a chunk's record; a file lacking one is damaged.
MANIFEST_KEYS = ("format", "key", "chunks", "rows", "graphs", "skipped", "skipped_examples", "skipped_by_split")
CHUNK_KEYS = ("start", "stop", "graphs", "skipped", "files")


class RowReader(Protocol):
    """Raw rows of a dataset, readable in any order from worker processes."""

    num_rows: int

    def graphs(self, start: int, stop: int, max_nodes: int | None = None) -> Iterator[tuple[int, RawGraph | str]]:
        """Rows ``start .. stop - 1`` as ``(row, graph)`` or ``(row, reason it is unusable)``, in order. A graph of
        more than ``max_nodes`` nodes (None: no limit) is skipped by the cache: it may come without what costs time
        per graph (a molecule's descriptors), but with its nodes."""

    def worker_init(self) -> None:
        """Prepare a preprocessing process (worker, or this one) before its first rows."""


@dataclass(frozen=True)
class CacheSpec:
    """What every cached graph looks like; graphs that do not match are skipped and counted."""

    data: DataSpec
    max_nodes: int = 512
    path_order: PathOrder = "smallest_next"

    @property
    def node_targets(self) -> bool:
        """Targets are per node, ``y`` (n, Y), instead of per graph."""
        return self.data.target_level == "node"

    def key(self) -> dict:
        """The cache's options in the cache key (``path_order`` only when not the default: old names stay)."""
        key: dict = {"max_nodes": self.max_nodes}
        if self.path_order != "smallest_next":
            key["path_order"] = self.path_order
        return key

    def problem(self, graph: RawGraph) -> str | None:
        """Why ``graph`` cannot be cached, or None."""
        return self._shape_problem(graph) or self._value_problem(graph)

    def problems(self, graphs: Sequence[RawGraph]) -> list[str | None]:
        """:meth:`problem` of every graph, value ranges screened once on the concatenated arrays."""
        reasons = [self._shape_problem(g) for g in graphs]
        positions = [k for k, reason in enumerate(reasons) if reason is None]
        candidates = [graphs[k] for k in positions]
        if not candidates:
            return reasons
        nodes = np.array([g.x.shape[0] for g in candidates])
        node_graph = np.repeat(np.arange(len(candidates)), nodes)
        edge_graph = np.repeat(np.arange(len(candidates)), [g.edge_index.shape[1] for g in candidates])
        x = np.concatenate([g.x for g in candidates])
        edge_attr = np.concatenate([g.edge_attr for g in candidates])
        edge_index = np.concatenate([g.edge_index for g in candidates], axis=1)
        data = self.data
        bad_node = ((x < 0) | (x >= np.asarray(data.node_vocab))).any(axis=1)
        bad_edge = ((edge_attr < 0) | (edge_attr >= np.asarray(data.edge_vocab))).any(axis=1)
        bad_edge |= ((edge_index < 0) | (edge_index >= nodes[edge_graph])).any(axis=0)
        if data.continuous_node_dim:
            bad_node |= ~np.isfinite(np.concatenate([g.x_continuous for g in candidates])).all(axis=1)
        if data.continuous_edge_dim:
            bad_edge |= ~np.isfinite(np.concatenate([g.edge_continuous for g in candidates])).all(axis=1)
        for k in np.union1d(node_graph[bad_node], edge_graph[bad_edge]):
            reasons[positions[k]] = self._value_problem(candidates[k])
        return reasons

    def _shape_problem(self, graph: RawGraph) -> str | None:
        """Wrong target count, array shapes or node count."""
        data, x, edge_index, edge_attr = self.data, graph.x, graph.edge_index, graph.edge_attr
        y_shape = np.shape(graph.y)
        expected_y = (x.shape[0], data.num_targets) if self.node_targets else (data.num_targets,)
        if y_shape != expected_y:
            return f"targets of shape {y_shape}, expected {expected_y}"
        for name, values, vocab in (("node", x, data.node_vocab), ("edge", edge_attr, data.edge_vocab)):
            if values.ndim != 2 or values.shape[1] != len(vocab):
                return f"{name} features of shape {values.shape}, expected ({name}s, {len(vocab)})"
        continuous = (
            ("node", graph.x_continuous, data.continuous_node_dim, x.shape[0]),
            ("edge", graph.edge_continuous, data.continuous_edge_dim, edge_attr.shape[0]),
        )
        for name, values, width, rows in continuous:
            shape = (rows, 0) if values is None else values.shape
            if shape != (rows, width):
                return f"continuous {name} features of shape {shape}, expected ({rows}, {width})"
        width = len(data.molecule_features)
        molecule_shape = (0,) if graph.molecule_features is None else np.shape(graph.molecule_features)
        if molecule_shape != (width,):
            return f"molecule features of shape {molecule_shape}, expected ({width},)"
        if width and np.isinf(graph.molecule_features).any():
            return (
                f"molecule feature {data.molecule_features[int(np.argmax(np.isinf(graph.molecule_features)))]} "
                "is infinite (a missing value is NaN)"
            )
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            return f"edge_index of shape {edge_index.shape}, expected (2, edges)"
        if edge_attr.shape[0] != edge_index.shape[1]:
            return f"{edge_attr.shape[0]} edge-feature rows for {edge_index.shape[1]} edges"
        if x.shape[0] == 0:
            return "no nodes"
        if x.shape[0] > min(self.max_nodes, MAX_NODES):
            return f"{x.shape[0]} nodes > max_nodes={self.max_nodes}"
        if edge_index.shape[1] > MAX_EDGES:
            return f"{edge_index.shape[1]} directed edges > {MAX_EDGES} (first-edge ids are int16)"
        return None

    def _value_problem(self, graph: RawGraph) -> str | None:
        """Edges to missing nodes, feature values outside their vocabularies, non-finite continuous features."""
        n = graph.x.shape[0]
        if graph.edge_index.size and (graph.edge_index.min() < 0 or graph.edge_index.max() >= n):
            return "edge_index refers to a missing node"
        for name, values, vocab in (
            ("node", graph.x, self.data.node_vocab),
            ("edge", graph.edge_attr, self.data.edge_vocab),
        ):
            outside = (values < 0) | (values >= np.asarray(vocab))
            if outside.any():
                column = int(np.argmax(outside.any(axis=0)))
                return f"{name}-feature column {column} outside 0..{vocab[column] - 1}"
        for name, values in (("node", graph.x_continuous), ("edge", graph.edge_continuous)):
            if values is not None and values.size and not np.isfinite(values).all():
                column = int(np.argmax(~np.isfinite(values).all(axis=0)))
                return f"continuous {name}-feature column {column} is not finite (NaN or inf)"
        return None


def encode_chunk(rows: Iterator[tuple[int, RawGraph | str]], spec: CacheSpec) -> tuple[dict[str, np.ndarray], list]:
    """The flat arrays of one chunk's rows, checked and preprocessed together, and its skipped ``[row, reason]``."""
    read = [(int(row), graph) for row, graph in rows]
    problems = iter(spec.problems([graph for _, graph in read if not isinstance(graph, str)]))
    skipped: list = []  # [row, reason] pairs
    kept_rows: list[int] = []
    kept: list[RawGraph] = []
    for row, graph in read:
        reason = graph if isinstance(graph, str) else next(problems)  # the reader's reason or the check's
        if reason is None:
            kept_rows.append(row)
            kept.append(graph)
        else:
            skipped.append([row, reason])
    skipped.sort()
    if not kept:
        offsets = {name: np.zeros(1, dtype=np.int64) for name in ("node_ptr", "edge_ptr", "pair_ptr")}
        empty = {name: _empty(name, spec) for name in _ARRAY_NAMES}
        return {**empty, **offsets, **_molecule_arrays(kept, spec)}, skipped
    structure = graph_structures([g.x.shape[0] for g in kept], [g.edge_index for g in kept], spec.path_order)
    targets = [np.asarray(g.y, dtype=np.float32) for g in kept]  # per node: rows found through node_ptr
    y = np.concatenate(targets) if spec.node_targets else np.stack([t.reshape(-1) for t in targets])
    return {
        **_molecule_arrays(kept, spec),
        "x": np.concatenate([g.x for g in kept]).astype(np.int16),
        "in_degree": structure.in_degree,
        "out_degree": structure.out_degree,
        "edge_index": np.concatenate([g.edge_index for g in kept], axis=1).T.astype(np.int16),
        "edge_attr": np.concatenate([g.edge_attr for g in kept]).astype(np.int16),
        "x_continuous": _continuous([g.x_continuous for g in kept], spec.data.continuous_node_dim),
        "edge_continuous": _continuous([g.edge_continuous for g in kept], spec.data.continuous_edge_dim),
        "spd": structure.spd,
        "first_edge": structure.first_edge,
        "y": y,
        "pair_ptr": structure.pair_ptr,
        "source_row": np.array(kept_rows, dtype=np.int64),
        "node_ptr": structure.node_ptr,
        "edge_ptr": np.concatenate([[0], np.cumsum([g.edge_index.shape[1] for g in kept])]).astype(np.int64),
    }, skipped


_ARRAY_NAMES = (
    "x",
    "in_degree",
    "out_degree",
    "edge_index",
    "edge_attr",
    "x_continuous",
    "edge_continuous",
    "spd",
    "first_edge",
    "y",
    "source_row",
)
#: The files of a chunk besides its record: the arrays and the three offset arrays, and with molecule-level
#: features (G, M) float32 one more (optional, so the caches of every other dataset keep their files).
_CHUNK_FILES = {f"{name}.npy" for name in (*_ARRAY_NAMES, "node_ptr", "edge_ptr", "pair_ptr")}
_MOLECULE_FILE = "molecule_features.npy"


def _molecule_arrays(kept: list[RawGraph], spec: CacheSpec) -> dict[str, np.ndarray]:
    """``molecule_features`` (G, M) float32 of the kept graphs, or nothing when the data has none (M = 0)."""
    width = len(spec.data.molecule_features)
    if not width:
        return {}
    rows = [np.asarray(g.molecule_features, dtype=np.float32) for g in kept]
    return {"molecule_features": np.stack(rows) if rows else np.zeros((0, width), dtype=np.float32)}


def _continuous(features: list[np.ndarray | None], width: int) -> np.ndarray:
    """Continuous features of every graph stacked as (sum rows, width) float32; (0, 0) when width is 0."""
    return np.concatenate(features).astype(np.float32) if width else np.zeros((0, 0), dtype=np.float32)


def _empty(name: str, spec: CacheSpec) -> np.ndarray:
    """A zero-row array of the right dtype and width, for a chunk in which every row was skipped."""
    data = spec.data
    shapes = {
        "x": (0, len(data.node_vocab)),
        "edge_index": (0, 2),
        "edge_attr": (0, len(data.edge_vocab)),
        "y": (0, data.num_targets),
        "x_continuous": (0, data.continuous_node_dim),
        "edge_continuous": (0, data.continuous_edge_dim),
    }
    dtypes = {
        "spd": np.uint8,
        "y": np.float32,
        "source_row": np.int64,
        "x_continuous": np.float32,
        "edge_continuous": np.float32,
    }
    return np.zeros(shapes.get(name, (0,)), dtype=dtypes.get(name, np.int16))


def write_chunk(path: Path, arrays: Mapping[str, np.ndarray], meta: dict) -> None:
    """Write one chunk atomically: into a temporary directory, renamed into place when complete."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files = {}
    for name, array in arrays.items():
        np.save(tmp / f"{name}.npy", np.ascontiguousarray(array))
        files[f"{name}.npy"] = file_record(tmp / f"{name}.npy")
    (tmp / CHUNK_META).write_text(json.dumps({**meta, "files": files}))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def chunk_problem(path: Path, verify_checksums: bool = True) -> str | None:
    """Why the chunk at ``path`` cannot be used (missing, its record or an array damaged), or None."""
    if not (path / CHUNK_META).is_file():
        return "missing or incomplete"
    meta, problem = read_json_object(path / CHUNK_META, CHUNK_KEYS)
    if meta is None:
        return f"{CHUNK_META} {problem}"
    if not isinstance(meta["files"], dict) or set(meta["files"]) - {_MOLECULE_FILE} != _CHUNK_FILES:
        return f"{CHUNK_META} does not list the chunk's arrays (corrupted)"
    return manifest_problem(path, meta["files"], verify_checksums)


def splits_problem(path: Path) -> str | None:
    """Why the split file cannot be used, or None (every member is read: the zip checks each one's CRC)."""
    try:
        with np.load(path) as splits:
            arrays = {name: splits[name] for name in splits.files}
    except Exception as error:  # zipfile, numpy and OS errors alike: the file is damaged
        return f"cannot be read, truncated or corrupted ({type(error).__name__}: {error})"
    bad = [name for name, rows in arrays.items() if rows.ndim != 1 or rows.dtype != np.int64]
    return f"holds split(s) {bad} that are not 1-D int64 rows (corrupted)" if bad else None


def cache_problem(directory: Path, key: Mapping, chunks: bool = True) -> str | None:
    """Why the cache in ``directory`` cannot be used (naming the damaged file), or None."""
    manifest, problem = read_json_object(directory / MANIFEST, MANIFEST_KEYS)
    if manifest is None:
        return f"{directory / MANIFEST} {problem}"
    if manifest["key"] != json.loads(json.dumps(dict(key))) or not isinstance(manifest["chunks"], list):
        return f"{directory / MANIFEST} does not describe this cache (corrupted)"
    for name in manifest["chunks"] if chunks else ():
        if (problem := chunk_problem(directory / str(name))) is not None:
            return f"{directory / str(name)}: {problem}"
    problem = splits_problem(directory / SPLITS)
    return None if problem is None else f"{directory / SPLITS} {problem}"


class Chunk:
    """Memory-mapped arrays of one chunk."""

    def __init__(self, path: Path) -> None:
        self.meta = json.loads((path / CHUNK_META).read_text())
        # plain ndarray views: slicing a np.memmap costs ~100x more (__array_finalize__ on every slice)
        self.arrays = {name[:-4]: np.load(path / name, mmap_mode="r").view(np.ndarray) for name in self.meta["files"]}
        a = self.arrays
        #: Targets are per node (rows found through ``node_ptr``) rather than per graph.
        self.node_targets = bool(self.meta.get("node_targets", False))
        counts = {len(a["source_row"]), len(a["node_ptr"]) - 1, len(a["edge_ptr"]) - 1}
        target_rows = a["node_ptr"][-1] if self.node_targets else len(a["source_row"])
        continuous_ok = all(
            len(a[name]) in (0, a[ptr][-1])
            for name, ptr in (("x_continuous", "node_ptr"), ("edge_continuous", "edge_ptr"))
        )
        molecule_ok = len(a.get("molecule_features", a["source_row"])) == len(a["source_row"])
        if (
            len(counts) != 1
            or a["node_ptr"][-1] != len(a["x"])
            or a["edge_ptr"][-1] != len(a["edge_attr"])
            or a["pair_ptr"][-1] != len(a["spd"])
            or len(a["y"]) != target_rows
            or not continuous_ok
            or not molecule_ok
        ):
            raise CacheError(f"{path}: array lengths disagree with their offsets; delete the directory to rebuild")
        self.num_graphs = len(a["source_row"])

    def record(self, local: int, index: int) -> GraphRecord:
        """Graph ``local`` of this chunk as numpy arrays (views into the memory map)."""
        a = self.arrays
        n0, n1 = a["node_ptr"][local : local + 2]
        e0, e1 = a["edge_ptr"][local : local + 2]
        p0, p1 = a["pair_ptr"][local : local + 2]
        n = n1 - n0
        return GraphRecord(
            x=a["x"][n0:n1],
            edge_index=a["edge_index"][e0:e1].T,
            edge_attr=a["edge_attr"][e0:e1],
            spd=a["spd"][p0:p1].reshape(n, n),
            first_edge=a["first_edge"][p0:p1].reshape(n, n),
            in_degree=a["in_degree"][n0:n1],
            out_degree=a["out_degree"][n0:n1],
            y=a["y"][n0:n1] if self.node_targets else a["y"][local],
            index=index,
            x_continuous=a["x_continuous"][n0:n1] if a["x_continuous"].shape[1] else None,
            edge_continuous=a["edge_continuous"][e0:e1] if a["edge_continuous"].shape[1] else None,
            molecule_features=a["molecule_features"][local] if "molecule_features" in a else None,
        )


class GraphStore:
    """Read-only view of a complete cache directory: graph ``g`` of the dataset in O(1)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.manifest = json.loads((self.directory / MANIFEST).read_text())
        self.chunks = [Chunk(self.directory / name) for name in self.manifest["chunks"]]
        self.chunk_start = np.cumsum([0] + [c.num_graphs for c in self.chunks])
        self.source_row = np.concatenate([np.asarray(c.arrays["source_row"]) for c in self.chunks])
        self.num_nodes = np.concatenate([np.diff(c.arrays["node_ptr"]) for c in self.chunks])
        self.num_edges = np.concatenate([np.diff(c.arrays["edge_ptr"]) for c in self.chunks])

    def __len__(self) -> int:
        return int(self.chunk_start[-1])

    def record(self, index: int) -> GraphRecord:
        """Graph ``index`` (0 .. len - 1, in source-row order)."""
        chunk = int(np.searchsorted(self.chunk_start, index, side="right")) - 1
        return self.chunks[chunk].record(index - int(self.chunk_start[chunk]), index)

    def targets(self, indices: np.ndarray | None = None) -> np.ndarray:
        """float32 targets of the given graphs (default: all): (G, Y), or (sum n, Y) for per-node targets."""
        y = np.concatenate([np.asarray(c.arrays["y"]) for c in self.chunks])
        if indices is None:
            return y
        indices = np.asarray(indices, dtype=np.int64)
        if not self.chunks[0].node_targets:
            return y[indices]
        node_ptr = np.concatenate([[0], np.cumsum(self.num_nodes)])
        counts = self.num_nodes[indices]
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])  # position of each graph's first node in the output
        return y[np.repeat(node_ptr[indices] - first, counts) + np.arange(counts.sum())]

    def molecule_features(self, indices: np.ndarray) -> np.ndarray:
        """float32 molecule-level features of the given graphs, NaN where missing: (G, M), M = 0 without any."""
        if "molecule_features" not in self.chunks[0].arrays:
            return np.zeros((len(indices), 0), dtype=np.float32)
        features = np.concatenate([np.asarray(c.arrays["molecule_features"]) for c in self.chunks])
        return features[np.asarray(indices, dtype=np.int64)]

    def split_rows(self) -> dict[str, np.ndarray]:
        """Source rows of every split, in the dataset's order, skipped rows included."""
        with np.load(self.directory / SPLITS) as splits:
            return {name: splits[name] for name in splits.files}

    def split_indices(self) -> dict[str, np.ndarray]:
        """Graph indices of every split, source rows that were skipped left out."""
        graphs = {name: self.graphs_of_rows(rows) for name, rows in self.split_rows().items()}
        return {name: indices[indices >= 0] for name, indices in graphs.items()}

    def skipped_rows(self) -> dict[int, str]:
        """Every source row that is not in the cache, with the reason it was skipped."""
        return {int(row): reason for chunk in self.chunks for row, reason in chunk.meta["skipped"]}

    def graphs_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Graph index of each source row, -1 where the row was skipped. (R,) int64"""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(self.source_row):
            return np.full(len(rows), -1, dtype=np.int64)
        position = np.minimum(np.searchsorted(self.source_row, rows), len(self.source_row) - 1)
        return np.where(self.source_row[position] == rows, position, -1).astype(np.int64)


@contextlib.contextmanager
def exclusive_build(directory: Path) -> Iterator[None]:
    """Hold the POSIX lock ``.<name>.lock`` beside ``directory`` (others wait; released even by a crash)."""
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

    rows: int
    processed_rows: int  # by this run (fewer when a previous run is resumed)
    graphs: int
    skipped: list  # [row, reason] of every skipped row
    skipped_by_split: dict[str, int]
    seconds: float  # wall time of this run
    rebuilt_chunks: int  # found damaged and built again

    def describe(self) -> str:
        """One line: processed, cached, skipped (with the first few rows and reasons), seconds."""
        rate = ""
        if self.processed_rows and self.seconds:
            per_second = self.processed_rows / self.seconds
            # a few slow rows (an expensive featuriser) must not read "0 rows/s"
            rate = f" ({per_second:,.0f} rows/s)" if per_second >= 10 else f" ({per_second:.2g} rows/s)"
        text = (
            f"{self.processed_rows:,} of {self.rows:,} rows preprocessed in {self.seconds:.1f} s{rate}; "
            f"{self.graphs:,} graphs cached, {len(self.skipped):,} rows skipped"
        )
        if self.skipped:
            per_split = ", ".join(f"{name} {count:,}" for name, count in self.skipped_by_split.items() if count)
            shown = "; ".join(f"row {row}: {reason}" for row, reason in self.skipped[:SHOWN_SKIPS])
            text += f" ({per_split}; first: {shown})"
        if self.rebuilt_chunks:
            text += f"; {self.rebuilt_chunks} damaged chunks rebuilt"
        return text


_WORKER_READER: RowReader | None = None
#: What counts the rows this process reads: the progress bar itself, or in a worker the count it shares with it.
_WORKER_PROGRESS: RowCount | tqdm | None = None


class RowCount:
    """Rows read by the preprocessing workers, a count shared with the process that shows the progress bar."""

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self._rows = context.Value("q", 0)

    def update(self, rows: int) -> None:
        """Count ``rows`` more (what ``tqdm.update`` does to a bar)."""
        with self._rows.get_lock():
            self._rows.value += rows

    @property
    def rows(self) -> int:
        return self._rows.value


@contextlib.contextmanager
def said_on_sigterm(line: Callable[[], str]) -> Iterator[None]:
    """While a cache is built, SIGTERM (a scheduler's preemption, ``kill``) ends the process with exit code 143 after
    logging ``line()`` (what is kept), instead of without a word. Chunks are written whole, so nothing is damaged and
    the same command resumes at the first missing one. Only the main thread can take a signal: elsewhere, nothing
    changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        log.warning(line())
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _init_worker(reader: RowReader, progress: RowCount | tqdm) -> None:
    global _WORKER_READER, _WORKER_PROGRESS
    _WORKER_READER, _WORKER_PROGRESS = reader, progress
    reader.worker_init()


def _init_pool_worker(reader: RowReader, progress: RowCount) -> None:
    # the pool ends its workers by SIGTERM: a forked worker must not say what its parent says (it inherited that)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _init_worker(reader, progress)


def _counted(rows: Iterator[tuple[int, RawGraph | str]]) -> Iterator[tuple[int, RawGraph | str]]:
    """``rows``, each counted in this process's progress as it is read (a chunk of descriptors takes minutes)."""
    for row in rows:
        _WORKER_PROGRESS.update(1)
        yield row


def _build_chunk(task: tuple[Path, int, int, CacheSpec]) -> int:
    path, start, stop, spec = task
    arrays, skipped = encode_chunk(_counted(_WORKER_READER.graphs(start, stop, max_nodes=spec.max_nodes)), spec)
    write_chunk(
        path,
        arrays,
        {
            "start": start,
            "stop": stop,
            "graphs": len(arrays["source_row"]),
            "skipped": skipped,
            "node_targets": spec.node_targets,
        },
    )
    return stop - start


#: Seconds between two looks at the rows the preprocessing workers have read.
PROGRESS_SECONDS = 0.5


def _next_within(results: multiprocessing.pool.IMapIterator, seconds: float) -> int | None:
    """The next result of a pool's ``imap_unordered`` (a chunk's rows), or None if none came within ``seconds``."""
    try:
        return results.next(timeout=seconds)
    except multiprocessing.TimeoutError:
        return None


def build_store(
    reader: RowReader,
    directory: Path,
    key: Mapping,
    spec: CacheSpec,
    splits: Mapping[str, np.ndarray],
    num_workers: int,
    chunk_size: int = 10_000,
    description: str = "preprocessing",
) -> BuildSummary:
    """Preprocess every row of ``reader`` into ``directory`` (with ``key``, what the cache depends on, and the
    source rows of ``splits``), reusing valid chunks of a previous run; ``num_workers`` 0 works in this process."""
    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".chunk_*.tmp-*"):  # left by a run that was killed while writing
        shutil.rmtree(stale, ignore_errors=True)
    ranges = [(s, min(s + chunk_size, reader.num_rows)) for s in range(0, reader.num_rows, chunk_size)]
    names = [f"chunk_{i:05d}" for i in range(len(ranges))]
    todo, rebuilt = [], 0
    for name, (start, stop) in zip(names, ranges):
        if (problem := chunk_problem(directory / name)) is None:
            meta = json.loads((directory / name / CHUNK_META).read_text())
            if (meta["start"], meta["stop"]) == (start, stop):
                continue
            problem = f"covers rows {meta['start']}..{meta['stop'] - 1}, expected {start}..{stop - 1}"
        if (directory / name).exists():
            log.warning("%s/%s: %s; rebuilding it", directory, name, problem)
            rebuilt += 1
        todo.append((directory / name, start, stop, spec))
    processed_rows = sum(stop - start for _, start, stop, _ in todo)
    if processed_rows < reader.num_rows:
        log.info(
            "resuming %s: %d of %d rows already preprocessed",
            directory,
            reader.num_rows - processed_rows,
            reader.num_rows,
        )

    workers = min(num_workers, len(todo))
    already = reader.num_rows - processed_rows
    kept = [already]  # rows in finished chunks, for the line a SIGTERM leaves

    def stopped() -> str:
        return (
            f"SIGTERM received while {description} into {directory}: {kept[0]:,} of {reader.num_rows:,} rows kept "
            "in finished chunks; the same command resumes from there"
        )

    with (
        said_on_sigterm(stopped),
        tqdm(total=reader.num_rows, initial=already, desc=description, unit="graph", dynamic_ncols=True) as bar,
    ):
        if workers > 1:  # the workers count the rows they read; this process shows the count while it waits
            context = multiprocessing.get_context(
                "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            )
            count = RowCount(context)
            with context.Pool(workers, _init_pool_worker, (reader, count)) as pool:
                chunks = pool.imap_unordered(_build_chunk, todo)
                for _ in todo:
                    while (rows := _next_within(chunks, PROGRESS_SECONDS)) is None:
                        bar.update(already + count.rows - bar.n)
                    kept[0] += rows
                bar.update(already + count.rows - bar.n)
        else:
            _init_worker(reader, bar)
            for task in todo:
                kept[0] += _build_chunk(task)

    chunk_metas = [json.loads((directory / name / CHUNK_META).read_text()) for name in names]
    skipped = [s for meta in chunk_metas for s in meta["skipped"]]
    skipped_rows = np.array([row for row, _ in skipped], dtype=np.int64)
    skipped_by_split = {name: int(np.isin(rows, skipped_rows).sum()) for name, rows in splits.items()}
    graphs = sum(meta["graphs"] for meta in chunk_metas)
    np.savez(directory / SPLITS, **{name: np.asarray(rows, dtype=np.int64) for name, rows in splits.items()})
    summary = BuildSummary(
        reader.num_rows, processed_rows, graphs, skipped, skipped_by_split, time.perf_counter() - started, rebuilt
    )
    atomic_write_json(
        directory / MANIFEST,
        {
            "format": CACHE_FORMAT,
            "key": dict(key),
            "chunks": names,
            "rows": reader.num_rows,
            "graphs": graphs,
            "skipped": len(skipped),
            "skipped_examples": skipped[:SHOWN_SKIPS],
            "skipped_by_split": skipped_by_split,
            "build_seconds": round(summary.seconds, 2),
        },
    )
    log.info("%s: %s", description, summary.describe())
    return summary
