"""LightningModules for per-token classification: the synthetic sequence tasks and per-node graph labels.

Both share one system (:class:`TokenClassification`): cross-entropy over every labelled token, token
accuracy (the paper's metric for the synthetic tasks), AdamW with linear warm-up and linear decay.
They differ only in the network and in how a batch becomes ``(logits, labels)``.
"""

from __future__ import annotations

import dataclasses

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from graphormer_urpe.constants import IGNORE_LABEL
from graphormer_urpe.data.synthetic_graphs import NodeLabelBatch
from graphormer_urpe.data.synthetic_sequences import SequenceBatch
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.model.sequence import SequenceConfig, SequenceTransformer
from graphormer_urpe.tasks import FromCheckpoint, adamw_warmup_linear_decay


class TokenClassification(FromCheckpoint, pl.LightningModule):
    """Cross-entropy and token accuracy over every token whose label is not :data:`IGNORE_LABEL`.

    Subclasses pass their network and implement :meth:`logits_and_labels`; their ``__init__`` saves the
    hyper-parameters (``lr``, ``warmup_steps``, ``end_lr``, ``weight_decay``, ``adam_eps``, ``encoder``).

    Args:
        model: the network, kept as ``self.model``.
    """

    #: Metric that selects the best checkpoint, and whether lower is better.
    monitor = ("val/accuracy", "max")

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.val_accuracy = MeanMetric()
        self.test_accuracy = MeanMetric()

    def logits_and_labels(self, batch: object) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and labels of every token of the batch, flattened.

        Shapes:
            returns logits (M, K) and labels (M,) int64 (:data:`IGNORE_LABEL` where there is none).
        """
        raise NotImplementedError

    def training_step(self, batch: object, batch_idx: int) -> torch.Tensor:
        logits, labels = self.logits_and_labels(batch)
        loss = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_LABEL)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(labels))
        return loss

    def _evaluate(self, batch: object, accuracy: MeanMetric, stage: str) -> None:
        logits, labels = self.logits_and_labels(batch)
        known = labels != IGNORE_LABEL
        correct = (logits[known].argmax(dim=-1) == labels[known]).float()  # (M',)
        accuracy.update(correct)  # a mean over tokens, not over batches
        self.log(f"{stage}/loss", F.cross_entropy(logits[known].float(), labels[known]), batch_size=int(known.sum()))
        self.log(f"{stage}/accuracy", accuracy, prog_bar=True)

    def validation_step(self, batch: object, batch_idx: int) -> None:
        self._evaluate(batch, self.val_accuracy, "val")

    def test_step(self, batch: object, batch_idx: int) -> None:
        self._evaluate(batch, self.test_accuracy, "test")

    def configure_optimizers(self) -> dict:
        return adamw_warmup_linear_decay(self)


class SequenceTagging(TokenClassification):
    """One class per token of a sequence: Position Identification, Even Token Prediction.

    Args:
        encoder: the :class:`SequenceConfig` (``attention: none | rpe | urpe`` selects the method; vocabulary,
            classes and length are linked from the data).
        lr: peak learning rate.
        warmup_steps: linear warm-up length in optimiser steps.
        end_lr: learning rate at the last step.
        weight_decay: decoupled (AdamW) weight decay.
        adam_eps: Adam epsilon.
    """

    config_class = SequenceConfig

    def __init__(
        self,
        encoder: SequenceConfig,
        lr: float = 7e-5,
        warmup_steps: int = 6000,
        end_lr: float = 0.0,
        weight_decay: float = 0.0,
        adam_eps: float = 1e-8,
    ) -> None:
        super().__init__(SequenceTransformer(encoder))
        self.save_hyperparameters(ignore=["encoder"])
        self.hparams["encoder"] = dataclasses.asdict(encoder)  # primitives only: safe to torch.load

    def logits_and_labels(self, batch: SequenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(batch.tokens).flatten(0, 1), batch.labels.flatten()  # (B*T, K), (B*T,)


class NodeClassification(TokenClassification):
    """One class per node of every graph (the synthetic regular-graph task).

    Args:
        encoder: a :class:`GraphormerConfig` with ``readout: node`` (``attention: rpe | urpe`` selects the method,
            ``graph_token`` whether the virtual node is there; vocabularies and classes are linked from the data).
        lr: peak learning rate.
        warmup_steps: linear warm-up length in optimiser steps.
        end_lr: learning rate at the last step.
        weight_decay: decoupled (AdamW) weight decay.
        adam_eps: Adam epsilon.
    """

    config_class = GraphormerConfig

    def __init__(
        self,
        encoder: GraphormerConfig,
        lr: float = 1e-3,
        warmup_steps: int = 100,
        end_lr: float = 0.0,
        weight_decay: float = 0.0,
        adam_eps: float = 1e-8,
    ) -> None:
        if encoder.readout != "node":
            raise ValueError(f"NodeClassification needs model.encoder.readout=node, got {encoder.readout!r}")
        super().__init__(Graphormer(encoder))
        self.save_hyperparameters(ignore=["encoder"])
        self.hparams["encoder"] = dataclasses.asdict(encoder)

    def logits_and_labels(self, batch: NodeLabelBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(batch.graphs).flatten(0, 1), batch.labels.flatten()  # (B*N, K), (B*N,)
