"""Per-token classification on sequences: the synthetic Position Identification and Even Token Prediction."""

from __future__ import annotations

import torch

from graphormer_urpe.data.spec import SequenceSpec
from graphormer_urpe.data.synthetic.sequences import SequenceBatch
from graphormer_urpe.model.sequence import SequenceConfig, SequenceTransformer
from graphormer_urpe.tasks.classification import Classification
from graphormer_urpe.tasks.compiled import CompileMode
from graphormer_urpe.tasks.optimiser import DEFAULT_OPTIM, OptimConfig


class SequenceTagging(Classification):
    """:class:`~graphormer_urpe.tasks.classification.Classification` with one class per token of a sequence.

    Args:
        encoder: the :class:`SequenceConfig` (vocabulary, classes and length are set by ``data``).
        optim: the optimiser and learning-rate schedule.
        data: the task's :class:`~graphormer_urpe.data.spec.SequenceSpec` (linked by the CLI).
        compile: the training step eager (false), compiled (true) or compiled into CUDA graphs (``cuda_graphs``).
    """

    model_class = SequenceTransformer
    config_class = SequenceConfig
    data_class = SequenceSpec
    output_field = "num_classes"

    def __init__(
        self,
        encoder: SequenceConfig,
        optim: OptimConfig = DEFAULT_OPTIM,
        data: SequenceSpec | None = None,
        compile: CompileMode = False,
    ) -> None:
        super().__init__(encoder, optim, target_kind="multiclass", data=data, compile=compile)

    def forward(self, batch: SequenceBatch) -> torch.Tensor:
        """Logits of every token. (B, T, K)"""
        return self.model(batch.tokens)

    @staticmethod
    def outputs_and_targets(output: torch.Tensor, batch: SequenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Every token is a row. Shapes: output: (B, T, K) -> (B*T, K) logits and (B*T, 1) float labels."""
        return output.flatten(0, 1), batch.labels.reshape(-1, 1).float()

    padded_outputs_and_targets = outputs_and_targets  # sequences have no padding

    @staticmethod
    def batch_size_of(batch: SequenceBatch) -> int:
        """The sequences of a batch."""
        return batch.tokens.shape[0]

    @staticmethod
    def batch_shape(batch: SequenceBatch) -> str:
        """A batch's shape in words, B sequences x T tokens."""
        sequences, tokens = batch.tokens.shape
        return f"{sequences} sequences x {tokens} tokens"
