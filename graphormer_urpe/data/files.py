"""File integrity for every cache: atomic writes, checksums, file records and their check (``docs/loaders.md``)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

#: Bytes read at a time when streaming a file.
BLOCK = 1 << 24


def _blocks(path: Path, block: int = BLOCK) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while data := f.read(block):
            yield data


def crc32_file(path: Path, block: int = BLOCK) -> int:
    """CRC32 of a whole file, read in blocks (equal to ``zlib.crc32`` of its bytes)."""
    crc = 0
    for data in _blocks(path, block):
        crc = zlib.crc32(data, crc)
    return crc


def sha256_file(path: Path, block: int = BLOCK) -> str:
    """SHA-256 of a whole file, read in blocks, as hex digits."""
    digest = hashlib.sha256()
    for data in _blocks(path, block):
        digest.update(data)
    return digest.hexdigest()


def file_record(path: Path, mtime: bool = False) -> dict[str, int]:
    """What :func:`record_problem` checks a file against later: ``bytes``, ``crc32`` (and ``mtime_ns``)."""
    stat = path.stat()
    record = {"bytes": stat.st_size, "crc32": crc32_file(path)}
    if mtime:
        record["mtime_ns"] = stat.st_mtime_ns
    return record


def record_problem(path: Path, record: Mapping[str, int], verify_checksum: bool = True) -> str | None:
    """Why ``path`` no longer matches its :func:`file_record`, or None: the size is always compared, the CRC32
    with ``verify_checksum`` or when the recorded modification time differs."""
    if not path.is_file():
        return "is missing"
    stat = path.stat()
    if stat.st_size != record["bytes"]:
        return f"has {stat.st_size} bytes, expected {record['bytes']} (truncated?)"
    moved = "mtime_ns" in record and stat.st_mtime_ns != record["mtime_ns"]
    if (verify_checksum or moved) and crc32_file(path) != record["crc32"]:
        return "does not match its checksum (corrupted)"
    return None


def manifest_problem(
    directory: Path, records: Mapping[str, Mapping[str, int]], verify_checksum: bool = True
) -> str | None:
    """The first file of ``{relative name: record}`` not matching its record, as ``"<name> <problem>"``, or None."""
    for name, record in records.items():
        if (problem := record_problem(directory / name, record, verify_checksum)) is not None:
            return f"{name} {problem}"
    return None


def read_json_object(path: Path, keys: Collection[str] = ()) -> tuple[dict | None, str | None]:
    """The JSON object in ``path`` and None, or None and why it cannot be used (missing, not valid JSON, not
    an object, lacking one of ``keys``): a damaged manifest is reported in one line and rebuilt, never trusted."""
    try:
        payload = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None, "is missing"
    except (ValueError, OSError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, f"is not valid JSON, truncated or corrupted ({type(error).__name__})"
    if not isinstance(payload, dict):
        return None, f"is not a JSON object (a {type(payload).__name__})"
    if missing := [key for key in keys if key not in payload]:
        return None, f"lacks {', '.join(missing)} (corrupted)"
    return payload, None


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file renamed into place: readers never see a part."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def atomic_write_json(path: Path, payload: Any) -> None:
    """:func:`atomic_write_text` of ``payload`` as indented JSON."""
    atomic_write_text(path, json.dumps(payload, indent=1))


def unwritable(directory: Path) -> Path | None:
    """The nearest existing directory at or above ``directory`` if this process cannot create a file in it."""
    existing = Path(directory).absolute()
    while not existing.exists():
        existing = existing.parent
    try:
        with tempfile.TemporaryFile(dir=existing):
            return None
    except OSError:
        return existing
