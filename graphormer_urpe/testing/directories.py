"""Directories for tests: what a directory holds, byte for byte, and a directory this process cannot write into."""

from __future__ import annotations

import os
from pathlib import Path

from graphormer_urpe.run.ledger import LOCK_FILE


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` but run directories' lock, whose text names the process that held the
    directory last (relative path -> bytes): what a refused start must leave byte for byte."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


def read_only_directory(tmp_path: Path) -> Path:
    """A directory this process cannot write into: made read-only for a normal user; as root, who
    writes anywhere permissions allow, ``/proc`` (a file system nobody can create files in)."""
    if os.geteuid() == 0:
        return Path("/proc")
    directory = tmp_path / "read_only"
    directory.mkdir()
    directory.chmod(0o555)
    return directory
