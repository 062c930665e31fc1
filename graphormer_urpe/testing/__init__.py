"""Test and benchmark tooling (as ``torch_geometric.testing``); the library never imports it (see docs/testing.md)."""

from pathlib import Path

#: The source checkout the tests run in: its root scripts, examples and docs. Only test tooling assumes a
#: checkout; the library runs installed from a wheel as well (tests/test_layout.py).
REPO_DIR = Path(__file__).resolve().parents[2]
