"""Inverted dropout with a cheaper random mask on CPU (``torch.nn.Dropout``'s per-element ``bernoulli_`` is a
large share of a CPU step, ``docs/benchmarks.md``): 16-bit uniform integers, four per 64-bit draw of torch's
global generator (so seeding reproduces them),

    keep = u >= round(p * 2^16)        u uniform on {0, ..., 2^16 - 1}
    out  = x * keep / P(keep)          P(keep) = 1 - round(p * 2^16) / 2^16

so the drop probability is ``p`` to within 2^-17 and the output is unbiased exactly. Other devices use
``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEVELS = 1 << 16
_INT16_MIN = -(1 << 15)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class Dropout(nn.Module):
    """Drop elements with probability ``p`` in [0, 1) in training, scaling the rest by ``1 / P(keep)``."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability {p} is not in [0, 1)")
        self.p = p

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def keep_mask(self, x: torch.Tensor) -> torch.Tensor | None:
        """The multiplier dropout applies to ``x`` (None when it does nothing), for ``scale_and_drop``: on CPU the
        mask ``forward`` would draw from the same generator state, elsewhere one from ``bernoulli_``.

        Shapes: x: any -> the same shape and dtype, values ``0`` or ``1 / P(keep)``; or None."""
        if not self.training or self.p == 0.0:
            return None
        if x.device.type != "cpu":
            return torch.empty_like(x).bernoulli_(1.0 - self.p).div_(1.0 - self.p)
        dropped_levels = round(self.p * _LEVELS)
        # random_() without bounds leaves the sign bit at 0; these bounds draw all 64 bits.
        words = torch.randint(_INT64_MIN, _INT64_MAX, ((x.numel() + 3) // 4,), dtype=torch.int64, device=x.device)
        uniform = words.view(torch.int16)[: x.numel()].view(x.shape)  # uniform on -2^15 .. 2^15 - 1
        keep = uniform >= _INT16_MIN + dropped_levels
        return torch.where(keep, _LEVELS / (_LEVELS - dropped_levels), 0.0).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: any -> the same."""
        if self.training and self.p > 0.0 and x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        keep = self.keep_mask(x)
        return x if keep is None else x * keep
