"""Test and benchmark tooling (as ``torch_geometric.testing``): generated datasets in real release layouts."""
