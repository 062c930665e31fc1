"""Pictures of the learned relative-position tables: the additive bias B and the URPE scale C.

The graph counterpart of the paper's Figure 2: one heatmap per table, heads down, relations
(graph token, then shortest-path distance 0, 1, 2 ...) across. B is coloured around 0, C around
its initial value 1, so what training changed stands out. Figures are built without pyplot (no
global state, no display needed) and rendered to PNG for loggers and files.

Shape letters: R relation ids, H heads.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from PIL import Image

from graphormer_urpe.constants import GRAPH_TOKEN_RELATION, PAD_RELATION, SPD_RELATION_OFFSET


def graph_relation_labels(num_relations: int) -> list[str]:
    """Axis labels of the graph relation ids: ``pad``, ``token``, then distances ``0, 1, ...``. (R,)"""
    names = {PAD_RELATION: "pad", GRAPH_TOKEN_RELATION: "token"}
    return [names.get(r, str(r - SPD_RELATION_OFFSET)) for r in range(num_relations)]


def _centred_norm(values: np.ndarray, centre: float) -> TwoSlopeNorm:
    spread = max(float(np.abs(values - centre).max()), 1e-6)
    return TwoSlopeNorm(vcenter=centre, vmin=centre - spread, vmax=centre + spread)


def plot_relation_tables(
    bias: torch.Tensor,
    scale: torch.Tensor | None,
    labels: Sequence[str],
    title: str | None = None,
) -> Figure:
    """Heatmaps of B and (URPE) C per head against the relation.

    Args:
        bias: the additive table B. (R, H)
        scale: the multiplicative table C, or None for RPE. (R, H)
        labels: one name per relation id (e.g. :func:`graph_relation_labels`). (R,)
        title: figure title (e.g. the training step).

    Returns:
        A matplotlib Figure (render it with :func:`figure_to_image` or ``savefig``).
    """
    tables = [("B: additive bias (centred at 0)", bias, 0.0)]
    if scale is not None:
        tables.append(("C: URPE scale (centred at 1, its init)", scale, 1.0))
    num_relations, num_heads = bias.shape
    figure = Figure(figsize=(max(6.0, 0.35 * num_relations + 2.0), (0.3 * num_heads + 1.4) * len(tables)),
                    layout="constrained")
    axes = figure.subplots(len(tables), 1, squeeze=False)[:, 0]
    for ax, (name, table, centre) in zip(axes, tables):
        values = table.detach().float().cpu().numpy().T  # (H, R)
        image = ax.imshow(values, aspect="auto", cmap="RdBu_r", norm=_centred_norm(values, centre),
                          interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(num_relations), labels, fontsize=7, rotation=90 if num_relations > 30 else 0)
        ax.set_yticks(range(num_heads), [str(h) for h in range(num_heads)], fontsize=7)
        ax.set_xlabel("relation (graph token, then shortest-path distance)", fontsize=8)
        ax.set_ylabel("head", fontsize=8)
        figure.colorbar(image, ax=ax, shrink=0.9)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


def figure_to_image(figure: Figure, dpi: int = 100) -> Image.Image:
    """Render a figure to an RGBA PIL image."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    return Image.open(buffer).convert("RGBA")
