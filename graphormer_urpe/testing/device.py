"""The device of the exactness tests, shared by the test suite and ``bench/gpu_check.py``.

The exactness tests that matter on a GPU (URPE with C = 1 equals RPE, padding and batch
composition do not change a graph, half precision stays finite, exact resume, the first edges and
the padded MAG240M batch equal their CPU reference) carry the :data:`DEVICE_MARKER` marker and take
their device from :func:`exactness_device`: the GPU when there is one, the CPU otherwise. They are
never skipped; ``python -m pytest -m device`` runs exactly them.
"""

from __future__ import annotations

import torch

#: The pytest marker of the tests that follow the device (registered in ``pyproject.toml``).
DEVICE_MARKER = "device"


def exactness_device() -> torch.device:
    """``cuda`` (the current GPU) when CUDA is available, else ``cpu``."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
