"""Float tolerances that follow from the dtype and the magnitude of the values compared (see docs/testing.md)."""

from __future__ import annotations

import numpy as np
import torch

#: Ulps allowed between two evaluations a few layers deep in another summation order: in float32, 2**-11 of the
#: largest value's scale, a thousandfold a sum's single-rounding error and far below a real difference.
DEFAULT_ULPS = 4096


def rounding_tolerance(*values: torch.Tensor | np.ndarray, ulps: int = DEFAULT_ULPS) -> dict[str, float]:
    """``atol`` and ``rtol`` (0) for two evaluations of one computation summing in other orders (batch composition,
    permutation, padding, vector width, CUDA): ``ulps`` units in the last place, in their dtype, of the largest
    magnitude among ``values`` (at least 1), as rounding errors scale with the magnitude of the terms.

    Example:
        >>> a = torch.tensor([0.4, -2.0])
        >>> rounding_tolerance(a, a + 1e-6)["atol"] == 4096 * 2.0 * float(torch.finfo(torch.float32).eps)
        True
    """
    tensors = [torch.as_tensor(v) for v in values]
    dtype = torch.promote_types(*[t.dtype for t in tensors]) if len(tensors) > 1 else tensors[0].dtype
    scale = max([1.0, *(float(t.detach().abs().max()) for t in tensors if t.numel())])
    return {"atol": ulps * float(torch.finfo(dtype).eps) * scale, "rtol": 0.0}
