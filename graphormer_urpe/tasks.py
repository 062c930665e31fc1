"""LightningModules: loss, metrics, optimiser and learning-rate schedule around the plain model.

:class:`GraphormerTask` holds what every task shares (the model, checkpoint loading, AdamW with
warm-up and linear decay); :class:`GraphRegression` and :class:`NodeClassification` add a loss
and metrics.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanAbsoluteError

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.metrics import EvaluatorMetric
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig


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


class GraphRegression(GraphormerTask):
    """Graph-level regression with an L1 loss and MAE metrics (ZINC, QM9, PCQM4Mv2).

    Args:
        encoder: the Graphormer hyper-parameters (vocabularies and outputs are linked from data).
        lr: peak learning rate.
        warmup_steps: linear warm-up length in optimiser steps.
        end_lr: learning rate reached at the last step (the papers decay to 0).
        weight_decay: decoupled (AdamW) weight decay on every parameter, as the official code.
        adam_eps: Adam epsilon.
        normalize_targets: train on targets standardised with the training split's mean and std
            (metrics stay in the data's units); off for ZINC, as in the papers.
        loss: ``l1`` (MAE, the papers') or ``mse``.
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
    ) -> None:
        super().__init__(encoder)
        self.save_hyperparameters(ignore=["encoder"])
        self.save_encoder_config(encoder)
        self.register_buffer("target_mean", torch.zeros(encoder.num_outputs))
        self.register_buffer("target_std", torch.ones(encoder.num_outputs))
        self.val_mae = MeanAbsoluteError()
        self.test_mae = MeanAbsoluteError()

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Predictions in the data's units. (B, Y)"""
        return self.model(batch) * self.target_std + self.target_mean

    def on_fit_start(self) -> None:
        if self.hparams.normalize_targets and self.trainer.datamodule is not None:
            mean, std = self.trainer.datamodule.target_statistics()
            self.target_mean.copy_(torch.as_tensor(mean))
            self.target_std.copy_(torch.as_tensor(std))

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor:
        normalized = (batch.y - self.target_mean) / self.target_std
        known = ~torch.isnan(normalized)
        prediction = self.model(batch).float()
        loss_fn = F.l1_loss if self.hparams.loss == "l1" else F.mse_loss
        loss = loss_fn(prediction[known], normalized[known])
        self.log("train/loss", loss, prog_bar=True, batch_size=batch.num_graphs)
        return loss

    def _evaluate(self, batch: GraphBatch, metric: MeanAbsoluteError, name: str) -> None:
        prediction = self(batch).float()
        known = ~torch.isnan(batch.y)
        metric.update(prediction[known], batch.y[known])
        self.log(name, metric, prog_bar=True, batch_size=batch.num_graphs)

    def validation_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, self.val_mae, "val/mae")

    def test_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_mae, "test/mae")

    def predict_step(self, batch: GraphBatch, batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch.index, "prediction": self(batch).float()}


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

    @staticmethod
    def _known(batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask of targets with a label, and those labels as class ids. ((B,), (K,))"""
        label = batch.y[:, 0]
        known = ~torch.isnan(label)
        return known, label[known].long()

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor:
        known, label = self._known(batch)
        logits = self.model(batch).float()[known]
        loss = F.cross_entropy(logits, label)
        accuracy = (logits.argmax(dim=-1) == label).float().mean()
        self.log("train/loss", loss, prog_bar=True, batch_size=int(known.sum()))
        self.log("train/acc", accuracy, prog_bar=True, batch_size=int(known.sum()))
        return loss

    def _evaluate(self, batch: GraphBatch, metric: EvaluatorMetric, name: str) -> None:
        known, label = self._known(batch)
        metric.update(self(batch)[known].argmax(dim=-1), label)
        self.log(name, metric, prog_bar=True, batch_size=int(known.sum()))

    def validation_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, self.val_acc, "val/acc")

    def test_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_acc, "test/acc")

    def predict_step(self, batch: GraphBatch, batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch.index, "prediction": self(batch).argmax(dim=-1)}
