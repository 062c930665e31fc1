"""Regression on graph- and node-level targets: :class:`GraphRegression`."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import nn
from torchmetrics import MeanAbsoluteError

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.spec import DataSpec, default_target_names
from graphormer_urpe.errors import DataError, check_choice
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.tasks.base import STAGES, PerTargetTask, data_targets
from graphormer_urpe.tasks.compiled import CompileMode
from graphormer_urpe.tasks.metrics import PerTargetMetrics
from graphormer_urpe.tasks.optimiser import DEFAULT_OPTIM, OptimConfig


class GraphRegression(PerTargetTask):
    """Regression with an L1 (or MSE) loss, per graph or per node (``readout: nodes``); missing values (NaN) are left
    out of the loss and of the MAE of each target (``val/mae/<target>``), whose mean ``val/mae`` selects the best.

    Example:
        >>> from graphormer_urpe import GraphormerConfig
        >>> task = GraphRegression(GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4))
        >>> task.monitor, task.target_names  # trained by pl.Trainer(...).fit(task, GraphDataModule(...))
        (('val/mae', 'min'), ['y'])

    Args:
        encoder: the Graphormer hyper-parameters (vocabularies, outputs and readout set by ``data``).
        optim: the optimiser and learning-rate schedule.
        normalize_targets: train on targets standardised with the training split's mean and std (off for ZINC).
        loss: ``l1`` (MAE, the papers') or ``mse``; the mean over every known target value.
        target_kind: the data's kind of target (set by ``data``); must be ``regression``.
        target_names: name of every target (set by ``data``), for metric names and predictions.
        data: the data's declaration (linked by the CLI), which decides the fields marked "set by ``data``".
        compile: the training step eager (false), compiled (true) or compiled into CUDA graphs (``cuda_graphs``).
    """

    #: Metric that selects the best checkpoint, and whether lower is better.
    monitor = ("val/mae", "min")

    def __init__(
        self,
        encoder: GraphormerConfig,
        optim: OptimConfig = DEFAULT_OPTIM,
        normalize_targets: bool = False,
        loss: Literal["l1", "mse"] = "l1",
        target_kind: str = "regression",
        target_names: list[str] | None = None,
        data: DataSpec | None = None,
        compile: CompileMode = False,
    ) -> None:
        if data is not None:
            self.check_data(data)
            target_kind, target_names = data_targets(data, target_kind, target_names, default_kind="regression")
        check_choice("model.normalize_targets", normalize_targets, (True, False))
        check_choice("model.loss", loss, ("l1", "mse"))
        if target_kind != "regression":
            raise DataError(
                f"the data's targets are {target_kind} class labels (data.source.task: {target_kind}): "
                "train them with model.class_path: graphormer_urpe.tasks.Classification"
            )
        super().__init__(encoder, optim, data, compile)
        encoder = self.model.config
        self.target_names = list(target_names or default_target_names(encoder.num_outputs))
        self.save_decided(target_kind=target_kind, target_names=self.target_names)
        self.register_buffer("target_mean", torch.zeros(encoder.num_outputs))
        self.register_buffer("target_std", torch.ones(encoder.num_outputs))
        self.metrics = nn.ModuleDict({stage: self.new_metrics() for stage in STAGES})

    def new_metrics(self) -> nn.ModuleList:
        """The MAE of every target (``mae/<target>``) and their mean (``mae``)."""
        return nn.ModuleList([PerTargetMetrics(MeanAbsoluteError, "mae", self.target_names)])

    def score_names(self) -> list[str]:
        """One value per target."""
        return list(self.target_names)

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Predictions in the data's units. (B, Y), or (B, N, Y) with ``readout: nodes``"""
        return self.model(batch) * self.target_std + self.target_mean

    def on_fit_start(self) -> None:
        """With ``normalize_targets``, take the training split's statistics, unless the head came with its own."""
        super().on_fit_start()
        if self.hparams.normalize_targets and self.trainer.datamodule is not None and not self.head_from_checkpoint:
            mean, std = self.trainer.datamodule.target_statistics()
            self.target_mean.copy_(torch.as_tensor(mean))
            self.target_std.copy_(torch.as_tensor(std))

    def step_losses(self, batch: GraphBatch) -> dict[str, torch.Tensor]:
        """The L1 (or squared) error of the standardised targets, averaged over the known ones (NaN if none)."""
        output, target = self.padded_outputs_and_targets(self.model(batch), batch)  # (R, Y) each
        normalized = (target - self.target_mean) / self.target_std
        known = ~torch.isnan(normalized)
        error = torch.where(known, output.float() - normalized, 0.0)
        per_value = error.abs() if self.hparams.loss == "l1" else error.square()
        return {"loss": per_value.sum() / known.sum()}

    def prediction_columns(self, prediction: np.ndarray) -> dict[str, np.ndarray]:
        """One column per target, in the data's units. prediction: (R, Y)"""
        return {name: prediction[:, k] for k, name in enumerate(self.score_names())}
