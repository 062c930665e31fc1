"""Test and benchmark tooling (as ``torch_geometric.testing``); the library never imports it (see docs/testing.md)."""
