"""Pictures of the learned relative encodings B and C of a Graphormer (W&B images, run plots).

The graph counterpart of the paper's Figure 2: since a graph's B and C are functions of the
shortest-path distance, the tables themselves are drawn, heads down and relations (graph token,
SPD 0, 1, 2 ...) across. Figures are built without pyplot (no global state, no display needed);
save one with ``figure.savefig(path)``.

Shape letters: H heads, R' relations drawn (the padding row is left out).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from graphormer_urpe.constants import GRAPH_TOKEN_RELATION, SPD_RELATION_OFFSET
from graphormer_urpe.model.graphormer import Graphormer


@torch.no_grad()
def graph_tables(model: Graphormer) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """The B and C tables of a Graphormer as heads x relation arrays, padding row left out.

    Shapes:
        returns relation labels (R',), B (H, R') and C (H, R') or None (RPE).
    """
    rows = [GRAPH_TOKEN_RELATION, *range(SPD_RELATION_OFFSET, model.config.num_relations)]
    labels = ["token", *(str(row - SPD_RELATION_OFFSET) for row in rows[1:])]
    bias = model.relative_bias.table.weight[rows].T.float().cpu().numpy()
    scale = None if model.relative_scale is None else model.relative_scale.weight[rows].T.float().cpu().numpy()
    return labels, bias, scale


def _centred(values: np.ndarray, centre: float) -> TwoSlopeNorm:
    spread = max(float(np.abs(values - centre).max()), 1e-6)
    return TwoSlopeNorm(vcenter=centre, vmin=centre - spread, vmax=centre + spread)


def graph_figure(labels: Sequence[str], bias: np.ndarray, scale: np.ndarray | None, title: str = "") -> Figure:
    """Heatmaps of the B table (coloured around 0) and the URPE C table (around its initial 1).

    Args:
        labels: relation names (R').
        bias: (H, R').
        scale: (H, R') or None (RPE).
        title: figure title (e.g. the training step).
    """
    panels = [("B: additive bias", bias, 0.0)] + ([("C: URPE scale (1 at init)", scale, 1.0)] if scale is not None
                                                 else [])
    heads = bias.shape[0]
    figure = Figure(figsize=(max(6.0, 0.35 * len(labels) + 2.0), (0.3 * heads + 1.4) * len(panels)),
                    layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (name, table, centre) in zip(axes, panels):
        image = ax.imshow(table, aspect="auto", cmap="RdBu_r", norm=_centred(table, centre), interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_yticks(range(heads), [str(h) for h in range(heads)], fontsize=7)
        ax.set_xlabel("relation: graph token, then shortest-path distance", fontsize=8)
        ax.set_ylabel("head", fontsize=8)
        figure.colorbar(image, ax=ax, shrink=0.9)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure
