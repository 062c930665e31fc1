"""Position Identification and Even Token Prediction data: labels, seeds, the datamodule."""

from __future__ import annotations

import pytest
import torch

from graphormer_urpe.data.spec import SequenceSpec
from graphormer_urpe.data.synthetic.sequences import (
    SequenceStream,
    SyntheticSequenceDataModule,
    num_sequence_classes,
    sequence_labels,
)


def test_position_identification_labels_are_the_positions():
    tokens = torch.tensor([[4, 4, 4, 4, 4, 4], [0, 9, 2, 2, 7, 1]])
    assert sequence_labels("position", tokens, 10).tolist() == [[0, 1, 2, 3, 4, 5]] * 2


def test_even_token_prediction_labels():
    # (w1..w6) = (3, 1, 4, 1, 5, 9) -> (w2, w4, w6, EOS, EOS, EOS) with EOS = V = 10
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9]])
    assert sequence_labels("even_token", tokens, 10).tolist() == [[1, 1, 9, 10, 10, 10]]


def test_labels_reject_bad_input():
    with pytest.raises(ValueError, match="even length"):
        sequence_labels("even_token", torch.zeros(1, 5, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="unknown sequence task"):
        sequence_labels("reverse", torch.zeros(1, 4, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="data.task"):
        SyntheticSequenceDataModule(task="reverse")
    with pytest.raises(ValueError, match="even length"):
        SyntheticSequenceDataModule(task="even_token", length=7)


def test_class_counts():
    assert num_sequence_classes("position", 128, 10) == 128
    assert num_sequence_classes("even_token", 128, 10) == 11


def test_stream_is_fresh_and_reproducible():
    first = iter(SequenceStream("even_token", 8, 10, batch_size=4, seed=3))
    again = iter(SequenceStream("even_token", 8, 10, batch_size=4, seed=3))
    a, b = next(first), next(first)
    assert torch.equal(a.tokens, next(again).tokens)
    assert not torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.labels, sequence_labels("even_token", a.tokens, 10))
    other_rank = next(iter(SequenceStream("even_token", 8, 10, batch_size=4, seed=3, rank=1)))
    assert not torch.equal(a.tokens, other_rank.tokens)


def test_datamodule_sizes_splits_and_loaders():
    data = SyntheticSequenceDataModule(
        task="even_token", length=8, vocab_size=5, batch_size=4, val_size=10, test_size=6, seed=0
    )
    assert data.spec == SequenceSpec(vocab_size=5, num_classes=6, length=8)
    data.setup("fit")
    valid = list(data.val_dataloader())
    assert [len(b.tokens) for b in valid] == [4, 4, 2]
    assert sum(len(b.tokens) for b in data.test_dataloader()) == 6
    train = next(iter(data.train_dataloader()))
    assert train.tokens.shape == (4, 8) and train.tokens.max() < 5
    # the fixed sets are a function of the seed, and the two differ from each other
    again = SyntheticSequenceDataModule(
        task="even_token", length=8, vocab_size=5, batch_size=4, val_size=10, test_size=6, seed=0
    )
    again.setup("fit")
    assert torch.equal(next(iter(again.val_dataloader())).tokens, valid[0].tokens)
    assert not torch.equal(next(iter(data.test_dataloader())).tokens, valid[0].tokens)
    assert data.describe()["splits"]["valid"] == 10
