"""LightningModules: loss, metrics, optimiser and learning-rate schedule around the plain model.

:class:`GraphormerTask` holds what every task shares (the model, checkpoint loading, AdamW with
warm-up and linear decay, one row per prediction whether targets are per graph or per node, and
per-target metrics with missing values left out); :class:`GraphRegression`,
:class:`GraphClassification` and :class:`NodeClassification` add a loss and metrics.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanAbsoluteError
from torchmetrics.classification import BinaryAccuracy, MulticlassAccuracy

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.sources.base import DataError
from graphormer_urpe.metrics import DefinedBinaryAUROC, EvaluatorMetric, PerTargetMetrics
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig

#: Evaluation stages, each with its own metric state.
STAGES = ("val", "test")


def warmup_linear_decay(step: int, warmup_steps: int, total_steps: int, end_factor: float = 0.0) -> float:
    """LR multiplier: linear from 0 to 1 over ``warmup_steps``, then linear to ``end_factor`` at
    ``total_steps`` (the papers' schedule; the official ``PolynomialDecayLR`` with power 1)."""
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - (1.0 - end_factor) * progress


class GraphormerTask(pl.LightningModule):
    """A Graphormer with the papers' optimiser and schedule; subclasses add loss and metrics.

    Subclasses call ``save_hyperparameters(ignore=["encoder"])`` and pass ``lr``, ``warmup_steps``,
    ``end_lr``, ``weight_decay`` and ``adam_eps`` as constructor arguments. A subclass may swap the
    network and its config dataclass (the synthetic sequence tasks use the sequence Transformer).

    Args:
        encoder: the Graphormer hyper-parameters.
    """

    #: The network, built from ``encoder``, and the config dataclass that ``from_checkpoint`` rebuilds.
    model_class: type[nn.Module] = Graphormer
    config_class: type = GraphormerConfig

    def __init__(self, encoder: GraphormerConfig) -> None:
        super().__init__()
        self.model = self.model_class(encoder)

    def save_encoder_config(self, encoder: GraphormerConfig) -> None:
        """Store the encoder config as primitives in the hyper-parameters (safe to ``torch.load``)."""
        self.hparams["encoder"] = dataclasses.asdict(encoder)

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str | torch.device = "cpu") -> GraphormerTask:
        """Rebuild the task from a checkpoint alone (config and vocabularies travel with it)."""
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
        # LightningCLI adds private entries such as ``_class_path``
        hparams = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
        task = cls(encoder=cls.config_class(**hparams.pop("encoder")), **hparams)
        task.load_state_dict(checkpoint["state_dict"])
        return task

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.AdamW(
            self.parameters(), lr=self.hparams.lr, betas=(0.9, 0.999),
            eps=self.hparams.adam_eps, weight_decay=self.hparams.weight_decay,
        )
        total = int(self.trainer.estimated_stepping_batches)
        end_factor = self.hparams.end_lr / self.hparams.lr
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_linear_decay(step, self.hparams.warmup_steps, total, end_factor)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    @staticmethod
    def outputs_and_targets(output: torch.Tensor, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """One row per prediction: per graph (or target node), or per real node with ``readout: nodes``.

        Shapes:
            output: (B, O) or (B, N, O); returns (K, O) outputs and (K, Y) targets (NaN where unknown).
        """
        if output.dim() == 3:  # per-node predictions: padding nodes dropped
            return output[batch.node_mask], batch.y[batch.node_mask]
        return output, batch.y


class PerTargetTask(GraphormerTask):
    """A task whose ``val``/``test`` metrics are :class:`PerTargetMetrics` in ``self.metrics[stage]``
    (a ``ModuleList``), computed over the whole split and logged at the end of each epoch.

    Subclasses implement :meth:`evaluation_step` and set ``monitor``.
    """

    metrics: nn.ModuleDict
    monitor: tuple[str, str]

    def evaluation_step(self, batch: GraphBatch, stage: str) -> None:
        """Update ``self.metrics[stage]`` with one batch."""
        raise NotImplementedError

    def validation_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self.evaluation_step(batch, "val")

    def test_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self.evaluation_step(batch, "test")

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val")

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")

    def _log_metrics(self, stage: str) -> None:
        """Log the split's metrics (already gathered across processes by torchmetrics) and reset them."""
        for metric in self.metrics[stage]:
            for name, value in metric.compute(stage).items():
                self.log(name, value, prog_bar=name == self.monitor[0])
            metric.reset()


class GraphRegression(PerTargetTask):
    """Regression with an L1 (or MSE) loss and MAE metrics, per graph (ZINC, QM9, PCQM4Mv2, tables of
    SMILES) or per node (``readout: nodes``).

    Several targets are learned at once; a missing value (NaN) is left out of the loss and of
    that target's metric. The MAE of every target is logged (``val/mae/<target>``) with their mean
    (``val/mae``, which selects the best checkpoint); with one target only ``val/mae``.

    Example:
        >>> from graphormer_urpe import GraphormerConfig
        >>> task = GraphRegression(GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4),
        ...                        lr=1e-3, warmup_steps=100)
        >>> task.monitor, task.target_names  # trained by pl.Trainer(...).fit(task, GraphDataModule(...))
        (('val/mae', 'min'), ['y'])

    Args:
        encoder: the Graphormer hyper-parameters (vocabularies and outputs are linked from data).
        lr: peak learning rate.
        warmup_steps: linear warm-up length in optimiser steps.
        end_lr: learning rate reached at the last step (the papers decay to 0).
        weight_decay: decoupled (AdamW) weight decay on every parameter, as the official code.
        adam_eps: Adam epsilon.
        normalize_targets: train on targets standardised with the training split's mean and std
            (metrics and predictions stay in the data's units); off for ZINC, as in the papers.
        loss: ``l1`` (MAE, the papers') or ``mse``; the mean over every known target value.
        target_kind: the data's kind of target (linked from the data); must be ``regression``.
        target_names: name of every target (linked from the data), for metric names and predictions.
    """

    #: Metric that selects the best checkpoint, and whether lower is better.
    monitor = ("val/mae", "min")

    def __init__(
        self,
        encoder: GraphormerConfig,
        lr: float = 2e-4,
        warmup_steps: int = 60_000,
        end_lr: float = 0.0,
        weight_decay: float = 0.0,
        adam_eps: float = 1e-8,
        normalize_targets: bool = False,
        loss: Literal["l1", "mse"] = "l1",
        target_kind: str = "regression",
        target_names: list[str] | None = None,
    ) -> None:
        if target_kind != "regression":
            raise DataError(f"the data's targets are {target_kind} class labels (data.source.task: {target_kind}): "
                             "train them with model.class_path: graphormer_urpe.tasks.GraphClassification")
        super().__init__(encoder)
        self.save_hyperparameters(ignore=["encoder"])
        self.save_encoder_config(encoder)
        self.target_names = target_names or default_target_names(encoder.num_outputs)
        self.register_buffer("target_mean", torch.zeros(encoder.num_outputs))
        self.register_buffer("target_std", torch.ones(encoder.num_outputs))
        self.metrics = nn.ModuleDict({
            stage: nn.ModuleList([PerTargetMetrics(MeanAbsoluteError, "mae", self.target_names)]) for stage in STAGES
        })

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Predictions in the data's units. (B, Y), or (B, N, Y) with ``readout: nodes``"""
        return self.model(batch) * self.target_std + self.target_mean

    def on_fit_start(self) -> None:
        if self.hparams.normalize_targets and self.trainer.datamodule is not None:
            mean, std = self.trainer.datamodule.target_statistics()
            self.target_mean.copy_(torch.as_tensor(mean))
            self.target_std.copy_(torch.as_tensor(std))

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor:
        output, target = self.outputs_and_targets(self.model(batch), batch)
        normalized = (target - self.target_mean) / self.target_std
        known = ~torch.isnan(normalized)
        loss_fn = F.l1_loss if self.hparams.loss == "l1" else F.mse_loss
        loss = loss_fn(output.float()[known], normalized[known])
        self.log("train/loss", loss, prog_bar=True, batch_size=batch.num_graphs)
        return loss

    def evaluation_step(self, batch: GraphBatch, stage: str) -> None:
        prediction, target = self.outputs_and_targets(self(batch).float(), batch)
        for metric in self.metrics[stage]:
            metric.update(prediction, target)

    def predict_step(self, batch: GraphBatch, batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch.index, "prediction": self(batch).float()}

    def prediction_columns(self, prediction: np.ndarray) -> dict[str, np.ndarray]:
        """One column per target, in the data's units. prediction: (R, Y)"""
        return {name: prediction[:, k] for k, name in enumerate(self.target_names)}


class GraphClassification(PerTargetTask):
    """Classification per graph (or per node, ``readout: nodes``): binary labels or one multi-class label.

    * ``binary``: Y targets, each 0 or 1 (several at once, e.g. toxicity assays), binary
      cross-entropy on the logits; ROC-AUC (exact, torchmetrics) and accuracy (probability >= 0.5)
      per target and their means ``val/auroc``, ``val/accuracy``; ``val/auroc`` selects the best
      checkpoint. A target whose labels in a split hold one class has no ROC-AUC (NaN, left out of
      the mean).
    * ``multiclass``: one target with labels 0 .. C-1 (C = the model's outputs, linked from the
      data), cross-entropy; accuracy ``val/accuracy`` selects the best checkpoint.

    Missing labels (NaN) are left out of the loss and the metrics.

    Example:
        >>> from graphormer_urpe import GraphormerConfig
        >>> config = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, num_outputs=3)
        >>> task = GraphClassification(config, target_kind="multiclass")
        >>> task.monitor, task.binary
        (('val/accuracy', 'max'), False)

    Args:
        encoder: the Graphormer hyper-parameters (vocabularies and outputs are linked from data).
        lr: peak learning rate.
        warmup_steps: linear warm-up length in optimiser steps.
        end_lr: learning rate reached at the last step.
        weight_decay: decoupled (AdamW) weight decay on every parameter.
        adam_eps: Adam epsilon.
        target_kind: ``binary`` or ``multiclass`` (linked from the data's ``task``).
        target_names: name of every target (linked from the data), for metric names and predictions.
    """

    def __init__(
        self,
        encoder: GraphormerConfig,
        lr: float = 2e-4,
        warmup_steps: int = 60_000,
        end_lr: float = 0.0,
        weight_decay: float = 0.0,
        adam_eps: float = 1e-8,
        target_kind: str = "binary",
        target_names: list[str] | None = None,
    ) -> None:
        if target_kind not in ("binary", "multiclass"):
            raise DataError(f"GraphClassification needs binary or multiclass targets, the data has {target_kind} "
                             "ones: train them with model.class_path: graphormer_urpe.tasks.GraphRegression")
        super().__init__(encoder)
        self.save_hyperparameters(ignore=["encoder"])
        self.save_encoder_config(encoder)
        self.binary = target_kind == "binary"
        self.target_names = target_names or default_target_names(encoder.num_outputs if self.binary else 1)
        if self.binary:
            metrics = {stage: nn.ModuleList([
                PerTargetMetrics(DefinedBinaryAUROC, "auroc", self.target_names, labels=True),
                PerTargetMetrics(BinaryAccuracy, "accuracy", self.target_names, labels=True),
            ]) for stage in STAGES}
        else:
            classes = encoder.num_outputs
            metrics = {stage: nn.ModuleList([PerTargetMetrics(
                lambda: MulticlassAccuracy(classes, average="micro"), "accuracy", self.target_names, labels=True,
                class_scores=True,
            )]) for stage in STAGES}
        self.metrics = nn.ModuleDict(metrics)

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
        logits, target = self.outputs_and_targets(self.model(batch), batch)
        logits = logits.float()
        if self.binary:
            known = ~torch.isnan(target)
            loss = F.binary_cross_entropy_with_logits(logits[known], target[known])
        else:
            known, label = class_labels(target)
            loss = F.cross_entropy(logits[known], label)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch.num_graphs)
        return loss

    def evaluation_step(self, batch: GraphBatch, stage: str) -> None:
        logits, target = self.outputs_and_targets(self(batch).float(), batch)
        probabilities = self.probabilities(logits)
        for metric in self.metrics[stage]:
            metric.update(probabilities, target)

    def predict_step(self, batch: GraphBatch, batch_idx: int) -> dict[str, torch.Tensor]:
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
        best = np.argmax(np.where(missing[:, None], 0.0, prediction), axis=1)
        return {name: _labels(best, missing),
                **{f"{name}_probability_{c}": prediction[:, c] for c in range(prediction.shape[1])}}


def _labels(values: np.ndarray, missing: np.ndarray) -> pd.arrays.IntegerArray:
    """Integer labels with empty entries where ``missing``."""
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64), mask=np.asarray(missing, dtype=bool))


def class_labels(target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with a label in the first target column, and those labels as class ids. ((K,) bool, (K',) int64)"""
    label = target[:, 0]
    known = ~torch.isnan(label)
    return known, label[known].long()


def default_target_names(count: int) -> list[str]:
    """``y``, or ``y0``, ``y1`` ... (the names of targets a dataset does not name)."""
    return ["y"] if count == 1 else [f"y{k}" for k in range(count)]


class NodeClassification(GraphormerTask):
    """Node classification read at each subgraph's target node, with cross-entropy (MAG240M).

    Accuracy is computed by the dataset's OGB evaluator (``ogb.lsc.MAG240MEvaluator``) over the
    whole split, gathered across processes. Targets whose label is unknown (NaN) are ignored.

    Args:
        encoder: the Graphormer hyper-parameters (``readout`` and widths are linked from data).
        lr: peak learning rate.
        warmup_steps: linear warm-up length in optimiser steps.
        end_lr: learning rate reached at the last step.
        weight_decay: decoupled (AdamW) weight decay on every parameter.
        adam_eps: Adam epsilon.
        evaluator: dotted path of the OGB evaluator class computing ``acc``.
    """

    #: Metric that selects the best checkpoint, and whether lower is better.
    monitor = ("val/acc", "max")

    def __init__(
        self,
        encoder: GraphormerConfig,
        lr: float = 3e-4,
        warmup_steps: int = 6_000,
        end_lr: float = 0.0,
        weight_decay: float = 0.01,
        adam_eps: float = 1e-8,
        evaluator: str = "ogb.lsc.MAG240MEvaluator",
    ) -> None:
        super().__init__(encoder)
        self.save_hyperparameters(ignore=["encoder"])
        self.save_encoder_config(encoder)
        self.val_acc = EvaluatorMetric(evaluator, "acc")
        self.test_acc = EvaluatorMetric(evaluator, "acc")

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Class logits of every target node. (B, classes)"""
        return self.model(batch)

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor:
        known, label = class_labels(batch.y)
        logits = self.model(batch).float()[known]
        loss = F.cross_entropy(logits, label)
        accuracy = (logits.argmax(dim=-1) == label).float().mean()
        self.log("train/loss", loss, prog_bar=True, batch_size=int(known.sum()))
        self.log("train/acc", accuracy, prog_bar=True, batch_size=int(known.sum()))
        return loss

    def _evaluate(self, batch: GraphBatch, metric: EvaluatorMetric, name: str) -> None:
        known, label = class_labels(batch.y)
        metric.update(self(batch)[known].argmax(dim=-1), label)
        self.log(name, metric, prog_bar=True, batch_size=int(known.sum()))

    def validation_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, self.val_acc, "val/acc")

    def test_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_acc, "test/acc")

    def predict_step(self, batch: GraphBatch, batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch.index, "prediction": self(batch).argmax(dim=-1)}
