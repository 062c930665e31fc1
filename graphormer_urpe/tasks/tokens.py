"""Per-token classification on sequences: the synthetic Position Identification and Even Token Prediction.

:class:`SequenceTagging` is :class:`~graphormer_urpe.tasks.classification.Classification` with one
multi-class label per token: the same loss, token accuracy over the whole split (the paper's
metric, ``val/accuracy``) and optimiser; only the network (the sequence Transformer) and the batch
differ.
"""

from __future__ import annotations

import torch

from graphormer_urpe.data.spec import SequenceSpec
from graphormer_urpe.data.synthetic.sequences import SequenceBatch
from graphormer_urpe.model.sequence import SequenceConfig, SequenceTransformer
from graphormer_urpe.tasks.base import DEFAULT_OPTIM, OptimConfig
from graphormer_urpe.tasks.classification import Classification


class SequenceTagging(Classification):
    """One class per token of a sequence: Position Identification, Even Token Prediction.

    Args:
        encoder: the :class:`SequenceConfig` (``attention: none | rpe | urpe`` selects the method; vocabulary,
            classes and length are set by ``data``).
        optim: the optimiser and learning-rate schedule.
        data: the task's :class:`~graphormer_urpe.data.spec.SequenceSpec` (linked by the CLI).
    """

    model_class = SequenceTransformer
    config_class = SequenceConfig
    data_class = SequenceSpec

    def __init__(self, encoder: SequenceConfig, optim: OptimConfig = DEFAULT_OPTIM,
                 data: SequenceSpec | None = None) -> None:
        super().__init__(encoder, optim, target_kind="multiclass", data=data)

    @staticmethod
    def output_width(encoder: SequenceConfig) -> int:
        return encoder.num_classes

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        """Logits of every token. (B, T, K)"""
        return self.model(batch.tokens)

    @staticmethod
    def outputs_and_targets(output: torch.Tensor, batch: SequenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Every token is a row; its label as a float target column (every token has one).

        Shapes:
            output: (B, T, K); returns (B*T, K) logits and (B*T, 1) labels.
        """
        return output.flatten(0, 1), batch.labels.reshape(-1, 1).float()
