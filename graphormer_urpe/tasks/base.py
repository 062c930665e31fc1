"""What every task shares: the model, checkpoint loading, AdamW with warm-up and linear decay.

:class:`GraphormerTask` is the LightningModule base of every task (:mod:`graphormer_urpe.tasks.graph`
for graph- and node-level targets, :mod:`graphormer_urpe.tasks.tokens` for per-token labels).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn

from graphormer_urpe.data.batch import GraphBatch
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
