"""What every task shares: the model, checkpoint loading, AdamW with warm-up and linear decay.

:class:`GraphormerTask` is the LightningModule base of every task (:mod:`graphormer_urpe.tasks.graph`
for regression, :mod:`graphormer_urpe.tasks.classification` for graph, node and token labels,
:mod:`graphormer_urpe.tasks.tokens` for token sequences); :class:`OptimConfig` is the optimiser
and schedule they all take.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.errors import check_int, check_number
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.tasks.compat import checkpoint_init_args

#: Evaluation stages, each with its own metric state.
STAGES = ("val", "test")


def warmup_linear_decay(step: int, warmup_steps: int, total_steps: int, end_factor: float = 0.0) -> float:
    """LR multiplier: linear from 0 to 1 over ``warmup_steps``, then linear to ``end_factor`` at
    ``total_steps`` (the papers' schedule; the official ``PolynomialDecayLR`` with power 1)."""
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - (1.0 - end_factor) * progress


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW (betas 0.9, 0.999) with linear warm-up, then linear decay to ``end_lr`` at the last step.

    The defaults are the Graphormer papers'; every config states the values it trains with
    (``model.init_args.optim.lr`` ..., ``--model.optim.lr 1e-3`` on the command line). Every field
    is checked at construction (:class:`~graphormer_urpe.errors.ConfigError` names ``model.optim.<field>``).

    Args:
        lr: peak learning rate (> 0).
        warmup_steps: linear warm-up length in optimiser steps (>= 0).
        end_lr: learning rate reached at the last step (>= 0; the papers decay to 0).
        weight_decay: decoupled (AdamW) weight decay on every parameter, as the official code (>= 0).
        adam_eps: Adam epsilon (> 0).
    """

    lr: float = 2e-4
    warmup_steps: int = 60_000
    end_lr: float = 0.0
    weight_decay: float = 0.0
    adam_eps: float = 1e-8

    def __post_init__(self) -> None:
        """Check every field; raise :class:`~graphormer_urpe.errors.ConfigError` naming the first that cannot work."""
        check_number("model.optim.lr", self.lr, 0.0, include_minimum=False)
        check_int("model.optim.warmup_steps", self.warmup_steps, 0)
        check_number("model.optim.end_lr", self.end_lr, 0.0)
        check_number("model.optim.weight_decay", self.weight_decay, 0.0)
        check_number("model.optim.adam_eps", self.adam_eps, 0.0, include_minimum=False)


#: The papers' settings, the default of every task (frozen, so one instance serves all).
DEFAULT_OPTIM = OptimConfig()


class GraphormerTask(pl.LightningModule):
    """A Graphormer with the papers' optimiser and schedule; subclasses add loss and metrics.

    The constructor saves every constructor argument of the subclass as hyper-parameters (the two
    dataclasses as plain dicts, safe to ``torch.load(weights_only=True)``), so a checkpoint rebuilds
    its task alone (:meth:`from_checkpoint`). A subclass may swap the network and its config
    dataclass (the synthetic sequence tasks use the sequence Transformer).

    Args:
        encoder: the network's hyper-parameters.
        optim: the optimiser and learning-rate schedule.
    """

    #: The network, built from ``encoder``, and the config dataclass that ``from_checkpoint`` rebuilds.
    model_class: type[nn.Module] = Graphormer
    config_class: type = GraphormerConfig

    def __init__(self, encoder: GraphormerConfig, optim: OptimConfig = DEFAULT_OPTIM) -> None:
        super().__init__()
        # collects the arguments of every ``__init__`` up the subclass chain; keeps those of the class itself
        # and LightningCLI's private entries (``_class_path``, ``_instantiator``)
        self.save_hyperparameters(ignore=["encoder", "optim"])
        accepted = inspect.signature(type(self).__init__).parameters
        for name in [name for name in self.hparams if not name.startswith("_") and name not in accepted]:
            del self.hparams[name]
        self.hparams["encoder"] = dataclasses.asdict(encoder)
        self.hparams["optim"] = dataclasses.asdict(optim)
        self.optim = optim
        self.model = self.model_class(encoder)

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str | torch.device = "cpu") -> GraphormerTask:
        """Rebuild the task from a checkpoint alone (config and vocabularies travel with it).

        Checkpoints written before the task family was merged (optimiser arguments at the top level,
        ``NodeTagging`` ...) are read through :func:`~graphormer_urpe.tasks.compat.checkpoint_init_args`.
        """
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
        hparams = checkpoint_init_args(checkpoint, cls)
        task = cls(encoder=cls.config_class(**hparams.pop("encoder")), optim=OptimConfig(**hparams.pop("optim")),
                   **hparams)
        task.load_state_dict(checkpoint["state_dict"])
        return task

    def configure_optimizers(self) -> dict[str, Any]:
        optim = self.optim
        optimizer = torch.optim.AdamW(
            self.parameters(), lr=optim.lr, betas=(0.9, 0.999), eps=optim.adam_eps, weight_decay=optim.weight_decay,
        )
        total = int(self.trainer.estimated_stepping_batches)
        end_factor = optim.end_lr / optim.lr
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_linear_decay(step, optim.warmup_steps, total, end_factor)
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
        if batch.y.dim() == 3:
            raise ValueError("the data has one target per node but the model reads one prediction per graph: "
                             "set model.encoder.readout=nodes (linked from the data when trained with train.py)")
        return output, batch.y
