"""LightningModules for per-token classification: the synthetic sequence tasks and per-node graph labels.

Both share one system (:class:`TokenClassification`): cross-entropy over every labelled token, token
accuracy (the paper's metric for the synthetic tasks), and the AdamW schedule of every
:class:`~graphormer_urpe.tasks.GraphormerTask`. They differ only in the network and in how a batch
becomes ``(logits, labels)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from graphormer_urpe.constants import IGNORE_LABEL
from graphormer_urpe.data.synthetic.graphs import NodeLabelBatch
from graphormer_urpe.data.synthetic.sequences import SequenceBatch
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.model.sequence import SequenceConfig, SequenceTransformer
from graphormer_urpe.tasks.base import GraphormerTask


class TokenClassification(GraphormerTask):
    """Cross-entropy and token accuracy over every token whose label is not :data:`IGNORE_LABEL`.

    Subclasses implement :meth:`logits_and_labels` and save their hyper-parameters.

    Args:
        encoder: the network's config.
    """

    #: Metric that selects the best checkpoint, and whether lower is better.
    monitor = ("val/accuracy", "max")

    def __init__(self, encoder: GraphormerConfig | SequenceConfig) -> None:
        super().__init__(encoder)
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

    model_class = SequenceTransformer
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
        super().__init__(encoder)
        self.save_hyperparameters(ignore=["encoder"])
        self.save_encoder_config(encoder)

    def logits_and_labels(self, batch: SequenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(batch.tokens).flatten(0, 1), batch.labels.flatten()  # (B*T, K), (B*T,)


class NodeTagging(TokenClassification):
    """One class for every node of every graph (the synthetic regular-graph task).

    Args:
        encoder: a :class:`GraphormerConfig` with ``readout: nodes`` (``attention: rpe | urpe`` selects the
            method, ``graph_token`` whether the virtual node is there; vocabularies, classes and the readout
            are linked from the data).
        lr: peak learning rate.
        warmup_steps: linear warm-up length in optimiser steps.
        end_lr: learning rate at the last step.
        weight_decay: decoupled (AdamW) weight decay.
        adam_eps: Adam epsilon.
    """

    def __init__(
        self,
        encoder: GraphormerConfig,
        lr: float = 1e-3,
        warmup_steps: int = 100,
        end_lr: float = 0.0,
        weight_decay: float = 0.0,
        adam_eps: float = 1e-8,
    ) -> None:
        if encoder.readout != "nodes":
            raise ValueError(f"NodeTagging needs model.encoder.readout=nodes, got {encoder.readout!r}")
        super().__init__(encoder)
        self.save_hyperparameters(ignore=["encoder"])
        self.save_encoder_config(encoder)

    def logits_and_labels(self, batch: NodeLabelBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(batch.graphs).flatten(0, 1), batch.labels.flatten()  # (B*N, K), (B*N,)
