"""Gathering predictions from several processes: one per graph, by graph index, whatever the sharding."""

from __future__ import annotations

import numpy as np
import torch

from graphormer_urpe.evaluation.splits import gather_predictions


def test_shards_in_any_order_with_padding_give_one_prediction_per_graph() -> None:
    """Like DistributedSampler over 2 processes: interleaved shards, the last graph repeated as padding."""
    graphs = torch.arange(11)
    prediction = torch.stack([graphs * 0.5, -graphs.float()], dim=1)  # (11, 2)
    shard0, shard1 = graphs[0::2], torch.cat([graphs[1::2], graphs[:1]])  # 6 + 6, graph 0 twice
    index = torch.cat([shard1.flip(0), shard0])  # processes finish in any order
    values = prediction[index]
    got_index, got_prediction, duplicates = gather_predictions(index, values)
    np.testing.assert_array_equal(got_index, np.arange(11))
    np.testing.assert_array_equal(got_prediction, prediction.numpy())
    assert duplicates == 1 and got_prediction.dtype == np.float32


def test_one_dimensional_and_empty_predictions() -> None:
    index, prediction, duplicates = gather_predictions(torch.tensor([3, 1]), torch.tensor([0.3, 0.1]))
    np.testing.assert_array_equal(index, [1, 3])
    np.testing.assert_array_equal(prediction, np.array([[0.1], [0.3]], dtype=np.float32))
    empty = gather_predictions(torch.zeros(0, dtype=torch.long), torch.zeros(0, 1))
    assert empty[0].shape == (0,) and empty[1].shape == (0, 1) and empty[2] == 0
