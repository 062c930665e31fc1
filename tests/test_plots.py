"""Pictures of the learned B and C tables."""

from __future__ import annotations

import numpy as np
import torch

from graphormer_urpe.constants import SPD_RELATION_OFFSET
from graphormer_urpe.plots import figure_to_image, graph_relation_labels, plot_relation_tables


def test_labels_name_padding_graph_token_and_distances() -> None:
    labels = graph_relation_labels(SPD_RELATION_OFFSET + 3)
    assert labels == ["pad", "token", "0", "1", "2"]


def test_urpe_figure_has_one_heatmap_per_table_with_heads_down_and_relations_across() -> None:
    bias, scale = torch.randn(6, 4), 1 + 0.1 * torch.randn(6, 4)
    figure = plot_relation_tables(bias, scale, [str(r) for r in range(6)], title="step 10")
    heatmaps = [ax for ax in figure.axes if ax.images]
    assert len(heatmaps) == 2
    for ax, table, centre in zip(heatmaps, (bias, scale), (0.0, 1.0)):
        shown = ax.images[0].get_array()
        assert shown.shape == (4, 6)  # (H, R)
        assert np.allclose(shown, table.numpy().T)
        norm = ax.images[0].norm
        assert norm.vcenter == centre and np.isclose(norm.vmax - centre, centre - norm.vmin)
    assert figure_to_image(figure).size[0] > 100


def test_rpe_figure_shows_only_b() -> None:
    figure = plot_relation_tables(torch.zeros(5, 2), None, list("abcde"))
    assert len([ax for ax in figure.axes if ax.images]) == 1
