"""Graphormer: RPE/URPE equivalence, invariances, masks, edge encoding, initialisation; node-level inputs
(continuous features, target-node readout) with graph-level behaviour unchanged; without graph token and
with a readout of every node, Theorem 2 on regular graphs."""

from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np
import pytest
import torch

from graphormer_urpe.constants import NO_TARGET_NODE
from graphormer_urpe.data.batch import GraphBatch, collate_graphs
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.data.synthetic.graphs import regular_graph_record, regular_graphs
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.model.graphormer import EdgePathBias, Graphormer, GraphormerConfig
from graphormer_urpe.testing.graphs import make_record, random_edges
from graphormer_urpe.testing.tolerance import rounding_tolerance


def model(attention: str = "urpe", seed: int = 0, device: torch.device | str = "cpu", **overrides) -> Graphormer:
    torch.manual_seed(seed)
    options = {"num_layers": 3, "hidden_dim": 32, "ffn_dim": 32, "num_heads": 4, **overrides}
    config = GraphormerConfig(attention=attention, **options)
    return Graphormer(config).eval().to(device)


def randomize_scale(net: Graphormer) -> None:
    with torch.no_grad():
        net.relative_scale.weight[1:] = torch.rand_like(net.relative_scale.weight[1:]) + 0.5


def permute_record(record, perm: np.ndarray):
    """The same graph with node i renamed to position inverse[i] (x_new = x[perm])."""
    inverse = np.argsort(perm)
    edge_index = inverse[record.edge_index]
    s = graph_structure(len(perm), edge_index)
    return record._replace(
        x=record.x[perm],
        edge_index=edge_index,
        spd=s.spd,
        first_edge=s.first_edge,
        in_degree=s.in_degree,
        out_degree=s.out_degree,
    )


@pytest.mark.device
def test_urpe_at_init_equals_rpe_exactly(rng: np.random.Generator, device: torch.device) -> None:
    batch = collate_graphs([make_record(rng, n, i) for i, n in enumerate([5, 17, 9, 1])]).to(device)
    rpe, urpe = model("rpe", device=device), model("urpe", device=device)
    missing = urpe.load_state_dict(rpe.state_dict(), strict=False)
    assert missing.missing_keys == ["relative_scale.weight"] and not missing.unexpected_keys
    assert torch.equal(rpe(batch), urpe(batch))
    real = torch.cat([torch.ones(4, 1, dtype=torch.bool, device=device), batch.node_mask], 1)
    assert torch.equal(rpe.encode(batch)[real], urpe.encode(batch)[real])


def test_learned_scale_changes_the_output(rng: np.random.Generator) -> None:
    batch = collate_graphs([make_record(rng, 12)])
    net = model("urpe")
    before = net(batch)
    randomize_scale(net)
    assert not torch.allclose(before, net(batch))


@pytest.mark.parametrize("attention", ["rpe", "urpe"])
@pytest.mark.parametrize(("edge_encoding", "chords"), [("multi_hop", 0), ("single_hop", 4), ("none", 4)])
def test_permutation_equivariance_and_invariance(
    rng: np.random.Generator, attention: str, edge_encoding: str, chords: int
) -> None:
    """Node outputs permute with the nodes; the graph output does not move.

    With several shortest paths between two nodes, ``multi_hop`` encodes one of them chosen by node
    order (as the official Floyd-Warshall does), so it is exactly equivariant on forests only.
    """
    net = model(attention, edge_encoding=edge_encoding)
    if attention == "urpe":
        randomize_scale(net)
    record = make_record(rng, 14, edges=random_edges(rng, 14, extra=chords, connected=False))
    perm = rng.permutation(14)
    original = net.encode(collate_graphs([record]))
    permuted = net.encode(collate_graphs([permute_record(record, perm)]))
    tolerance = rounding_tolerance(original, permuted)
    torch.testing.assert_close(permuted[0, 1:], original[0, 1:][perm], **tolerance)
    torch.testing.assert_close(permuted[0, 0], original[0, 0], **tolerance)


@pytest.mark.device
@pytest.mark.parametrize("attention", ["rpe", "urpe"])
def test_other_graphs_and_padding_do_not_change_a_graph(
    rng: np.random.Generator, attention: str, device: torch.device
) -> None:
    """Exact up to float32 rounding: other batch shapes may sum in another order (GPU kernels do)."""
    net = model(attention, device=device)
    if attention == "urpe":
        randomize_scale(net)
    target = make_record(rng, 7)
    alone = net(collate_graphs([target]).to(device))
    crowded = net(collate_graphs([make_record(rng, 30), target, make_record(rng, 1)]).to(device))
    torch.testing.assert_close(crowded[1], alone[0], **rounding_tolerance(crowded, alone))


@pytest.mark.device
def test_padded_rows_and_single_node_graphs_are_finite(rng: np.random.Generator, device: torch.device) -> None:
    net = model("urpe", device=device)
    net.train()
    batch = collate_graphs([make_record(rng, 1), make_record(rng, 40)]).to(device)
    out = net(batch)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


@pytest.mark.slow
def test_compiled_urpe_model_matches_eager_in_outputs_and_gradients(rng: np.random.Generator) -> None:
    """``torch.compile`` with dynamic shapes traces the relation lookup and ``scale_and_drop``
    (an autograd function) and computes what eager mode computes: outputs and every gradient. The
    ``aot_eager`` backend runs the traced forward and backward graphs without generating code, so the
    check takes seconds on CPU; inductor compiles those same graphs. Two layers: the shared C gets gradients
    from more than one layer, and tracing a third would only add time."""
    eager = model("urpe", num_layers=2).train()  # dropout 0.1, attention dropout 0.1: same masks from same seed
    randomize_scale(eager)
    compiled_net = model("urpe", num_layers=2).train()
    compiled_net.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_net, backend="aot_eager", dynamic=True)
    for sizes in ([5, 9, 2], [12, 3]):  # two padded sizes: one dynamic graph serves both
        batch = collate_graphs([make_record(rng, n) for n in sizes])
        for net in (eager, compiled_net):
            net.zero_grad()
        torch.manual_seed(len(sizes))
        expected = eager(batch)
        torch.manual_seed(len(sizes))
        got = compiled(batch)
        torch.testing.assert_close(got, expected, **rounding_tolerance(got, expected))  # traced: other orders
        expected.square().sum().backward()
        got.square().sum().backward()
        for (name, theirs), ours in zip(eager.named_parameters(), compiled_net.parameters()):
            if theirs.grad is not None:
                torch.testing.assert_close(
                    ours.grad, theirs.grad, **rounding_tolerance(ours.grad, theirs.grad), msg=name
                )
    assert eager.relative_scale.weight.grad.abs().sum() > 0


def test_unreachable_and_far_pairs_are_masked() -> None:
    chain = np.array([[i, i + 1] for i in range(24)]).T
    edges = np.concatenate([chain, chain[::-1]], axis=1)
    rng = np.random.default_rng(0)
    path = make_record(rng, 25, edges=edges)
    two_parts = make_record(rng, 6, edges=np.array([[0, 1, 3, 4], [1, 0, 4, 3]]))
    relation, key_mask = model().relations(collate_graphs([path, two_parts]))
    assert key_mask[0, 1, 1 + 19] and not key_mask[0, 1, 1 + 20]  # spd 19 kept, spd 20 masked
    assert not key_mask[1, 1 + 0, 1 + 3] and key_mask[1, 1 + 0, 1 + 1]  # other component masked
    assert key_mask[:, :, 0].all()  # everyone sees the graph token
    assert not key_mask[1, :, 1 + 6 :].any()  # nobody sees padding


def test_components_do_not_mix_within_one_layer(rng: np.random.Generator) -> None:
    """Without the graph token in between (1 layer), a component ignores the other component."""
    net = Graphormer(GraphormerConfig(num_layers=1, hidden_dim=16, ffn_dim=16, num_heads=2)).eval()
    edges = np.array([[0, 1, 3, 4], [1, 0, 4, 3]])
    record = make_record(rng, 6, edges=edges)
    changed = record._replace(x=np.where(np.arange(6)[:, None] >= 3, (record.x + 5) % 28, record.x))
    a = net.encode(collate_graphs([record]))[0, 1:4]
    b = net.encode(collate_graphs([changed]))[0, 1:4]
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def hand_batch(edge_attr: np.ndarray) -> GraphBatch:
    """Path 0 - 1 - 2 - 3 with the given features on its 3 bonds (both directions)."""
    half = np.array([[0, 1, 2], [1, 2, 3]])
    edges = np.concatenate([half, half[::-1]], axis=1)
    record = make_record(np.random.default_rng(0), 4, edges=edges, edge_vocab=(4, 3))
    return collate_graphs([record._replace(edge_attr=np.concatenate([edge_attr, edge_attr]))])


@pytest.mark.parametrize("max_hops", [5, 2])
def test_multi_hop_edge_encoding_of_one_path(max_hops: int) -> None:
    torch.manual_seed(0)
    bond = np.array([[1, 0], [2, 1], [3, 2]])  # two feature columns per bond
    encoder = EdgePathBias((4, 3), num_heads=2, max_hops=max_hops, hop_matrices=True)
    torch.nn.init.normal_(encoder.hop_weight)
    bias = encoder(hand_batch(bond))  # (1, 4, 4, 2)
    table = encoder.features.weight  # rows: 0 pad, 1..4 column 0, 5..7 column 1
    per_bond = [(table[1 + a] + table[5 + b]) / 2 for a, b in bond]  # mean over feature columns
    hops = min(3, max_hops)
    expected = sum(per_bond[n] @ encoder.hop_weight[n] for n in range(hops)) / hops
    torch.testing.assert_close(bias[0, 0, 3], expected, **rounding_tolerance(bias, expected))  # other sum order
    # reverse direction walks 3 -> 2 -> 1 -> 0: bonds in reverse order
    expected_reverse = sum(per_bond[2 - n] @ encoder.hop_weight[n] for n in range(hops)) / hops
    torch.testing.assert_close(bias[0, 3, 0], expected_reverse, **rounding_tolerance(bias, expected_reverse))
    assert (bias[0, torch.arange(4), torch.arange(4)] == 0).all()


def test_single_hop_uses_direct_edges_only() -> None:
    encoder = EdgePathBias((4, 3), num_heads=2, max_hops=1, hop_matrices=False)
    bias = encoder(hand_batch(np.array([[1, 0], [2, 1], [3, 2]])))
    table = encoder.features.weight
    torch.testing.assert_close(bias[0, 0, 1], (table[2] + table[5]) / 2)
    assert (bias[0, 0, 2] == 0).all() and (bias[0, 0, 3] == 0).all()


def test_zinc_configuration_fits_the_parameter_budget() -> None:
    for attention in ("rpe", "urpe"):
        count = sum(p.numel() for p in Graphormer(GraphormerConfig(attention=attention)).parameters())
        assert count < 500_000, count


def test_official_initialisation() -> None:
    net = Graphormer(GraphormerConfig(num_layers=16, hidden_dim=256, ffn_dim=256))
    linear = net.layers[0].attention.qkv.weight
    assert abs(linear.std().item() - 0.02 / 4) < 5e-4 and (net.layers[0].attention.qkv.bias == 0).all()
    assert abs(net.nodes.features.weight[1:].std().item() - 0.02) < 2e-3
    for table in (net.nodes.features, net.nodes.in_degree, net.relative_bias.table, net.edge_bias.features):
        assert (table.weight[0] == 0).all()
    assert (net.relative_scale.weight[1:] == 1).all()


# ----------------------------------------------------------------------------- node-level inputs

SMALL = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)


def _node_batch(rng: np.random.Generator, sizes=(5, 3, 7), width: int = 6) -> GraphBatch:
    """Graph batch plus continuous features and a target node per graph."""
    batch = collate_graphs(
        [make_record(rng, n, index=i, node_vocab=(3,), edge_vocab=(6,)) for i, n in enumerate(sizes)]
    )
    features = torch.randn(len(sizes), batch.x.shape[1], width) * batch.node_mask.unsqueeze(-1)
    target = torch.tensor([int(rng.integers(0, n)) for n in sizes])
    return dataclasses.replace(batch, x_continuous=features.half(), target_node=target)


def _node_model(attention: str, width: int = 6) -> Graphormer:
    torch.manual_seed(0)
    config = GraphormerConfig(
        node_vocab=[3],
        edge_vocab=[6],
        num_outputs=4,
        continuous_node_dim=width,
        readout="target_node",
        attention=attention,
        **SMALL,
    )
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
    permuted, original = model(_permute(batch, 2, order)), model(batch)
    torch.testing.assert_close(permuted, original, **rounding_tolerance(permuted, original))


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


# ----------------------------------------------------------------------------- no graph token, node readout


def node_config(**overrides) -> GraphormerConfig:
    base = dict(
        node_vocab=[1],
        edge_vocab=[1],
        num_outputs=3,
        num_layers=3,
        hidden_dim=16,
        ffn_dim=16,
        num_heads=4,
        attention="rpe",
        graph_token=False,
        readout="nodes",
        dropout=0.0,
        attention_dropout=0.0,
    )
    return GraphormerConfig(**{**base, **overrides})


def randomize(net: torch.nn.Module, seed: int) -> None:
    """Large random weights everywhere, padding rows included; C random in [0.5, 1.5] (padding row 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
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


def layer_states(net: Graphormer, batch) -> list[torch.Tensor]:
    """Token states after every layer (forward hooks)."""
    states: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: states.append(out)) for layer in net.layers]
    net(batch)
    for hook in hooks:
        hook.remove()
    return states


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("edge_encoding", ["multi_hop", "none"])
def test_rpe_without_graph_token_gives_every_node_the_same_state(seed, edge_encoding):
    """Theorem 2: on a regular graph with identical node features, RPE keeps all nodes identical at every layer."""
    records = regular_graphs(3, 3, 12, 16, 2, seed=seed)[0]
    batch = collate_graphs([regular_graph_record(nx.frucht_graph(), 0), *records])
    net = Graphormer(node_config(edge_encoding=edge_encoding)).eval()
    randomize(net, seed)
    for states in [*layer_states(net, batch), net(batch)]:
        for b in range(batch.num_graphs):
            real = states[b][batch.node_mask[b]]  # (n, ...)
            torch.testing.assert_close(real, real[:1].expand_as(real), **rounding_tolerance(states))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_urpe_separates_nodes_with_different_distance_profiles(seed):
    batch = frucht_batch()
    net = Graphormer(node_config(attention="urpe")).eval()
    randomize(net, seed)
    out = net(batch)[0]  # (n, outputs)
    profiles = distance_profiles(batch.spd[0])
    assert len(set(profiles)) > 1
    for i in range(len(profiles)):
        for j in range(len(profiles)):
            if profiles[i] != profiles[j]:
                assert (out[i] - out[j]).abs().max() > 1e-4, (i, j, profiles[i], profiles[j])


def test_graph_token_already_lets_rpe_tell_nodes_apart():
    """Why the task drops the graph token: its share of each softmax row depends on the distance profile."""
    batch = frucht_batch()
    net = Graphormer(node_config(graph_token=True)).eval()
    randomize(net, 0)
    out = net(batch)[0]
    assert (out - out[:1]).abs().max() > 1e-3


@pytest.mark.device
@pytest.mark.parametrize("graph_token,readout", [(True, "graph_token"), (True, "nodes"), (False, "nodes")])
def test_urpe_with_unit_scale_equals_rpe(rng, graph_token, readout, device):
    batch = collate_graphs([make_record(rng, n, index=i) for i, n in enumerate((5, 9, 3))]).to(device)
    overrides = dict(node_vocab=[28], edge_vocab=[4], graph_token=graph_token, readout=readout)
    rpe = Graphormer(node_config(**overrides)).eval()
    randomize(rpe, 0)
    rpe.to(device)
    urpe = Graphormer(node_config(attention="urpe", **overrides)).eval().to(device)
    missing, unexpected = urpe.load_state_dict(rpe.state_dict(), strict=False)
    assert missing == ["relative_scale.weight"] and unexpected == []
    real = slice(None) if readout == "graph_token" else batch.node_mask  # padding nodes' outputs are meaningless
    assert torch.equal(urpe(batch)[real], rpe(batch)[real])


def test_node_readout_shapes_and_padding_invariance(rng):
    small, large = make_record(rng, 4, index=0), make_record(rng, 11, index=1)
    net = Graphormer(node_config(node_vocab=[28], edge_vocab=[4], attention="urpe")).eval()
    randomize(net, 0)
    alone = net(collate_graphs([small]))
    together = net(collate_graphs([small, large]))
    assert alone.shape == (1, 4, 3) and together.shape == (2, 11, 3)
    torch.testing.assert_close(together[0, :4], alone[0], **rounding_tolerance(together, alone))


def test_node_readout_with_graph_token_reads_the_node_positions(rng):
    batch = collate_graphs([make_record(rng, 6)])
    net = Graphormer(node_config(node_vocab=[28], edge_vocab=[4], graph_token=True, readout="nodes")).eval()
    randomize(net, 0)
    assert torch.equal(net(batch), net.head(net.encode(batch)[:, 1:]))


def test_default_keeps_the_graph_token_and_graph_readout():
    default = GraphormerConfig()
    assert default.graph_token and default.readout == "graph_token"
    assert "graph_token.weight" in Graphormer(node_config(graph_token=True, readout="graph_token")).state_dict()
    assert "graph_token.weight" not in Graphormer(node_config()).state_dict()
    with pytest.raises(ConfigError, match=r"encoder\.readout='graph_token': needs model\.encoder\.graph_token=true"):
        Graphormer(node_config(readout="graph_token"))


def test_target_node_readout_without_graph_token(rng):
    batch = dataclasses.replace(
        collate_graphs([make_record(rng, 5), make_record(rng, 8)]), target_node=torch.tensor([4, 2])
    )
    net = Graphormer(node_config(node_vocab=[28], edge_vocab=[4], readout="target_node")).eval()
    randomize(net, 0)
    torch.testing.assert_close(net(batch), net.head(net.encode(batch)[torch.arange(2), batch.target_node]))


def test_frucht_graph_nodes_have_several_distance_profiles():
    """The fixture itself: regular (so degrees carry nothing), not vertex-transitive."""
    spd = frucht_batch().spd[0]
    assert len(set(distance_profiles(spd))) >= 3
    assert np.all(np.array([d for _, d in nx.frucht_graph().degree()]) == 3)


# ----------------------------------------------------------------------------- your own graphs: continuous
# edge features, one prediction per node


def test_continuous_edge_features_are_projected_into_each_edges_bias() -> None:
    torch.manual_seed(0)
    bond = np.array([[1, 0], [2, 1], [3, 2]])
    forward_values, backward_values = torch.randn(3, 2), torch.randn(3, 2)  # a directed feature: directions differ
    batch = dataclasses.replace(hand_batch(bond), edge_continuous=torch.cat([forward_values, backward_values]))
    encoder = EdgePathBias((4, 3), num_heads=2, max_hops=5, hop_matrices=True, continuous_dim=2)
    torch.nn.init.normal_(encoder.hop_weight)
    bias = encoder(batch)
    table, projection = encoder.features.weight, encoder.continuous
    per_edge = [(table[1 + a] + table[5 + b]) / 2 for a, b in bond]
    forward = [per_edge[n] + projection(forward_values[n]) for n in range(3)]
    backward = [per_edge[n] + projection(backward_values[n]) for n in range(3)]
    torch.testing.assert_close(bias[0, 0, 3], sum(forward[n] @ encoder.hop_weight[n] for n in range(3)) / 3)
    torch.testing.assert_close(bias[0, 3, 0], sum(backward[2 - n] @ encoder.hop_weight[n] for n in range(3)) / 3)


def test_continuous_edge_features_change_only_their_graph(rng: np.random.Generator) -> None:
    records = [make_record(rng, n, index=i, edge_vocab=(4,)) for i, n in enumerate((6, 4))]
    batch = collate_graphs(records)
    batch = dataclasses.replace(batch, edge_continuous=torch.randn(batch.edge_attr.shape[0], 3))
    net = model(continuous_edge_dim=3)
    with torch.no_grad():  # large enough to see through the small initialisation
        torch.nn.init.normal_(net.edge_bias.continuous.weight)
        torch.nn.init.normal_(net.edge_bias.hop_weight)
    changed = batch.edge_continuous.clone()
    changed[: records[0].edge_index.shape[1]] += 1.0  # graph 0's edges only
    before, after = net(batch), net(dataclasses.replace(batch, edge_continuous=changed))
    assert not torch.allclose(before[0], after[0]) and torch.equal(before[1], after[1])


@pytest.mark.parametrize("attention", ["rpe", "urpe"])
def test_node_readout_predicts_every_node_equivariantly(rng: np.random.Generator, attention: str) -> None:
    batch = _node_batch(rng)
    torch.manual_seed(0)
    net = Graphormer(
        GraphormerConfig(
            node_vocab=[3],
            edge_vocab=[6],
            num_outputs=2,
            continuous_node_dim=6,
            readout="nodes",
            attention=attention,
            **SMALL,
        )
    ).eval()
    output = net(batch)
    assert output.shape == (3, 7, 2)
    torch.testing.assert_close(output, net.head(net.encode(batch)[:, 1:]))
    order = torch.as_tensor(rng.permutation(7))
    permuted = net(_permute(batch, 2, order))
    torch.testing.assert_close(permuted[2], output[2][order], **rounding_tolerance(permuted, output))
    alone = collate_graphs([make_record(np.random.default_rng(0), 5, node_vocab=(3,), edge_vocab=(6,))])
    together = collate_graphs(
        [
            make_record(np.random.default_rng(0), 5, node_vocab=(3,), edge_vocab=(6,)),
            make_record(rng, 9, node_vocab=(3,), edge_vocab=(6,)),
        ]
    )
    plain = Graphormer(
        GraphormerConfig(node_vocab=[3], edge_vocab=[6], num_outputs=2, readout="nodes", attention=attention, **SMALL)
    ).eval()
    both, single = plain(together), plain(alone)
    torch.testing.assert_close(both[0, :5], single[0], **rounding_tolerance(both, single))
