"""LightningModules: loss, metrics, optimiser and learning-rate schedule around the plain model."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torchmetrics import MeanAbsoluteError

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig


def warmup_linear_decay(step: int, warmup_steps: int, total_steps: int, end_factor: float = 0.0) -> float:
    """LR multiplier: linear from 0 to 1 over ``warmup_steps``, then linear to ``end_factor`` at
    ``total_steps`` (the papers' schedule; the official ``PolynomialDecayLR`` with power 1)."""
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - (1.0 - end_factor) * progress


class FromCheckpoint:
    """Mixin: rebuild a task from a checkpoint alone (its encoder config and sizes travel with it).

    The task stores its encoder config as the primitive dict ``hparams["encoder"]`` and names the
    config dataclass in ``config_class``.
    """

    config_class: type

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str | torch.device = "cpu") -> Any:
        """The task with the checkpoint's hyper-parameters and weights."""
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
        # LightningCLI adds private entries such as ``_class_path``
        hparams = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
        task = cls(encoder=cls.config_class(**hparams.pop("encoder")), **hparams)
        task.load_state_dict(checkpoint["state_dict"])
        return task


class GraphRegression(FromCheckpoint, pl.LightningModule):
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
    config_class = GraphormerConfig

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
        super().__init__()
        self.save_hyperparameters(ignore=["encoder"])
        self.hparams["encoder"] = dataclasses.asdict(encoder)  # primitives only: safe to torch.load
        self.model = Graphormer(encoder)
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

    def configure_optimizers(self) -> dict[str, Any]:
        return adamw_warmup_linear_decay(self)


def adamw_warmup_linear_decay(task: pl.LightningModule) -> dict[str, Any]:
    """AdamW over every parameter with :func:`warmup_linear_decay` by step, from the task's hyper-parameters
    ``lr``, ``warmup_steps``, ``end_lr``, ``weight_decay`` and ``adam_eps`` (``configure_optimizers``'s return)."""
    hparams = task.hparams
    optimizer = torch.optim.AdamW(
        task.parameters(), lr=hparams.lr, betas=(0.9, 0.999), eps=hparams.adam_eps, weight_decay=hparams.weight_decay,
    )
    total = int(task.trainer.estimated_stepping_batches)
    end_factor = hparams.end_lr / hparams.lr
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_linear_decay(step, hparams.warmup_steps, total, end_factor)
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
