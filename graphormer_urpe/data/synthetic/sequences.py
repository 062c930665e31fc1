"""The paper's synthetic sequence-to-sequence tasks (section 5.1), generated on the fly from a seed.

Given random tokens ``w_1 .. w_n`` (uniform over a vocabulary of V values):

* **Position Identification** (``position``): ``f(w) = (1, 2, ..., n)``; the label of position i is
  its index (class ``i - 1``), whatever the tokens.
* **Even Token Prediction** (``even_token``): ``f(w) = (w_2, w_4, ..., w_n, EOS, ..., EOS)``; the
  first n/2 positions copy the even-indexed tokens, the rest predict EOS (class V).

Both depend on absolute positions, which a Transformer with relative encodings only must infer. By
the paper's Theorem 2 an RPE Transformer cannot represent such functions in general (on a sequence of
identical tokens it cannot tell any two positions apart); URPE can. Training batches are drawn fresh
at every step from a seeded stream; validation and test sets are fixed sets from their own seeds.

Shape letters: B sequences, T tokens (T = n).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from graphormer_urpe.data.loaders import eval_loader, per_device_batch_size, process_grid
from graphormer_urpe.errors import ConfigError, check_choice, check_int

SequenceTask = Literal["position", "even_token"]
#: Seed-stream ids that keep the training stream, validation set and test set apart.
_STREAM_IDS = {"train": 0, "valid": 1, "test": 2}


@dataclass
class SequenceBatch:
    """Input tokens and per-token class labels.

    Shapes:
        tokens: (B, T) int64 in ``[0, V)``; labels: (B, T) int64 in ``[0, num_classes)``.
    """

    tokens: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SequenceBatch:
        """A copy with every tensor on ``device``."""
        return SequenceBatch(**{
            f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in dataclasses.fields(self)
        })

    @property
    def num_sequences(self) -> int:
        """B."""
        return self.tokens.shape[0]


def sequence_labels(task: SequenceTask, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Targets of ``task`` for a batch of token sequences.

    Args:
        task: ``position`` or ``even_token``.
        tokens: (B, n) int64 in ``[0, vocab_size)``; n must be even for ``even_token``.
        vocab_size: V; EOS is class V.

    Returns:
        (B, n) int64 labels.
    """
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
    """An endless stream of fresh random batches; each (rank, worker) draws from its own seeded stream.

    Args:
        task: ``position`` or ``even_token``.
        length: n.
        vocab_size: V.
        batch_size: sequences per yielded batch.
        seed: base seed.
        rank: process rank under DDP (0 otherwise).
    """

    def __init__(self, task: SequenceTask, length: int, vocab_size: int, batch_size: int, seed: int,
                 rank: int = 0) -> None:
        self.task, self.length, self.vocab_size = task, length, vocab_size
        self.batch_size, self.seed, self.rank = batch_size, seed, rank

    def __iter__(self) -> Iterator[SequenceBatch]:
        worker = get_worker_info()
        generator = _generator(self.seed, _STREAM_IDS["train"], self.rank, worker.id if worker else 0)
        while True:
            yield random_sequences(self.task, self.batch_size, self.length, self.vocab_size, generator)


class FixedSequences(Dataset):
    """A fixed evaluation set; item i is sequence i as a ``(tokens (n,), labels (n,))`` pair.

    Args:
        data: all sequences of the set.
    """

    def __init__(self, data: SequenceBatch) -> None:
        self.data = data

    def __len__(self) -> int:
        return self.data.num_sequences

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data.tokens[i], self.data.labels[i]


def collate_sequences(items: list[tuple[torch.Tensor, torch.Tensor]]) -> SequenceBatch:
    """Stack equal-length sequences into a :class:`SequenceBatch`."""
    tokens, labels = zip(*items)
    return SequenceBatch(torch.stack(tokens), torch.stack(labels))


class SyntheticSequenceDataModule(pl.LightningDataModule):
    """Position Identification or Even Token Prediction on random sequences (paper: n = 128, V in 10/1k/10k).

    Args:
        task: ``position`` (Position Identification) or ``even_token`` (Even Token Prediction).
        length: n, tokens per sequence.
        vocab_size: V, input token values.
        batch_size: sequences per optimiser step over all devices (the global batch).
        val_size: sequences in the fixed validation set.
        test_size: sequences in the fixed test set.
        seed: seed of the training stream and of both fixed sets.

    Resuming a run (``--ckpt_path``) restarts the training stream from its seed: the sequences are
    fresh random draws either way, but not the exact continuation of the interrupted run.
    """

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
        for key, value in (("data.length", length), ("data.vocab_size", vocab_size), ("data.batch_size", batch_size),
                           ("data.val_size", val_size), ("data.test_size", test_size)):
            check_int(key, value, 1)
        if task == "even_token" and length % 2:
            raise ConfigError("data.length", length, "even_token needs an even length")
        self.task, self._length, self._vocab_size = task, length, vocab_size
        self.batch_size, self.val_size, self.test_size, self.seed = batch_size, val_size, test_size, seed
        self.datasets: dict[str, FixedSequences] = {}

    @property
    def vocab_size(self) -> int:
        """Input token values (linked to the model's embedding)."""
        return self._vocab_size

    @property
    def num_classes(self) -> int:
        """Output classes per token (linked to the model's head)."""
        return num_sequence_classes(self.task, self._length, self._vocab_size)

    @property
    def length(self) -> int:
        """n (linked to the model: it sizes the Toeplitz C)."""
        return self._length

    @property
    def split_sizes(self) -> dict[str, int]:
        """Sequences per fixed split (training draws fresh ones)."""
        return {"valid": self.val_size, "test": self.test_size}

    def setup(self, stage: str | None = None) -> None:
        """Draw the fixed validation and test sets."""
        if self.datasets:
            return
        for split, size in self.split_sizes.items():
            data = random_sequences(self.task, size, self._length, self._vocab_size,
                                    _generator(self.seed, _STREAM_IDS[split]))
            self.datasets[split] = FixedSequences(data)

    def describe(self) -> dict:
        """Task, sizes and seed."""
        return {"source": f"synthetic {self.task}", "length": self._length, "vocab_size": self._vocab_size,
                "classes": self.num_classes, "splits": {"train": "fresh random batches", "valid": self.val_size,
                                                        "test": self.test_size},
                "batch_size": self.batch_size, "seed": self.seed}

    def train_dataloader(self) -> DataLoader:
        """Fresh batches of this process's share of the global batch, from its own seeded stream."""
        world, rank = process_grid(self.trainer)
        stream = SequenceStream(self.task, self._length, self._vocab_size,
                                per_device_batch_size(self.batch_size, world), self.seed, rank)
        return DataLoader(stream, batch_size=None)

    def val_dataloader(self) -> DataLoader:
        """This process's exact shard of the validation set."""
        return eval_loader(self.datasets["valid"], self.batch_size, self.trainer, collate_sequences)

    def test_dataloader(self) -> DataLoader:
        """This process's exact shard of the test set."""
        return eval_loader(self.datasets["test"], self.batch_size, self.trainer, collate_sequences)
