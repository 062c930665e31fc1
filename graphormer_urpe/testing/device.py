"""The device of the exactness tests marked ``device`` and of ``bench/gpu/gpu_check.py`` (see docs/gpu.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def exactness_device() -> torch.device:
    """``cuda`` (the current GPU) when CUDA is available, else ``cpu``."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


@contextlib.contextmanager
def flex_attention_gradients(device: torch.device) -> Iterator[None]:
    """Let FlexAttention compute gradients on ``device``, for tests that compare the ``flex`` kernel with the eager
    one. On CUDA nothing changes (the fused kernels run). On a CPU torch refuses any backward, because it has no
    fused CPU backward kernel; its unfused reference implementation, which ``flex_attention`` runs there forward,
    computes gradients on any device, and the refusal is lifted for the block to reach it."""
    if device.type == "cuda":
        yield
        return
    from torch.nn.attention import flex_attention

    refusal = flex_attention._validate_device  # the check that raises "does not support backward on CPU"
    flex_attention._validate_device = lambda *args: None
    try:
        yield
    finally:
        flex_attention._validate_device = refusal
