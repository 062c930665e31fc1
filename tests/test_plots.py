"""Pictures of the learned B and C tables."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graphormer_urpe.constants import GRAPH_TOKEN_RELATION, SPD_RELATION_OFFSET
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.plots import graph_figure, graph_tables

CONFIG = GraphormerConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2, spatial_pos_max=4)


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
    heatmaps = [ax for ax in figure.axes if ax.images]
    assert len(heatmaps) == 2
    for ax, table, centre in zip(heatmaps, (bias, scale), (0.0, 1.0)):
        assert np.allclose(ax.images[0].get_array(), table)  # (H, R')
        norm = ax.images[0].norm
        assert norm.vcenter == centre and np.isclose(norm.vmax - centre, centre - norm.vmin)
    assert len([ax for ax in graph_figure(list("abc"), bias[:, :3], None).axes if ax.images]) == 1  # RPE: B only
