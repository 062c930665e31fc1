"""Graphormer inputs and readouts added for node-level tasks; graph-level behaviour unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import make_record

from graphormer_urpe.constants import NO_TARGET_NODE
from graphormer_urpe.data.batch import GraphBatch, collate_graphs
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig

SMALL = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)


def _node_batch(rng: np.random.Generator, sizes=(5, 3, 7), width: int = 6) -> GraphBatch:
    """Graph batch plus continuous features and a target node per graph."""
    batch = collate_graphs([make_record(rng, n, index=i, node_vocab=(3,), edge_vocab=(6,))
                            for i, n in enumerate(sizes)])
    features = torch.randn(len(sizes), batch.x.shape[1], width) * batch.node_mask.unsqueeze(-1)
    target = torch.tensor([int(rng.integers(0, n)) for n in sizes])
    return dataclasses.replace(batch, x_continuous=features.half(), target_node=target)


def _node_model(attention: str, width: int = 6) -> Graphormer:
    torch.manual_seed(0)
    config = GraphormerConfig(node_vocab=[3], edge_vocab=[6], num_outputs=4, continuous_node_dim=width,
                              readout="target_node", attention=attention, **SMALL)
    return Graphormer(config).eval()


def test_graph_level_batches_and_models_are_unchanged(rng: np.random.Generator) -> None:
    batch = collate_graphs([make_record(rng, n) for n in (4, 6)])
    assert batch.x_continuous.shape == (2, 6, 0) and batch.target_node.tolist() == [NO_TARGET_NODE] * 2
    model = Graphormer(GraphormerConfig(**SMALL)).eval()
    assert model.nodes.continuous is None
    assert not any("continuous" in name for name in model.state_dict())
    torch.testing.assert_close(model(batch), model.head(model.encode(batch)[:, 0]))


@pytest.mark.parametrize("attention", ["rpe", "urpe"])
def test_target_readout_reads_the_target_token(rng: np.random.Generator, attention: str) -> None:
    batch, model = _node_batch(rng), _node_model(attention)
    states = model.encode(batch)
    expected = model.head(states[torch.arange(3), batch.target_node + 1])
    torch.testing.assert_close(model(batch), expected)


def _permute(batch: GraphBatch, b: int, order: torch.Tensor) -> GraphBatch:
    """Renumber the nodes of graph b: new node k is old node order[k]."""
    fields = {f.name: getattr(batch, f.name).clone() for f in dataclasses.fields(batch)}
    n = len(order)
    for name in ("x", "x_continuous", "in_degree", "out_degree"):
        fields[name][b, :n] = getattr(batch, name)[b, order]
    for name in ("spd", "first_edge"):
        fields[name][b, :n, :n] = getattr(batch, name)[b][order][:, order]
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(n)
    graph_edges = (batch.first_edge[b][batch.first_edge[b] >= 0]).unique()
    fields["edge_dst"][graph_edges] = inverse[batch.edge_dst[graph_edges]]
    fields["target_node"][b] = inverse[batch.target_node[b]]
    return GraphBatch(**fields)


@pytest.mark.parametrize("attention", ["rpe", "urpe"])
def test_target_prediction_is_invariant_to_node_order(rng: np.random.Generator, attention: str) -> None:
    batch, model = _node_batch(rng), _node_model(attention)
    order = torch.as_tensor(rng.permutation(7))
    torch.testing.assert_close(model(_permute(batch, 2, order)), model(batch), atol=1e-5, rtol=1e-5)


def test_continuous_features_matter_but_not_on_padding(rng: np.random.Generator) -> None:
    batch, model = _node_batch(rng), _node_model("urpe")
    padding = ~batch.node_mask
    noisy = batch.x_continuous.clone()
    noisy[padding] = 7.0
    torch.testing.assert_close(model(dataclasses.replace(batch, x_continuous=noisy)), model(batch))
    changed = batch.x_continuous.clone()
    changed[1, 0] += 1.0
    assert not torch.allclose(model(dataclasses.replace(batch, x_continuous=changed))[1], model(batch)[1])


def test_unknown_readout_is_refused() -> None:
    with pytest.raises(ValueError, match="readout='node'"):
        Graphormer(GraphormerConfig(readout="node", **SMALL))
