"""Float tolerances that follow from the dtype and the magnitude of the values compared, never from
one machine's rounding (the rule of ``docs/testing.md``)."""

from __future__ import annotations

import numpy as np
import torch

#: Units in the last place allowed between two evaluations of a computation a few layers deep in
#: another summation order: 2**-11 of the largest value's scale in float32, a thousandfold the
#: single-rounding error of a sum, and far below a real difference (of the order of the scale).
DEFAULT_ULPS = 4096


def rounding_tolerance(*values: torch.Tensor | np.ndarray, ulps: int = DEFAULT_ULPS) -> dict[str, float]:
    """``atol`` and ``rtol`` (0) for comparing two evaluations of one computation that sum in other
    orders: another batch composition, a permutation, padding, another CPU's vector width, CUDA.

    Rounding errors of sums and products scale with the magnitude of their terms, so the bound is
    absolute: ``ulps`` units in the last place of the largest magnitude among ``values`` (at least
    1) in their dtype.

    Example:
        >>> a = torch.tensor([0.4, -2.0])
        >>> rounding_tolerance(a, a + 1e-6)["atol"] == 4096 * 2.0 * float(torch.finfo(torch.float32).eps)
        True
    """
    tensors = [torch.as_tensor(v) for v in values]
    dtype = torch.promote_types(*[t.dtype for t in tensors]) if len(tensors) > 1 else tensors[0].dtype
    scale = max([1.0, *(float(t.detach().abs().max()) for t in tensors if t.numel())])
    return {"atol": ulps * float(torch.finfo(dtype).eps) * scale, "rtol": 0.0}
