"""The paper's synthetic sequence tasks (section 5.1), Position Identification and Even Token Prediction, generated
from a seed: training batches fresh at every step, fixed validation and test sets. See docs/synthetic.md.

Shape letters: B sequences, T tokens (T = n)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, get_worker_info

from graphormer_urpe.data.loaders import eval_loader, per_device_batch_size, process_grid
from graphormer_urpe.data.spec import SequenceSpec
from graphormer_urpe.errors import ConfigError, check_choice, check_int

SequenceTask = Literal["position", "even_token"]
#: Seed-stream ids that keep the training stream, validation set and test set apart.
_STREAM_IDS = {"train": 0, "valid": 1, "test": 2}


@dataclass
class SequenceBatch:
    """Input tokens and per-token class labels.

    Shapes: tokens (B, T) int64 in ``[0, V)``; labels (B, T) int64 in ``[0, num_classes)``."""

    tokens: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SequenceBatch:
        """A copy with every tensor on ``device``."""
        return SequenceBatch(
            self.tokens.to(device, non_blocking=non_blocking), self.labels.to(device, non_blocking=non_blocking)
        )


def sequence_labels(task: SequenceTask, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Targets of ``task``: position i's index (``position``), or ``(w_2, w_4, ..., w_n, EOS, ..., EOS)`` with
    EOS = class V (``even_token``, n even).

    Shapes: tokens (B, n) int64 in ``[0, vocab_size)`` -> (B, n) int64."""
    batch, length = tokens.shape
    if task == "position":
        return torch.arange(length, device=tokens.device).expand(batch, length).clone()
    if task == "even_token":
        if length % 2:
            raise ValueError(f"even_token needs an even length, got {length}")
        labels = torch.full_like(tokens, vocab_size)  # EOS
        labels[:, : length // 2] = tokens[:, 1::2]  # w_2, w_4, ... (1-based even positions)
        return labels
    raise ValueError(f"unknown sequence task {task!r}: expected 'position' or 'even_token'")


def num_sequence_classes(task: SequenceTask, length: int, vocab_size: int) -> int:
    """Output classes of ``task``: n positions, or V tokens plus EOS."""
    return length if task == "position" else vocab_size + 1


def _generator(seed: int, *stream: int) -> torch.Generator:
    """A torch generator seeded from ``seed`` and a stream path (split, rank, worker)."""
    state = np.random.SeedSequence([seed, *stream]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def random_sequences(
    task: SequenceTask, count: int, length: int, vocab_size: int, generator: torch.Generator
) -> SequenceBatch:
    """``count`` uniform random token sequences and their labels."""
    tokens = torch.randint(vocab_size, (count, length), generator=generator)
    return SequenceBatch(tokens, sequence_labels(task, tokens, vocab_size))


class SequenceStream(IterableDataset):
    """An endless stream of fresh random batches; each (``rank``, worker) draws from its own seeded stream."""

    def __init__(
        self, task: SequenceTask, length: int, vocab_size: int, batch_size: int, seed: int, rank: int = 0
    ) -> None:
        self.task = task
        self.length = length
        self.vocab_size = vocab_size
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank

    def __iter__(self) -> Iterator[SequenceBatch]:
        worker = get_worker_info()
        generator = _generator(self.seed, _STREAM_IDS["train"], self.rank, worker.id if worker else 0)
        while True:
            yield random_sequences(self.task, self.batch_size, self.length, self.vocab_size, generator)


def collate_sequences(items: list[tuple[torch.Tensor, torch.Tensor]]) -> SequenceBatch:
    """Stack equal-length ``(tokens, labels)`` pairs into a :class:`SequenceBatch`."""
    tokens, labels = zip(*items)
    return SequenceBatch(torch.stack(tokens), torch.stack(labels))


class SyntheticSequenceDataModule(pl.LightningDataModule):
    """Position Identification or Even Token Prediction on random sequences (paper: n = 128, V in 10/1k/10k).
    Resuming a run (``--ckpt_path``) restarts the training stream from its seed.

    Args:
        task: ``position`` (Position Identification) or ``even_token`` (Even Token Prediction).
        length: n, tokens per sequence.
        vocab_size: V, input token values.
        batch_size: sequences per optimiser step over all devices (the global batch).
        val_size: sequences in the fixed validation set.
        test_size: sequences in the fixed test set.
        seed: seed of the training stream and of both fixed sets.
    """

    #: Size-aware batching (``GraphDataModule.bucket_window``): none, training draws fresh sequences.
    bucket_window = 0

    def __init__(
        self,
        task: SequenceTask = "position",
        length: int = 128,
        vocab_size: int = 10,
        batch_size: int = 512,
        val_size: int = 2048,
        test_size: int = 2048,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_choice("data.task", task, ("position", "even_token"))
        for key, value in (
            ("data.length", length),
            ("data.vocab_size", vocab_size),
            ("data.batch_size", batch_size),
            ("data.val_size", val_size),
            ("data.test_size", test_size),
        ):
            check_int(key, value, 1)
        if task == "even_token" and length % 2:
            raise ConfigError("data.length", length, "even_token needs an even length")
        self.task = task
        self.length = length
        self.vocab_size = vocab_size
        self.batch_size = batch_size
        self.val_size = val_size
        self.test_size = test_size
        self.seed = seed
        self.datasets: dict[str, TensorDataset] = {}

    @property
    def spec(self) -> SequenceSpec:
        """Vocabulary, classes per token and length, linked into the model by the CLI."""
        return SequenceSpec(self.vocab_size, num_sequence_classes(self.task, self.length, self.vocab_size), self.length)

    @property
    def split_sizes(self) -> dict[str, int]:
        """Sequences per fixed split (training draws fresh ones)."""
        return {"valid": self.val_size, "test": self.test_size}

    def setup(self, stage: str | None = None) -> None:
        """Draw the fixed validation and test sets; item i is sequence i as a ``(tokens, labels)`` pair."""
        if self.datasets:
            return
        for split, size in self.split_sizes.items():
            data = random_sequences(
                self.task, size, self.length, self.vocab_size, _generator(self.seed, _STREAM_IDS[split])
            )
            self.datasets[split] = TensorDataset(data.tokens, data.labels)

    def describe(self) -> dict:
        """Task, sizes and seed."""
        return {
            "source": f"synthetic {self.task}",
            "length": self.length,
            "vocab_size": self.vocab_size,
            "classes": self.spec.num_classes,
            "splits": {"train": "fresh random batches", "valid": self.val_size, "test": self.test_size},
            "batch_size": self.batch_size,
            "seed": self.seed,
        }

    def identity(self) -> dict:
        """Which data these are, as checkpoints record it: the class and every option but the batch size."""
        return {
            "datamodule": f"{type(self).__module__}.{type(self).__qualname__}",
            "task": self.task,
            "length": self.length,
            "vocab_size": self.vocab_size,
            "val_size": self.val_size,
            "test_size": self.test_size,
            "seed": self.seed,
        }

    @property
    def eval_batch_size(self) -> int:
        """Sequences per evaluation step over all devices: the training batch's."""
        return self.batch_size

    def train_dataloader(self) -> DataLoader:
        """Fresh batches of this process's share of the global batch, from its own seeded stream."""
        world, rank = process_grid(self.trainer)
        stream = SequenceStream(
            self.task, self.length, self.vocab_size, per_device_batch_size(self.batch_size, world), self.seed, rank
        )
        return DataLoader(stream, batch_size=None)

    def val_dataloader(self) -> DataLoader:
        """This process's exact shard of the validation set."""
        return eval_loader(self.datasets["valid"], self.batch_size, self.trainer, collate_sequences)

    def test_dataloader(self) -> DataLoader:
        """This process's exact shard of the test set."""
        return eval_loader(self.datasets["test"], self.batch_size, self.trainer, collate_sequences)
