"""Pictures of B and C: the drawn arrays are the model's tables, for sequences and graphs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graphormer_urpe.constants import GRAPH_TOKEN_RELATION, SPD_RELATION_OFFSET
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.model.sequence import SequenceConfig, SequenceTransformer
from graphormer_urpe.run.plots import (
    graph_figure,
    graph_tables,
    has_relative_encodings,
    most_varied_heads,
    relative_encoding_figure,
    sequence_matrices,
)

CONFIG = GraphormerConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2, spatial_pos_max=4)


def sequence_model(attention: str) -> SequenceTransformer:
    torch.manual_seed(0)
    model = SequenceTransformer(
        SequenceConfig(
            vocab_size=5,
            num_classes=6,
            length=10,
            num_layers=1,
            hidden_dim=24,
            ffn_dim=16,
            num_heads=6,
            attention=attention,
        )
    )
    if model.relative_scale is not None:
        with torch.no_grad():
            model.relative_scale.weight.uniform_(0.0, 2.0)
            model.relative_scale.weight[:, 2] = 1.0  # a head that never moved from its init
    return model


def test_sequence_matrices_are_what_the_attention_receives():
    model = sequence_model("urpe")
    bias, scale = sequence_matrices(model)
    expected_bias, expected_scale = model.attention_inputs(10)
    assert bias.shape == scale.shape == (6, 10, 10)
    np.testing.assert_array_equal(bias, expected_bias[0].detach().numpy())
    np.testing.assert_array_equal(scale, expected_scale[0].detach().numpy())
    assert sequence_matrices(sequence_model("rpe"))[1] is None


@pytest.mark.slow
def test_sequence_figure_draws_b_and_c_of_the_most_varied_heads(tmp_path):
    model = sequence_model("urpe")
    bias, scale = sequence_matrices(model)
    heads = most_varied_heads(scale, 4)
    assert 2 not in heads and heads == sorted(heads)
    figure = relative_encoding_figure(model, title="PI")  # default: the 4 most varied of 6 heads
    assert figure.get_suptitle() == "PI"
    images = [ax.images[0] for ax in figure.axes if ax.images]
    assert len(images) == 2 * 4
    for row, head in enumerate(heads):
        np.testing.assert_array_equal(images[2 * row].get_array(), bias[head])
        np.testing.assert_array_equal(images[2 * row + 1].get_array(), scale[head])
    figure.savefig(tmp_path / "pi.png")
    assert (tmp_path / "pi.png").stat().st_size > 0


def test_rpe_and_nope_sequence_figures():
    figure = relative_encoding_figure(sequence_model("rpe"), heads=[0, 1])
    assert len([ax for ax in figure.axes if ax.images]) == 2  # B only
    assert has_relative_encodings(sequence_model("rpe")) and not has_relative_encodings(sequence_model("none"))
    with pytest.raises(ValueError, match="nothing to draw"):
        relative_encoding_figure(sequence_model("none"))


@pytest.mark.parametrize("graph_token", [True, False])
def test_graph_tables_and_figure(graph_token):
    config = GraphormerConfig(
        num_layers=1,
        hidden_dim=16,
        ffn_dim=16,
        num_heads=4,
        attention="urpe",
        graph_token=graph_token,
        readout="graph_token" if graph_token else "nodes",
    )
    model = Graphormer(config)
    with torch.no_grad():
        model.relative_scale.weight.uniform_(0.0, 2.0)
    labels, bias, scale = graph_tables(model)
    spd_rows = slice(SPD_RELATION_OFFSET, config.num_relations)
    assert labels[-config.spatial_pos_max :] == [str(d) for d in range(config.spatial_pos_max)]
    tables = (model.relative_scale, model.relative_bias.table)
    spd_scale, spd_bias = (table.weight[spd_rows].T.detach() for table in tables)
    np.testing.assert_array_equal(scale[:, -config.spatial_pos_max :], spd_scale)
    np.testing.assert_array_equal(bias[:, -config.spatial_pos_max :], spd_bias)
    assert (labels[0] == "token") == graph_token
    if graph_token:
        np.testing.assert_array_equal(scale[:, 0], model.relative_scale.weight[GRAPH_TOKEN_RELATION].detach())
    figure = relative_encoding_figure(model)
    images = [ax.images[0] for ax in figure.axes if ax.images]
    np.testing.assert_array_equal(images[1].get_array(), scale)


def test_other_models_are_refused():
    with pytest.raises(TypeError, match="Linear"):
        relative_encoding_figure(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_tables_are_heads_by_relation_without_the_padding_row(attention: str) -> None:
    model = Graphormer(dataclasses.replace(CONFIG, attention=attention))
    if model.relative_scale is not None:
        with torch.no_grad():
            model.relative_scale.weight.copy_(torch.arange(12, dtype=torch.float32).view(6, 2))
    labels, bias, scale = graph_tables(model)
    assert labels == ["token", "0", "1", "2", "3"]
    rows = [GRAPH_TOKEN_RELATION, *range(SPD_RELATION_OFFSET, SPD_RELATION_OFFSET + 4)]
    assert np.array_equal(bias, model.relative_bias.table.weight[rows].T.detach().numpy())
    if attention == "rpe":
        assert scale is None
    else:
        assert scale.shape == (2, 5) and scale[1, 0] == 3.0 and scale[0, 1] == 4.0  # (head, relation)


def test_figure_has_one_heatmap_per_table_centred_on_its_initial_value() -> None:
    bias, scale = np.random.default_rng(0).normal(size=(2, 3, 6)) * [[[1.0]], [[0.1]]] + [[[0.0]], [[1.0]]]
    figure = graph_figure([str(r) for r in range(6)], bias, scale, title="step 10")
    assert figure.get_suptitle() == "step 10"
    heatmaps = [ax for ax in figure.axes if ax.images]
    assert len(heatmaps) == 2
    for ax, table, centre in zip(heatmaps, (bias, scale), (0.0, 1.0)):
        assert np.allclose(ax.images[0].get_array(), table)  # (H, R')
        norm = ax.images[0].norm
        assert norm.vcenter == centre and np.isclose(norm.vmax - centre, centre - norm.vmin)
    assert len([ax for ax in graph_figure(list("abc"), bias[:, :3], None).axes if ax.images]) == 1  # RPE: B only
