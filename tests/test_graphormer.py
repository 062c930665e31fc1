"""Graphormer without graph token and with node readout: Theorem 2 on graphs, URPE with C = 1 equals RPE."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
from conftest import make_record

from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.data.synthetic_graphs import regular_graph_record, regular_graphs
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig


def config(**overrides) -> GraphormerConfig:
    base = dict(node_vocab=[1], edge_vocab=[1], num_outputs=3, num_layers=3, hidden_dim=16, ffn_dim=16, num_heads=4,
                attention="rpe", graph_token=False, readout="node", dropout=0.0, attention_dropout=0.0)
    return GraphormerConfig(**{**base, **overrides})


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Large random weights everywhere, padding rows included; C random in [0.5, 1.5] (padding row 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_scale" in name:
                p[1:] = torch.rand(p[1:].shape, generator=generator) + 0.5
            else:
                p.copy_(torch.randn(p.shape, generator=generator))


def frucht_batch():
    """The Frucht graph: 3-regular with no symmetry at all; identical node features."""
    return collate_graphs([regular_graph_record(nx.frucht_graph(), index=0)])


def distance_profiles(spd: torch.Tensor) -> list[tuple[int, ...]]:
    """Per node, how many nodes lie at each distance 0, 1, 2, ..."""
    spd = spd.long()
    return [tuple(torch.bincount(row, minlength=int(spd.max()) + 1).tolist()) for row in spd]


def layer_states(model: Graphormer, batch) -> list[torch.Tensor]:
    """Token states after every layer (forward hooks)."""
    states: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: states.append(out)) for layer in model.layers]
    model(batch)
    for hook in hooks:
        hook.remove()
    return states


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("edge_encoding", ["multi_hop", "none"])
def test_rpe_without_graph_token_gives_every_node_the_same_state(seed, edge_encoding):
    """Theorem 2: on a regular graph with identical node features, RPE keeps all nodes identical at every layer."""
    records = [record for record, _ in regular_graphs(3, 3, 12, 16, 2, seed=seed)[0]]
    batch = collate_graphs([regular_graph_record(nx.frucht_graph(), 0), *records])
    model = Graphormer(config(edge_encoding=edge_encoding)).eval()
    randomize(model, seed)
    for states in [*layer_states(model, batch), model(batch)]:
        for b in range(batch.num_graphs):
            real = states[b][batch.node_mask[b]]  # (n, ...)
            torch.testing.assert_close(real, real[:1].expand_as(real), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_urpe_separates_nodes_with_different_distance_profiles(seed):
    batch = frucht_batch()
    model = Graphormer(config(attention="urpe")).eval()
    randomize(model, seed)
    out = model(batch)[0]  # (n, outputs)
    profiles = distance_profiles(batch.spd[0])
    assert len(set(profiles)) > 1
    for i in range(len(profiles)):
        for j in range(len(profiles)):
            if profiles[i] != profiles[j]:
                assert (out[i] - out[j]).abs().max() > 1e-4, (i, j, profiles[i], profiles[j])


def test_graph_token_already_lets_rpe_tell_nodes_apart():
    """Why the task drops the graph token: its share of each softmax row depends on the distance profile."""
    batch = frucht_batch()
    model = Graphormer(config(graph_token=True)).eval()
    randomize(model, 0)
    out = model(batch)[0]
    assert (out - out[:1]).abs().max() > 1e-3


@pytest.mark.parametrize("graph_token,readout", [(True, "graph"), (True, "node"), (False, "node")])
def test_urpe_with_unit_scale_equals_rpe(rng, graph_token, readout):
    batch = collate_graphs([make_record(rng, n, index=i) for i, n in enumerate((5, 9, 3))])
    overrides = dict(node_vocab=[28], edge_vocab=[4], graph_token=graph_token, readout=readout)
    rpe = Graphormer(config(**overrides)).eval()
    randomize(rpe, 0)
    urpe = Graphormer(config(attention="urpe", **overrides)).eval()
    missing, unexpected = urpe.load_state_dict(rpe.state_dict(), strict=False)
    assert missing == ["relative_scale.weight"] and unexpected == []
    real = slice(None) if readout == "graph" else batch.node_mask  # padding nodes' outputs are meaningless
    assert torch.equal(urpe(batch)[real], rpe(batch)[real])


def test_node_readout_shapes_and_padding_invariance(rng):
    small, large = make_record(rng, 4, index=0), make_record(rng, 11, index=1)
    model = Graphormer(config(node_vocab=[28], edge_vocab=[4], attention="urpe")).eval()
    randomize(model, 0)
    alone = model(collate_graphs([small]))
    together = model(collate_graphs([small, large]))
    assert alone.shape == (1, 4, 3) and together.shape == (2, 11, 3)
    torch.testing.assert_close(together[0, :4], alone[0], rtol=1e-5, atol=1e-5)


def test_node_readout_with_graph_token_reads_the_node_positions(rng):
    batch = collate_graphs([make_record(rng, 6)])
    model = Graphormer(config(node_vocab=[28], edge_vocab=[4], graph_token=True, readout="node")).eval()
    randomize(model, 0)
    assert torch.equal(model(batch), model.head(model.encode(batch)[:, 1:]))


def test_default_keeps_the_graph_token_and_graph_readout():
    default = GraphormerConfig()
    assert default.graph_token and default.readout == "graph"
    assert "graph_token.weight" in Graphormer(config(graph_token=True, readout="graph")).state_dict()
    assert "graph_token.weight" not in Graphormer(config()).state_dict()
    with pytest.raises(ValueError, match="graph_token"):
        GraphormerConfig(graph_token=False, readout="graph")


def test_frucht_graph_nodes_have_several_distance_profiles():
    """The fixture itself: regular (so degrees carry nothing), not vertex-transitive."""
    spd = frucht_batch().spd[0]
    assert len(set(distance_profiles(spd))) >= 3
    assert np.all(np.array([d for _, d in nx.frucht_graph().degree()]) == 3)
