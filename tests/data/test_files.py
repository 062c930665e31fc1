"""File integrity helpers: streaming checksums, records and their checks, atomic writes."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pytest

from graphormer_urpe.data import files
from graphormer_urpe.data.files import (
    atomic_write_json,
    atomic_write_text,
    crc32_file,
    file_record,
    manifest_problem,
    record_problem,
)

DATA = bytes(range(256)) * 41 + b"tail"  # 10,500 bytes


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "a.npy"
    path.write_bytes(DATA)
    return path


@pytest.mark.parametrize("block", [1, 7, 4096, 1 << 24])
def test_streaming_checksums_equal_the_whole_file_ones_for_any_block_size(data_file: Path, block: int) -> None:
    assert crc32_file(data_file, block) == zlib.crc32(DATA)


def test_checksums_of_an_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert crc32_file(empty) == 0


def test_record_holds_size_checksum_and_optionally_the_modification_time(data_file: Path) -> None:
    assert file_record(data_file) == {"bytes": 10_500, "crc32": zlib.crc32(DATA)}
    assert file_record(data_file, mtime=True) == {
        "bytes": 10_500,
        "crc32": zlib.crc32(DATA),
        "mtime_ns": data_file.stat().st_mtime_ns,
    }


def _flip_last_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_missing_truncated_and_corrupted_files_are_named(data_file: Path) -> None:
    record = file_record(data_file)
    assert record_problem(data_file, record) is None
    _flip_last_bit(data_file)  # same size
    assert record_problem(data_file, record) == "does not match its checksum (corrupted)"
    assert record_problem(data_file, record, verify_checksum=False) is None  # size only: not seen
    data_file.write_bytes(DATA[:-10])
    assert record_problem(data_file, record, verify_checksum=False) == "has 10490 bytes, expected 10500 (truncated?)"
    data_file.unlink()
    assert record_problem(data_file, record) == "is missing"


def test_a_recorded_modification_time_that_moved_triggers_the_checksum(data_file: Path) -> None:
    record = file_record(data_file, mtime=True)
    stamp = data_file.stat().st_mtime_ns
    _flip_last_bit(data_file)
    os.utime(data_file, ns=(stamp + 10**9, stamp + 10**9))
    assert record_problem(data_file, record, verify_checksum=False) == "does not match its checksum (corrupted)"
    os.utime(data_file, ns=(stamp, stamp))  # same time and size: only a full verification sees it
    assert record_problem(data_file, record, verify_checksum=False) is None
    assert record_problem(data_file, record, verify_checksum=True) == "does not match its checksum (corrupted)"
    _flip_last_bit(data_file)  # back to the recorded bytes, at another time: the checksum clears it
    assert record_problem(data_file, record, verify_checksum=False) is None


def test_manifest_problem_names_the_first_bad_file(tmp_path: Path) -> None:
    for name in ("x.npy", "sub/y.npy"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(DATA)
    records = {name: file_record(tmp_path / name) for name in ("x.npy", "sub/y.npy")}
    assert manifest_problem(tmp_path, records) is None
    (tmp_path / "sub/y.npy").write_bytes(DATA[:5])
    assert manifest_problem(tmp_path, records) == "sub/y.npy has 5 bytes, expected 10500 (truncated?)"
    (tmp_path / "x.npy").unlink()
    assert manifest_problem(tmp_path, records) == "x.npy is missing"


def test_atomic_write_replaces_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_json(path, {"b": [1, 2]})
    assert json.loads(path.read_text()) == {"b": [1, 2]}
    assert path.read_text() == json.dumps({"b": [1, 2]}, indent=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_a_write_interrupted_before_the_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "manifest.json"
    atomic_write_text(path, "old")

    def crash(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(path, "new" * 1000)
    assert path.read_text() == "old"
    monkeypatch.undo()
    with pytest.raises(TypeError):  # not serialisable: fails before anything is written
        atomic_write_json(path, {"a": object()})
    assert path.read_text() == "old"
