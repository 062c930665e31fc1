"""Test and benchmark tooling (as ``torch_geometric.testing``): generated datasets in real release layouts,
small random graphs, tiny training runs, processes joined by gloo, directories' contents, reference
implementations and float tolerances. The test suite imports its helpers from here; the library never does."""
