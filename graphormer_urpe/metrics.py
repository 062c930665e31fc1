"""Metrics computed by the official OGB evaluators over a whole split, gathered across processes."""

from __future__ import annotations

import importlib

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat


class EvaluatorMetric(Metric):
    """Collects predictions and targets, then asks an OGB evaluator (``evaluator.eval``) for one key.

    Under DDP the collected tensors are concatenated across processes before the evaluator runs,
    so the result is the metric of the whole split, exactly as the leaderboard computes it.

    Args:
        evaluator: dotted path of the evaluator class, e.g. ``ogb.lsc.MAG240MEvaluator``.
        key: the entry of its result to report, e.g. ``acc``.
    """

    full_state_update = False

    def __init__(self, evaluator: str, key: str) -> None:
        super().__init__()
        module, name = evaluator.rsplit(".", 1)
        self.evaluator = getattr(importlib.import_module(module), name)()
        self.key = key
        self.add_state("preds", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Shapes: preds, target: (K,)."""
        self.preds.append(preds.detach())
        self.target.append(target.detach())

    def compute(self) -> torch.Tensor:
        if isinstance(self.target, list) and not self.target:  # nothing seen (no labelled target)
            return torch.tensor(float("nan"))
        preds, target = dim_zero_cat(self.preds).cpu(), dim_zero_cat(self.target).cpu()
        if target.numel() == 0:
            return torch.tensor(float("nan"))
        return torch.tensor(float(self.evaluator.eval({"y_pred": preds, "y_true": target})[self.key]))
