"""One classification task for graph, node and token labels (docs/tasks.md)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric
from torchmetrics.classification import BinaryAccuracy, MulticlassAccuracy

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.spec import DataSpec, default_target_names
from graphormer_urpe.errors import DataError
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.tasks.base import STAGES, PerTargetTask, data_targets
from graphormer_urpe.tasks.compiled import CompileMode
from graphormer_urpe.tasks.metrics import (
    DefinedBinaryAUROC,
    DefinedBinaryAveragePrecision,
    EvaluatorMetric,
    PerTargetMetrics,
)
from graphormer_urpe.tasks.optimiser import DEFAULT_OPTIM, OptimConfig


class Classification(PerTargetTask):
    """Classification per graph, per node (``readout: nodes``) or per target node (MAG240M): ``binary`` (Y labels
    0 or 1, BCE, ``val/auroc``) or ``multiclass`` (one label 0 .. C-1, cross-entropy, ``val/accuracy``); missing
    labels (NaN) are left out of the loss and metrics. Losses, metrics and selection: docs/tasks.md.

    Example:
        >>> from graphormer_urpe import GraphormerConfig
        >>> config = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, num_outputs=3)
        >>> task = Classification(config, target_kind="multiclass")
        >>> task.monitor, task.binary
        (('val/accuracy', 'max'), False)

    Args:
        encoder: the network's hyper-parameters (vocabularies, outputs and readout set by ``data``).
        optim: the optimiser and learning-rate schedule.
        target_kind: ``binary`` or ``multiclass`` (set by ``data``).
        target_names: name of every target (set by ``data``), for metric names and predictions.
        evaluator: dotted path of the OGB evaluator whose ``acc`` is logged (``ogb.lsc.MAG240MEvaluator``), or null.
        data: the data's declaration (linked by the CLI), which decides the fields marked "set by ``data``".
        compile: the training step eager (false), compiled (true) or compiled into CUDA graphs (``cuda_graphs``).
    """

    #: The encoder field of the network's output width: one logit per binary target, or per class.
    output_field = "num_outputs"

    def __init__(
        self,
        encoder: GraphormerConfig,
        optim: OptimConfig = DEFAULT_OPTIM,
        target_kind: str = "binary",
        target_names: list[str] | None = None,
        evaluator: str | None = None,
        data: DataSpec | None = None,
        compile: CompileMode = False,
    ) -> None:
        if data is not None:
            self.check_data(data)
            target_kind, target_names = data_targets(data, target_kind, target_names, default_kind="binary")
        if target_kind not in ("binary", "multiclass"):
            raise DataError(
                f"Classification needs binary or multiclass targets, the data has {target_kind} "
                "ones: train them with model.class_path: graphormer_urpe.tasks.GraphRegression"
            )
        if evaluator is not None and target_kind != "multiclass":
            raise DataError(
                f"evaluator {evaluator} computes multi-class accuracy, the data's targets are "
                f"{target_kind}: remove model.init_args.evaluator"
            )
        super().__init__(encoder, optim, data, compile)
        self.binary = target_kind == "binary"
        self.monitor = ("val/auroc", "max") if self.binary else ("val/accuracy", "max")
        outputs = getattr(self.model.config, self.output_field)
        self.target_names = list(target_names or default_target_names(outputs if self.binary else 1))
        self.save_decided(target_kind=target_kind, target_names=self.target_names)
        self.num_classes = 0 if self.binary else outputs
        self.evaluator_path = evaluator
        self.metrics = nn.ModuleDict({stage: self.new_metrics() for stage in STAGES})

    def new_metrics(self) -> nn.ModuleList:
        """Binary: ROC-AUC (``auroc``), PR-AUC (``auprc``, the average precision), both NaN for a label whose rows
        hold one class, and accuracy at p >= 0.5, per label and their mean; multi-class: accuracy."""
        names = self.target_names
        if self.binary:
            return nn.ModuleList(
                [
                    PerTargetMetrics(DefinedBinaryAUROC, "auroc", names, labels=True),
                    PerTargetMetrics(DefinedBinaryAveragePrecision, "auprc", names, labels=True),
                    PerTargetMetrics(BinaryAccuracy, "accuracy", names, labels=True),
                ]
            )
        accuracy = partial(multiclass_accuracy, self.num_classes, self.evaluator_path)
        return nn.ModuleList([PerTargetMetrics(accuracy, "accuracy", names, labels=True, class_scores=True)])

    def score_names(self) -> list[str]:
        """The probability of label 1 of each binary target, or of each class."""
        if self.binary:
            return [f"{name}_probability" for name in self.target_names]
        return [f"{self.target_names[0]}_probability_{c}" for c in range(self.num_classes)]

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Logits. (B, Y) binary, (B, C) multi-class; (B, N, .) with ``readout: nodes``"""
        return self.model(batch)

    def step_losses(self, batch: GraphBatch) -> dict[str, torch.Tensor]:
        """Binary cross-entropy averaged over the known labels, or cross-entropy and accuracy averaged over the rows
        with a class (NaN if none)."""
        logits, target = self.padded_outputs_and_targets(self(batch), batch)  # (R, Y) or (R, C); (R, Y)
        logits = logits.float()
        if self.binary:
            known = ~torch.isnan(target)
            label = torch.where(known, target, 0.0)
            per_label = F.binary_cross_entropy_with_logits(logits, label, reduction="none")
            return {"loss": torch.where(known, per_label, 0.0).sum() / known.sum()}
        known = ~torch.isnan(target[:, 0])  # rows with a class
        label = torch.where(known, target[:, 0], 0.0).long()
        per_row = F.cross_entropy(logits, label, reduction="none")
        correct = logits.argmax(dim=-1) == label
        rows = known.sum()
        return {"loss": torch.where(known, per_row, 0.0).sum() / rows, "accuracy": (correct & known).sum() / rows}

    def predictions(self, batch: GraphBatch) -> torch.Tensor:
        """Probability of label 1 of each binary target, or of each class. (B, Y) or (B, C); (B, N, .) per node"""
        logits = self(batch).float()
        return torch.sigmoid(logits) if self.binary else torch.softmax(logits, dim=-1)

    def prediction_columns(self, prediction: np.ndarray) -> dict[str, np.ndarray]:
        """Predicted label and probabilities; NaN rows (no graph) give empty labels. prediction: (R, Y) or (R, C)"""
        missing = np.isnan(prediction).any(axis=1)
        scores = dict(zip(self.score_names(), prediction.T))
        if self.binary:
            columns = {}
            for k, name in enumerate(self.target_names):
                columns[name] = _labels(prediction[:, k] >= 0.5, missing)
                columns[f"{name}_probability"] = scores[f"{name}_probability"]
            return columns
        return {self.target_names[0]: _labels(predicted_classes(prediction), missing), **scores}


def multiclass_accuracy(classes: int, evaluator: str | None) -> Metric:
    """Accuracy over C classes from class scores: the OGB evaluator's ``acc``, or torchmetrics' micro average."""
    return EvaluatorMetric(evaluator, "acc") if evaluator else MulticlassAccuracy(classes, average="micro")


def predicted_classes(probabilities: np.ndarray) -> np.ndarray:
    """The most probable class of every row (0 for NaN rows). (R, C) -> (R,) int64"""
    return np.argmax(np.nan_to_num(probabilities, nan=0.0), axis=1).astype(np.int64)


def _labels(values: np.ndarray, missing: np.ndarray) -> pd.arrays.IntegerArray:
    """Integer labels with empty entries where ``missing``."""
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64), mask=np.asarray(missing, dtype=bool))
