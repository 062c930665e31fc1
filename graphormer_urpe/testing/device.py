"""The device of the exactness tests marked ``device`` and of ``bench/gpu_check.py`` (see docs/gpu.md)."""

from __future__ import annotations

import torch


def exactness_device() -> torch.device:
    """``cuda`` (the current GPU) when CUDA is available, else ``cpu``."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
