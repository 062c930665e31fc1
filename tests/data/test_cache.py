"""The chunked memory-mapped cache: round trip, skipping, resume, corruption, progress within a chunk."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe.data import cache
from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.cache import CacheSpec, GraphStore, build_store, chunk_problem
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.testing.graphs import random_edges

SPEC = CacheSpec(DataSpec(node_vocab=(5, 3), edge_vocab=(4,), num_targets=2, num_outputs=2), max_nodes=30)


class FakeReader:
    """Random graphs; rows 3 and 11 are unusable, row 7 has an out-of-vocabulary feature."""

    def __init__(self, num_rows: int = 25) -> None:
        self.num_rows = num_rows
        self.calls: list[tuple[int, int]] = []

    def graph(self, row: int) -> RawGraph | str:
        if row in (3, 11):
            return "RDKit cannot parse"
        rng = np.random.default_rng(row)
        n = 40 if row == 19 else int(rng.integers(1, 20))
        edges = random_edges(rng, n, extra=2, connected=row % 2 == 0)
        x = np.stack([rng.integers(0, 5, n), rng.integers(0, 3, n)], 1)
        if row == 7:
            x[0, 1] = 3
        return RawGraph(
            x=x,
            edge_index=edges,
            edge_attr=rng.integers(0, 4, (edges.shape[1], 1)),
            y=rng.normal(size=2).astype(np.float32),
        )

    def worker_init(self) -> None:
        """Nothing to prepare."""

    def graphs(self, start: int, stop: int, max_nodes: int | None = None) -> Iterator[tuple[int, RawGraph | str]]:
        self.calls.append((start, stop))
        for row in range(start, stop):
            yield row, self.graph(row)


def build(directory: Path, reader: FakeReader, workers: int = 0):
    splits = {"train": np.arange(0, 20), "valid": np.arange(20, 25)}
    return build_store(reader, directory, {"test": 1}, SPEC, splits, num_workers=workers, chunk_size=6)


@pytest.mark.parametrize("workers", [0, 2])
def test_round_trip_and_skips(tmp_path: Path, workers: int) -> None:
    reader = FakeReader()
    summary = build(tmp_path, reader, workers)
    assert [row for row, _ in summary.skipped] == [3, 7, 11, 19]
    assert "max_nodes" in dict(summary.skipped)[19] and "column 1" in dict(summary.skipped)[7]
    store = GraphStore(tmp_path)
    assert len(store) == 21 and store.manifest["skipped"] == 4
    for index, row in enumerate(store.source_row):
        expected, record = reader.graph(int(row)), store.record(index)
        structure = graph_structure(len(expected.x), expected.edge_index)
        np.testing.assert_array_equal(record.x, expected.x)
        np.testing.assert_array_equal(record.edge_index, expected.edge_index)
        np.testing.assert_array_equal(record.spd, structure.spd)
        np.testing.assert_array_equal(record.first_edge, structure.first_edge)
        np.testing.assert_array_equal(record.y, expected.y)
        assert record.index == index
    splits = store.split_indices()
    assert len(splits["train"]) == 16 and len(splits["valid"]) == 5  # rows 3, 7, 11, 19 skipped


def test_arrays_are_memory_mapped_and_compact(tmp_path: Path) -> None:
    build(tmp_path, FakeReader())
    chunk = GraphStore(tmp_path).chunks[0]
    assert isinstance(chunk.arrays["spd"].base, np.memmap)  # a plain view of the memory map, not a copy
    assert chunk.arrays["spd"].dtype == np.uint8 and chunk.arrays["first_edge"].dtype == np.int16


def test_interrupted_build_resumes_at_missing_chunks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    build(tmp_path, FakeReader())
    (tmp_path / "manifest.json").unlink()
    for name in ("chunk_00002", "chunk_00003"):  # as if killed before these were written
        for file in (tmp_path / name).iterdir():
            file.unlink()
        (tmp_path / name).rmdir()
    reader = FakeReader()
    with caplog.at_level(logging.INFO):
        build(tmp_path, reader)
    assert reader.calls == [(12, 18), (18, 24)]
    assert len(GraphStore(tmp_path)) == 21


class TerminatedReader(FakeReader):
    """A FakeReader whose reading of ``row`` sends SIGTERM to the process that builds the cache (a preemption)."""

    def __init__(self, row: int) -> None:
        super().__init__()
        self.row = row
        self.builder = os.getpid()

    def graph(self, row: int) -> RawGraph | str:
        if row == self.row:
            os.kill(self.builder, signal.SIGTERM)
            time.sleep(5)  # the signal ends the build before this row is done
        return super().graph(row)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_sigterm_while_building_says_what_is_kept_and_the_same_build_resumes(
    tmp_path: Path, workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed in the third chunk of 6 rows: exit code 143 and one line (the first two chunks kept when the chunks are
    built in order), the handler given back; the next build resumes and caches what an uninterrupted one does."""
    before = signal.getsignal(signal.SIGTERM)
    with caplog.at_level(logging.WARNING), pytest.raises(SystemExit) as stop:
        build(tmp_path / "cache", TerminatedReader(row=14), workers)
    assert stop.value.code == 143
    (line,) = [record.getMessage() for record in caplog.records if "SIGTERM" in record.getMessage()]
    kept = "12 of 25 rows" if workers == 0 else "of 25 rows"
    assert f"SIGTERM received while preprocessing into {tmp_path / 'cache'}: " in line and kept in line
    assert line.endswith("the same command resumes from there")
    assert signal.getsignal(signal.SIGTERM) == before
    assert not (tmp_path / "cache" / "manifest.json").exists()
    reader = FakeReader()
    build(tmp_path / "cache", reader)
    if workers == 0:
        assert reader.calls == [(12, 18), (18, 24), (24, 25)]
    build(tmp_path / "fresh", FakeReader())
    resumed, fresh = GraphStore(tmp_path / "cache"), GraphStore(tmp_path / "fresh")
    assert len(resumed) == len(fresh) == 21
    for index in range(len(fresh)):
        np.testing.assert_array_equal(resumed.record(index).x, fresh.record(index).x)


def test_truncated_or_corrupt_chunks_are_detected_and_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, FakeReader())
    spd = tmp_path / "chunk_00001" / "spd.npy"
    spd.write_bytes(spd.read_bytes()[:-5])
    assert "truncated" in chunk_problem(tmp_path / "chunk_00001")
    y = tmp_path / "chunk_00002" / "y.npy"
    data = bytearray(y.read_bytes())
    data[-1] ^= 0xFF
    y.write_bytes(bytes(data))
    assert "checksum" in chunk_problem(tmp_path / "chunk_00002")
    reader = FakeReader()
    summary = build(tmp_path, reader)
    assert summary.rebuilt_chunks == 2 and reader.calls == [(6, 12), (12, 18)]
    assert chunk_problem(tmp_path / "chunk_00001") is None and chunk_problem(tmp_path / "chunk_00002") is None


def test_manifest_records_totals(tmp_path: Path) -> None:
    build(tmp_path, FakeReader())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["rows"] == 25 and manifest["graphs"] == 21 and manifest["key"] == {"test": 1}
    assert manifest["skipped_examples"][0] == [3, "RDKit cannot parse"]


def test_vectorised_checks_give_the_same_reasons_as_one_by_one() -> None:
    reader = FakeReader(40)
    good = reader.graph(0)
    graphs = (
        [g for g in (reader.graph(row) for row in range(40)) if not isinstance(g, str)]
        + [
            good._replace(edge_index=good.edge_index + 100),  # edge to a missing node
            good._replace(edge_attr=good.edge_attr[:-1]),  # one feature row short
            good._replace(x=good.x[:, :1]),  # a feature column missing
            good._replace(y=np.zeros(3, np.float32)),  # wrong target count
            good._replace(x=good.x[:0]),  # no nodes
            good._replace(edge_attr=np.full_like(good.edge_attr, 9)),  # edge feature outside its vocabulary
        ]
    )
    expected = [SPEC.problem(g) for g in graphs]
    assert SPEC.problems(graphs) == expected
    assert sum(reason is not None for reason in expected) == 8  # rows 7 and 19, and the six above


def test_summary_counts_skips_per_split_and_says_what_was_done(tmp_path: Path) -> None:
    summary = build(tmp_path, FakeReader())
    assert summary.skipped_by_split == {"train": 4, "valid": 0}  # rows 3, 7, 11, 19
    assert summary.rows == summary.processed_rows == 25 and summary.graphs == 21
    text = summary.describe()
    assert "25 of 25 rows preprocessed" in text and "21 graphs cached, 4 rows skipped" in text
    assert "(train 4; first: row 3: RDKit cannot parse; row 7: node-feature column 1" in text
    assert json.loads((tmp_path / "manifest.json").read_text())["skipped_by_split"] == {"train": 4, "valid": 0}
    again = build(tmp_path, FakeReader())
    assert again.processed_rows == 0 and "0 of 25 rows preprocessed" in again.describe()
    assert "(25 rows/s)" in dataclasses.replace(summary, seconds=1.0).describe()
    assert "(0.33 rows/s)" in dataclasses.replace(summary, processed_rows=1, seconds=3.0).describe()  # was "0 rows/s"


def test_chunks_of_another_chunk_size_and_stale_temporaries_are_replaced(tmp_path: Path) -> None:
    build(tmp_path, FakeReader())  # chunk_size 6
    stale = tmp_path / ".chunk_00000.tmp-12345"  # a run killed while writing
    stale.mkdir()
    (stale / "x.npy").write_bytes(b"partial")
    reader = FakeReader()
    summary = build_store(reader, tmp_path, {"test": 1}, SPEC, {"train": np.arange(25)}, num_workers=0, chunk_size=10)
    assert not stale.exists()
    assert summary.rebuilt_chunks == 3 and reader.calls == [(0, 10), (10, 20), (20, 25)]
    assert len(GraphStore(tmp_path)) == 21


# ----------------------------------------------------------------------------- continuous features, per-node targets

NODE_SPEC = CacheSpec(
    DataSpec(
        node_vocab=(3,),
        edge_vocab=(2,),
        num_targets=2,
        num_outputs=2,
        continuous_node_dim=4,
        continuous_edge_dim=1,
        target_level="node",
    ),
    max_nodes=30,
)


class NodeTargetReader(FakeReader):
    """Graphs with continuous node and edge features and two targets per node (some NaN); row 5 has a
    NaN continuous node feature, row 6 a target row count that does not match its nodes."""

    def graph(self, row: int) -> RawGraph | str:
        rng = np.random.default_rng(row)
        n = int(rng.integers(1, 12))
        edges = random_edges(rng, n)
        y = rng.normal(size=(n + (row == 6), 2)).astype(np.float32)
        y[rng.random(y.shape) < 0.3] = np.nan
        x_continuous = rng.normal(size=(n, 4))
        if row == 5:
            x_continuous[0, 2] = np.nan
        e = edges.shape[1]
        return RawGraph(
            x=rng.integers(0, 3, (n, 1)),
            edge_index=edges,
            edge_attr=rng.integers(0, 2, (e, 1)),
            y=y,
            x_continuous=x_continuous,
            edge_continuous=rng.normal(size=(e, 1)),
        )


@pytest.mark.parametrize("workers", [0, 2])
def test_continuous_features_and_per_node_targets_round_trip(tmp_path: Path, workers: int) -> None:
    from graphormer_urpe.data.batch import collate_graphs

    reader = NodeTargetReader(12)
    summary = build_store(
        reader, tmp_path, {"test": 2}, NODE_SPEC, {"train": np.arange(12)}, num_workers=workers, chunk_size=5
    )
    assert dict(summary.skipped) == {
        5: "continuous node-feature column 2 is not finite (NaN or inf)",
        6: f"targets of shape ({reader.graph(6).x.shape[0] + 1}, 2), expected ({reader.graph(6).x.shape[0]}, 2)",
    }
    store = GraphStore(tmp_path)
    records = [store.record(i) for i in range(len(store))]
    for record, row in zip(records, store.source_row):
        expected = reader.graph(int(row))
        np.testing.assert_array_equal(record.y, expected.y)  # NaN where unknown, one row per node
        np.testing.assert_array_equal(record.x_continuous, expected.x_continuous.astype(np.float32))
        np.testing.assert_array_equal(record.edge_continuous, expected.edge_continuous.astype(np.float32))
    picked = np.array([7, 0, 3])  # any order, across chunks
    np.testing.assert_array_equal(store.targets(picked), np.concatenate([records[i].y for i in picked]))
    batch = collate_graphs([records[i] for i in picked])
    n = batch.node_mask.sum(dim=1)
    assert batch.y.shape == (3, int(n.max()), 2) and torch.isnan(batch.y[~batch.node_mask]).all()
    for b, i in enumerate(picked):
        np.testing.assert_array_equal(batch.y[b, : n[b]].numpy(), records[i].y)
        np.testing.assert_array_equal(batch.x_continuous[b, : n[b]].numpy(), records[i].x_continuous)
    np.testing.assert_array_equal(
        batch.edge_continuous.numpy(), np.concatenate([records[i].edge_continuous for i in picked])
    )


def test_graph_level_caches_hold_no_continuous_features(tmp_path: Path) -> None:
    build(tmp_path, FakeReader())
    record = GraphStore(tmp_path).record(0)
    assert record.x_continuous is None and record.edge_continuous is None and record.y.shape == (2,)


def test_graphs_with_more_edges_than_int16_ids_hold_are_skipped_and_counted() -> None:
    i, j = np.nonzero(~np.eye(200, dtype=bool))
    dense = RawGraph(
        x=np.zeros((200, 2), np.int64),
        edge_index=np.stack([i, j]),
        edge_attr=np.zeros((len(i), 1), np.int64),
        y=np.zeros(2, np.float32),
    )
    spec = CacheSpec(SPEC.data, max_nodes=512)
    assert spec.problems([dense]) == ["39800 directed edges > 32767 (first-edge ids are int16)"]


class PausingReader(FakeReader):
    """Reads ``before`` rows of each chunk, then waits for ``go`` (a multiprocessing event set by whoever sees them)."""

    def __init__(self, go: multiprocessing.synchronize.Event, num_rows: int, before: int) -> None:
        super().__init__(num_rows)
        self.go, self.before = go, before

    def graphs(self, start: int, stop: int, max_nodes: int | None = None) -> Iterator[tuple[int, RawGraph | str]]:
        for row in range(start, stop):
            if row - start == self.before:
                self.go.wait(timeout=60)
            yield row, self.graph(row)


class RecordedBar(cache.tqdm):
    """The progress bar, keeping every count it showed."""

    shown: list[int] = []

    def update(self, n: float | None = 1) -> bool | None:
        RecordedBar.shown.append(int(self.n + (n or 0)))
        return super().update(n)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_progress_bar_counts_the_rows_of_a_chunk_as_they_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """Issue 38: the bar moved once per chunk (10,000 rows by default: minutes of RDKit descriptors at 0 %). Here the
    reader stops after 2 rows of every chunk of 6 until the bar has shown the rows read so far (``workers`` chunks
    at once): without counting within a chunk, no chunk would finish before the reader's minute of waiting, and the
    bar would show no count that is not a whole number of chunks."""
    go, chunk, rows = multiprocessing.get_context("fork").Event(), 6, 24
    monkeypatch.setattr(cache, "tqdm", RecordedBar)
    monkeypatch.setattr(cache, "PROGRESS_SECONDS", 0.05)
    RecordedBar.shown = []
    read_first = max(workers, 1) * 2  # read before any chunk can finish

    def release_when_shown() -> None:  # the reader's wait releases this thread, in this process or a worker
        while not go.wait(timeout=0.01):
            if any(count >= read_first for count in RecordedBar.shown):
                go.set()

    watcher = threading.Thread(target=release_when_shown)
    watcher.start()
    try:
        summary = build_store(
            PausingReader(go, rows, before=2),
            tmp_path,
            {"test": 1},
            SPEC,
            {"train": np.arange(rows)},
            num_workers=workers,
            chunk_size=chunk,
        )
    finally:
        go.set()
        watcher.join()
    assert summary.processed_rows == RecordedBar.shown[-1] == rows
    assert read_first in RecordedBar.shown and read_first % chunk  # shown while the chunks being read waited
