"""Directories for tests: what a directory holds, byte for byte, and a directory this process cannot write into."""

from __future__ import annotations

import os
from pathlib import Path

from graphormer_urpe.run.ledger import LOCK_FILE


def files_of(directory: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``directory`` but the run lock (it names its last holder)."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != LOCK_FILE
    }


def read_only_directory(tmp_path: Path) -> Path:
    """A read-only directory; as root, who ignores permissions, ``/proc`` (nobody can create files in it)."""
    if os.geteuid() == 0:
        return Path("/proc")
    directory = tmp_path / "read_only"
    directory.mkdir()
    directory.chmod(0o555)
    return directory
