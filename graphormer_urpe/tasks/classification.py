"""One classification task for graph, node and token labels.

:class:`Classification` covers binary labels (several at once) and one multi-class label, read where
the data says (``encoder.readout``, set by the data: per graph, at every node, or at each
subgraph's target node), with torchmetrics' metrics or an OGB evaluator. Missing labels are NaN, as
for regression targets, and are left out of the loss and of every metric.
:class:`~graphormer_urpe.tasks.tokens.SequenceTagging` is the same task on token sequences.
"""

from __future__ import annotations

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
from graphormer_urpe.tasks.base import DEFAULT_OPTIM, STAGES, OptimConfig, PerTargetTask, data_targets
from graphormer_urpe.tasks.metrics import DefinedBinaryAUROC, EvaluatorMetric, PerTargetMetrics


class Classification(PerTargetTask):
    """Classification per graph, per node (``readout: nodes``) or per target node (MAG240M).

    * ``binary``: Y targets, each 0 or 1 (several at once, e.g. toxicity assays), binary
      cross-entropy on the logits; ROC-AUC (exact, torchmetrics) and accuracy (probability >= 0.5)
      per target and their means ``val/auroc``, ``val/accuracy``; ``val/auroc`` selects the best
      checkpoint. A target whose labels in a split hold one class has no ROC-AUC (NaN, left out of
      the mean).
    * ``multiclass``: one target with labels 0 .. C-1 (C = the model's outputs, set by the data),
      cross-entropy; accuracy ``val/accuracy`` selects the best checkpoint, computed by
      torchmetrics or, with ``evaluator``, by the dataset's official OGB evaluator. ``train/accuracy``
      is logged at every step.

    Missing labels are NaN, left out of the loss and of the metrics (``docs/tasks.md``). Every metric
    is computed over the whole split, gathered across processes, and logged at the end of the epoch.

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
        evaluator: dotted path of an OGB evaluator class whose ``acc`` is the multi-class accuracy
            (``ogb.lsc.MAG240MEvaluator``), or None for torchmetrics' (the same number).
        data: the data's declaration (linked by the CLI), which decides the encoder's data fields,
            ``target_kind`` and ``target_names``.
    """

    def __init__(
        self,
        encoder: GraphormerConfig,
        optim: OptimConfig = DEFAULT_OPTIM,
        target_kind: str = "binary",
        target_names: list[str] | None = None,
        evaluator: str | None = None,
        data: DataSpec | None = None,
    ) -> None:
        if data is not None:
            self.check_data(data)
            target_kind, target_names = data_targets(data, target_kind, target_names, default_kind="binary")
        if target_kind not in ("binary", "multiclass"):
            raise DataError(f"Classification needs binary or multiclass targets, the data has {target_kind} "
                            "ones: train them with model.class_path: graphormer_urpe.tasks.GraphRegression")
        if evaluator is not None and target_kind != "multiclass":
            raise DataError(f"evaluator {evaluator} computes multi-class accuracy, the data's targets are "
                            f"{target_kind}: remove model.init_args.evaluator")
        super().__init__(encoder, optim, data)
        self.binary = target_kind == "binary"
        outputs = self.output_width(self.model.config)
        self.target_names = list(target_names or default_target_names(outputs if self.binary else 1))
        self.save_decided(target_kind=target_kind, target_names=self.target_names)
        self.metrics = nn.ModuleDict({stage: nn.ModuleList(
            [PerTargetMetrics(DefinedBinaryAUROC, "auroc", self.target_names, labels=True),
             PerTargetMetrics(BinaryAccuracy, "accuracy", self.target_names, labels=True)] if self.binary else
            [PerTargetMetrics(lambda: multiclass_accuracy(outputs, evaluator), "accuracy", self.target_names,
                              labels=True, class_scores=True)]
        ) for stage in STAGES})

    @staticmethod
    def output_width(encoder: GraphormerConfig) -> int:
        """The network's output width: one logit per binary target, or per class."""
        return encoder.num_outputs

    @property
    def monitor(self) -> tuple[str, str]:
        """Metric that selects the best checkpoint: ROC-AUC for binary labels, accuracy for classes."""
        return ("val/auroc", "max") if self.binary else ("val/accuracy", "max")

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Logits. (B, Y) binary, (B, C) multi-class; (B, N, .) with ``readout: nodes``"""
        return self.model(batch)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Probability of label 1 of each binary target, or of each class."""
        return torch.sigmoid(logits) if self.binary else torch.softmax(logits, dim=-1)

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor:
        logits, target = self.outputs_and_targets(self(batch), batch)
        logits = logits.float()
        if self.binary:
            known = ~torch.isnan(target)
            loss = F.binary_cross_entropy_with_logits(logits[known], target[known])
        else:
            known, label = class_labels(target)
            loss = F.cross_entropy(logits[known], label)
            accuracy = (logits[known].argmax(dim=-1) == label).float().mean()
            self.log("train/accuracy", accuracy, prog_bar=True, batch_size=len(label))
        self.log("train/loss", loss, prog_bar=True, batch_size=len(target))
        return loss

    def evaluation_step(self, batch: GraphBatch, stage: str) -> None:
        logits, target = self.outputs_and_targets(self(batch).float(), batch)
        probabilities = self.probabilities(logits)
        for metric in self.metrics[stage]:
            metric.update(probabilities, target)

    def predict_step(self, batch: GraphBatch, batch_idx: int) -> dict[str, torch.Tensor]:
        """Probabilities of every graph (or target node): (B, Y) of label 1, or (B, C) of each class."""
        return {"index": batch.index, "prediction": self.probabilities(self(batch).float())}

    def prediction_columns(self, prediction: np.ndarray) -> dict[str, np.ndarray]:
        """Predicted label and probabilities. prediction: (R, Y) probabilities of label 1, or (R, C)
        class probabilities; NaN rows (no graph) give empty labels."""
        missing = np.isnan(prediction).any(axis=1)
        if self.binary:
            columns = {}
            for k, name in enumerate(self.target_names):
                columns[name] = _labels(prediction[:, k] >= 0.5, missing)
                columns[f"{name}_probability"] = prediction[:, k]
            return columns
        name = self.target_names[0]
        return {name: _labels(predicted_classes(prediction), missing),
                **{f"{name}_probability_{c}": prediction[:, c] for c in range(prediction.shape[1])}}


def multiclass_accuracy(classes: int, evaluator: str | None) -> Metric:
    """Accuracy over C classes from class scores: the OGB evaluator's ``acc``, or torchmetrics' micro average."""
    return EvaluatorMetric(evaluator, "acc") if evaluator else MulticlassAccuracy(classes, average="micro")


def predicted_classes(probabilities: np.ndarray) -> np.ndarray:
    """The most probable class of every row (0 for NaN rows). (R, C) -> (R,) int64"""
    return np.argmax(np.nan_to_num(probabilities, nan=0.0), axis=1).astype(np.int64)


def _labels(values: np.ndarray, missing: np.ndarray) -> pd.arrays.IntegerArray:
    """Integer labels with empty entries where ``missing``."""
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64), mask=np.asarray(missing, dtype=bool))


def class_labels(target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with a label in the first target column, and those labels as class ids. ((K,) bool, (K',) int64)"""
    label = target[:, 0]
    known = ~torch.isnan(label)
    return known, label[known].long()
