"""MAG240M's derived files (CSR per relation, author and institution features), built once, out of core,
from the raw release (:mod:`.release`), and :class:`MAG240MGraph`, the memory maps the sampler reads;
layout, checks and resumption in docs/ogb-lsc.md."""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from graphormer_urpe.data.files import (
    atomic_write_json,
    file_record,
    read_json_object,
    record_problem,
    unwritable,
)
from graphormer_urpe.data.mag240m.release import RELATIONS, MAG240MRaw, NodeType, Relation
from graphormer_urpe.errors import DataError

log = logging.getLogger(__name__)

DERIVED_FORMAT = 1
MANIFEST = "manifest.json"


class DerivedFiles:
    """The manifest of derived files: which are complete and intact (discarded if built from other raw data)."""

    def __init__(self, directory: Path, fingerprint: Mapping) -> None:
        self.directory = directory
        self.path = directory / MANIFEST
        self.fingerprint = dict(fingerprint)
        manifest, problem = read_json_object(self.path, ("format", "fingerprint", "files"))
        if manifest is not None and not isinstance(manifest["files"], dict):
            manifest, problem = None, "does not list its files (corrupted)"
        if manifest is None and self.path.exists():  # its records are lost: every derived file is rebuilt
            log.warning("%s %s; every derived file will be rebuilt", self.path, problem)  # and it is rewritten
        if manifest is not None and (manifest["format"], manifest["fingerprint"]) != (
            DERIVED_FORMAT,
            self.fingerprint,
        ):
            log.warning("%s was built from other raw data (%s); rebuilding", self.path, manifest["fingerprint"])
            manifest = None
        self.files: dict[str, dict] = dict(manifest["files"]) if manifest else {}

    def problem(self, name: str, verify_checksum: bool) -> str | None:
        """Why derived file ``name`` cannot be used, or None (CRC checked if ``verify_checksum`` or mtime moved)."""
        record = self.files.get(name)
        return "not built yet" if record is None else record_problem(self.directory / name, record, verify_checksum)

    def complete(self, name: str) -> None:
        """Record ``name`` as complete, with its size, time and checksum."""
        self.files[name] = file_record(self.directory / name, mtime=True)
        self.save()

    def forget(self, name: str) -> None:
        self.files.pop(name, None)
        self.save()

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, {"format": DERIVED_FORMAT, "fingerprint": self.fingerprint, "files": self.files})


def csr_files(relation: Relation) -> tuple[str, str]:
    """Relative paths of a relation's ``indptr`` and ``indices``."""
    return f"csr/{relation.name}/indptr.npy", f"csr/{relation.name}/indices.npy"


FEATURE_FILES = {NodeType.AUTHOR: "features/author.npy", NodeType.INSTITUTION: "features/institution.npy"}


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def _mapped(path: Path) -> np.ndarray:
    return np.asarray(np.load(path, mmap_mode="r"))


def build_csr(raw: MAG240MRaw, relation: Relation, directory: Path, chunk_edges: int) -> None:
    """Write a relation's CSR in two chunked passes over its raw edges: count (and check every id), then
    scatter each chunk's targets to their rows; only the O(nodes) offsets and one chunk are in memory."""
    edges = raw.edge_index(relation.raw)
    edge_file = raw.directory / "processed" / relation.raw / "edge_index.npy"
    src_row, dst_row = (1, 0) if relation.transposed else (0, 1)
    num_src, num_dst = raw.num_nodes(relation.source), raw.num_nodes(relation.target)
    num_edges = edges.shape[1]
    indptr_name, indices_name = csr_files(relation)
    (directory / indptr_name).parent.mkdir(parents=True, exist_ok=True)

    degree = np.zeros(num_src, dtype=np.int64)
    ranges = [(s, min(s + chunk_edges, num_edges)) for s in range(0, num_edges, chunk_edges)]
    for start, stop in tqdm(ranges, desc=f"CSR {relation.name}: counting", unit="chunk", leave=False):
        chunk = np.asarray(edges[:, start:stop])
        for row, limit in ((src_row, num_src), (dst_row, num_dst)):
            bad = np.flatnonzero((chunk[row] < 0) | (chunk[row] >= limit))
            if len(bad):
                raise ValueError(
                    f"{edge_file}: edge {start + bad[0]} has row-{row} node id {chunk[row, bad[0]]}, "
                    f"outside 0..{limit - 1} (meta.pt); the file is damaged or from another release"
                )
        degree += np.bincount(chunk[src_row], minlength=num_src)
    indptr = np.concatenate([[0], np.cumsum(degree)])

    index_dtype = np.int32 if num_dst < 2**31 else np.int64
    tmp_indices = _tmp_path(directory / indices_name)
    indices = np.lib.format.open_memmap(tmp_indices, mode="w+", dtype=index_dtype, shape=(num_edges,))
    cursor = indptr[:-1].copy()
    for start, stop in tqdm(ranges, desc=f"CSR {relation.name}: filling", unit="chunk", leave=False):
        chunk = np.asarray(edges[:, start:stop])
        order = np.argsort(chunk[src_row], kind="stable")
        sources, targets = chunk[src_row][order], chunk[dst_row][order]
        group_start = np.flatnonzero(np.diff(sources, prepend=-1))  # first edge of each source
        group_size = np.diff(np.append(group_start, len(sources)))
        indices[cursor[sources] + np.arange(len(sources)) - np.repeat(group_start, group_size)] = targets
        cursor[sources[group_start]] += group_size
    indices.flush()
    del indices
    tmp_indptr = _tmp_path(directory / indptr_name)
    with open(tmp_indptr, "wb") as f:
        np.save(f, indptr)
    os.replace(tmp_indices, directory / indices_name)
    os.replace(tmp_indptr, directory / indptr_name)


def _read_rows(source: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``source[ids]`` as float32, reading the memory map in ascending row order. (len(ids), F)"""
    order = np.argsort(ids, kind="stable")
    rows = np.empty((len(ids), source.shape[1]), dtype=np.float32)
    rows[order] = source[ids[order]]
    return rows


def build_mean_features(
    source: np.ndarray, indptr: np.ndarray, indices: np.ndarray, out_path: Path, block_rows: int, description: str
) -> None:
    """Write ``out[i] = mean(source[indices[indptr[i]:indptr[i + 1]]])`` (zeros if empty) as float16, in blocks of
    ``block_rows`` rows whose CRC32 a progress file records, so an interrupted build resumes.

    Shapes: source (S, F) memory-mapped; indptr (R + 1,), indices: CSR from output to source rows; out (R, F).
    """
    num_rows, width = len(indptr) - 1, source.shape[1]
    tmp = _tmp_path(out_path)
    progress_path = tmp.with_name(tmp.name + ".progress.json")
    progress: dict = {}
    if progress_path.is_file() and tmp.is_file():
        progress, problem = read_json_object(progress_path, ("block_rows", "shape", "done"))
        if progress is None or not isinstance(progress["done"], dict):
            log.warning("%s %s; %s is built from its first block", progress_path, problem, out_path)
            progress = {}
    if progress.get("block_rows") != block_rows or progress.get("shape") != [num_rows, width]:
        progress = {"block_rows": block_rows, "shape": [num_rows, width], "done": {}}
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(num_rows, width))
    else:
        out = np.lib.format.open_memmap(tmp, mode="r+")
    blocks, done = range(0, num_rows, block_rows), progress["done"]
    # intact blocks only
    progress["done"] = {
        str(start): done[str(start)]
        for start in blocks
        if str(start) in done
        and zlib.crc32(np.ascontiguousarray(out[start : start + block_rows]).data) == done[str(start)]
    }
    if progress["done"]:
        log.info("%s: resuming, %d of %d blocks already done", out_path, len(progress["done"]), len(blocks))
    for start in tqdm(blocks, desc=description, unit="block", leave=False):
        if str(start) in progress["done"]:
            continue
        stop = min(num_rows, start + block_rows)
        lo, hi = int(indptr[start]), int(indptr[stop])
        counts = np.diff(np.asarray(indptr[start : stop + 1]))
        sums = torch.zeros((stop - start, width), dtype=torch.float32)
        if hi > lo:  # index_add_: numpy's add.reduceat is ~30x slower on wide rows
            rows = _read_rows(source, np.asarray(indices[lo:hi], dtype=np.int64))
            sums.index_add_(0, torch.from_numpy(np.repeat(np.arange(stop - start), counts)), torch.from_numpy(rows))
        out[start:stop] = sums.numpy() / np.maximum(counts, 1)[:, None]
        out.flush()
        progress["done"][str(start)] = zlib.crc32(np.ascontiguousarray(out[start:stop]).data)
        atomic_write_json(progress_path, progress)
    del out
    os.replace(tmp, out_path)
    progress_path.unlink()


def prepare_derived(
    raw: MAG240MRaw,
    directory: Path,
    verify_checksums: bool = False,
    chunk_edges: int = 20_000_000,
    feature_block_rows: int = 25_000,
    key: str = "data.cache_dir",
) -> DerivedFiles:
    """Build whatever derived file of ``raw`` (already checked) is missing, incomplete or damaged; keep the rest;
    a DataError names ``key`` (the option that chose ``directory``) if it must build there but cannot write."""
    started = time.perf_counter()
    derived = DerivedFiles(directory, raw.fingerprint())
    problems = {
        name: derived.problem(name, verify_checksums)
        for name in [*(n for relation in RELATIONS for n in csr_files(relation)), *FEATURE_FILES.values()]
    }
    if (first := next((name for name, problem in problems.items() if problem), None)) is not None and (
        read_only := unwritable(directory)
    ) is not None:
        raise DataError(
            f"{directory} ({key}): MAG240M's derived files must be built there ({first}: "
            f"{problems[first]}), but {read_only} is not writable; set data.cache_dir to a writable "
            "directory (or build them once where it is writable)"
        )
    for relation in RELATIONS:
        if (problem := next((problems[name] for name in csr_files(relation) if problems[name]), None)) is None:
            continue
        if derived.files.get(csr_files(relation)[0]):
            log.warning("%s CSR %s; rebuilding it", relation.name, problem)
        for name in csr_files(relation):
            derived.forget(name)
        log.info(
            "building the %s CSR (%s edges) in %s",
            relation.name,
            f"{raw.edge_index(relation.raw).shape[1]:,}",
            directory,
        )
        build_csr(raw, relation, directory, chunk_edges)
        for name in csr_files(relation):
            derived.complete(name)

    by_name = {relation.name: relation for relation in RELATIONS}
    for node_type, relation, averaged in (
        (NodeType.AUTHOR, by_name["writes"], "papers"),
        (NodeType.INSTITUTION, by_name["employs"], "authors"),
    ):
        name = FEATURE_FILES[node_type]
        if name in derived.files:  # else not built yet, or forgotten when the author features were rebuilt
            if problems[name] is None:
                continue
            log.warning("%s %s; rebuilding it", directory / name, problems[name])
            derived.forget(name)
        source = (
            raw.paper_features if node_type is NodeType.AUTHOR else _mapped(directory / FEATURE_FILES[NodeType.AUTHOR])
        )
        build_mean_features(
            source,
            *(_mapped(directory / csr) for csr in csr_files(relation)),
            directory / name,
            feature_block_rows,
            f"{node_type.name.lower()} features (mean of {averaged})",
        )
        derived.complete(name)
        if node_type is NodeType.AUTHOR:  # institutions average authors: rebuild them too
            derived.forget(FEATURE_FILES[NodeType.INSTITUTION])
    log.info("MAG240M derived files ready in %s (%.1f s)", directory, time.perf_counter() - started)
    return derived


class MAG240MGraph:
    """Memory-mapped CSR, features and labels of the release in ``raw_directory`` and its derived files; pickled
    without arrays (each process maps the files itself on first use). ``num_nodes``: nodes per type."""

    def __init__(self, raw_directory: Path, derived_directory: Path, num_nodes: Mapping[NodeType, int]) -> None:
        self.raw_directory = Path(raw_directory)
        self.derived_directory = Path(derived_directory)
        self.num_nodes = {NodeType(k): int(v) for k, v in num_nodes.items()}
        self._arrays: dict | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrays": None}

    @property
    def arrays(self) -> dict:
        """This process's memory maps, as plain read-only ndarray views (no per-access ``np.memmap`` overhead)."""
        if self._arrays is None:
            derived, paper = self.derived_directory, self.raw_directory / "processed" / "paper"
            self._arrays = {
                "indptr": [_mapped(derived / csr_files(relation)[0]) for relation in RELATIONS],
                "indices": [_mapped(derived / csr_files(relation)[1]) for relation in RELATIONS],
                "features": [
                    _mapped(paper / "node_feat.npy"),
                    *(_mapped(derived / FEATURE_FILES[t]) for t in FEATURE_FILES),
                ],
                "labels": _mapped(paper / "node_label.npy"),
            }
        return self._arrays

    def features(self, node_type: NodeType) -> np.ndarray:
        return self.arrays["features"][node_type]

    def labels(self, papers: np.ndarray) -> np.ndarray:
        """float32 labels of ``papers``, NaN where unknown (outside arXiv, or hidden test labels)."""
        labels = np.asarray(self.arrays["labels"][papers], dtype=np.float32)
        return np.where(np.isfinite(labels) & (labels >= 0), labels, np.nan).astype(np.float32)
