"""Metrics over a whole split, gathered across processes: OGB evaluators, per-target metrics without NaN."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torchmetrics import Metric
from torchmetrics.classification import BinaryAUROC, BinaryAveragePrecision
from torchmetrics.utilities import dim_zero_cat

from graphormer_urpe.errors import import_object


class EvaluatorMetric(Metric):
    """Collects predictions and targets (across processes), then reports the ``key`` (``acc``) of an OGB
    ``evaluator`` (dotted path, ``ogb.lsc.MAG240MEvaluator``) on the whole split, as the leaderboard computes it."""

    full_state_update = False

    def __init__(self, evaluator: str, key: str) -> None:
        super().__init__()
        self.evaluator = import_object("model.evaluator", evaluator)()
        self.key = key
        self.add_state("preds", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Shapes: preds (K,) predicted labels, or (K, C) class scores (their argmax is the label); target (K,)."""
        if preds.dim() == 2:
            preds = preds.argmax(dim=-1)
        self.preds.append(preds.detach())
        self.target.append(target.detach())

    def compute(self) -> torch.Tensor:
        if isinstance(self.target, list) and not self.target:  # nothing seen (no labelled target)
            return torch.tensor(float("nan"))
        preds, target = dim_zero_cat(self.preds).cpu(), dim_zero_cat(self.target).cpu()
        if target.numel() == 0:
            return torch.tensor(float("nan"))
        return torch.tensor(float(self.evaluator.eval({"y_pred": preds, "y_true": target})[self.key]))


def _one_class(target: torch.Tensor | list[torch.Tensor]) -> bool:
    """Whether a binary metric's collected targets are empty or hold a single class."""
    target = dim_zero_cat(target) if isinstance(target, list) and target else target
    return isinstance(target, list) or target.numel() == 0 or bool(target.min() == target.max())


class DefinedBinaryAUROC(BinaryAUROC):
    """torchmetrics' exact ``BinaryAUROC``, but NaN (not 0) when the targets hold a single class (as OGB's)."""

    def compute(self) -> torch.Tensor:
        return torch.tensor(float("nan")) if _one_class(self.target) else super().compute()


class DefinedBinaryAveragePrecision(BinaryAveragePrecision):
    """torchmetrics' exact ``BinaryAveragePrecision`` (PR-AUC: the precision averaged over the recall steps), but NaN
    when the targets hold a single class, as :class:`DefinedBinaryAUROC` (torchmetrics gives a warning and 0 or 1)."""

    def compute(self) -> torch.Tensor:
        return torch.tensor(float("nan")) if _one_class(self.target) else super().compute()


class KnownCounts(Metric):
    """Labelled rows seen per target column, summed across processes."""

    full_state_update = False

    def __init__(self, num_targets: int) -> None:
        super().__init__()
        self.add_state("count", default=torch.zeros(num_targets, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, known: torch.Tensor) -> None:
        """Shapes: known (K, Y) bool."""
        self.count += known.sum(dim=0).to(self.count.device)

    def compute(self) -> torch.Tensor:
        return self.count


class PerTargetMetrics(nn.Module):
    """One metric (``make_metric()``, logged as ``key``) per target column, updated with its known (not NaN) rows, and
    their mean over the targets where it is defined. ``labels``: targets as integers; ``class_scores``: a row's
    predictions are the C scores of one multi-class target (else prediction column c belongs to target c)."""

    def __init__(
        self,
        make_metric: Callable[[], Metric],
        key: str,
        target_names: Sequence[str],
        labels: bool = False,
        class_scores: bool = False,
    ) -> None:
        super().__init__()
        self.key = key
        self.target_names = list(target_names)
        self.labels = labels
        self.class_scores = class_scores
        self.metrics = nn.ModuleList(make_metric() for _ in self.target_names)
        self.known = KnownCounts(len(self.target_names))

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Shapes: preds (K, Y), or (K, C) class scores of one multi-class target; target (K, Y), NaN where unknown."""
        known = ~torch.isnan(target)
        self.known.update(known)
        for column, metric in enumerate(self.metrics):
            rows = known[:, column]
            if rows.any():
                label = target[rows, column]
                metric.update(
                    preds[rows] if self.class_scores else preds[rows, column], label.long() if self.labels else label
                )

    def compute(self, prefix: str) -> dict[str, torch.Tensor]:
        """``{prefix/key: mean over defined targets}`` and, with several targets, ``prefix/key/<name>`` each."""
        counts = self.known.compute().reshape(-1)  # torchmetrics squeezes a single count
        values = torch.stack(
            [
                metric.compute().float().cpu() if count else torch.tensor(float("nan"))
                for metric, count in zip(self.metrics, counts.tolist())
            ]
        )
        defined = values[~torch.isnan(values)]
        result = {f"{prefix}/{self.key}": defined.mean() if defined.numel() else torch.tensor(float("nan"))}
        if len(values) > 1:
            result.update({f"{prefix}/{self.key}/{name}": value for name, value in zip(self.target_names, values)})
        return result

    def reset(self) -> None:
        self.known.reset()
        for metric in self.metrics:
            metric.reset()
