"""Pictures of the learned B and C, built without pyplot: sequences as n x n matrices, graphs as heads x relation.
Shape letters: H heads, n sequence length, R' relations drawn (the padding row is left out)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from torch import nn

from graphormer_urpe.constants import GRAPH_TOKEN_RELATION, SPD_RELATION_OFFSET
from graphormer_urpe.model.graphormer import Graphormer
from graphormer_urpe.model.sequence import SequenceTransformer

#: Heads drawn when none are chosen.
DEFAULT_HEADS_SHOWN = 4


@torch.no_grad()
def sequence_matrices(model: SequenceTransformer) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Dense B and C of a sequence model over its full length, exactly as the attention receives them.

    Shapes: returns B (H, n, n) and C (H, n, n) float arrays, each None when the model has no such table."""
    bias, scale = model.attention_inputs(model.config.length)  # (1, H, n, n) or None each
    return tuple(None if m is None else m[0].float().cpu().numpy() for m in (bias, scale))


@torch.no_grad()
def graph_tables(model: Graphormer) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """The B and C tables of a Graphormer as heads x relation arrays, padding row left out.

    Shapes: returns relation labels (R',), B (H, R') and C (H, R') or None (RPE)."""
    rows = list(range(SPD_RELATION_OFFSET, model.config.num_relations))
    labels = [f"{row - SPD_RELATION_OFFSET}" for row in rows]
    if model.graph_token is not None:
        rows, labels = [GRAPH_TOKEN_RELATION, *rows], ["token", *labels]
    bias = model.relative_bias.table.weight[rows].T.float().cpu().numpy()
    scale = None if model.relative_scale is None else model.relative_scale.weight[rows].T.float().cpu().numpy()
    return labels, bias, scale


def most_varied_heads(values: np.ndarray, count: int) -> list[int]:
    """The ``count`` heads whose entries vary most (standard deviation), in head order. ``values``: (H, ...)"""
    spread = values.reshape(values.shape[0], -1).std(axis=1)
    return sorted(np.argsort(-spread, kind="stable")[:count].tolist())


def _centred(values: np.ndarray, centre: float) -> TwoSlopeNorm:
    spread = max(float(np.abs(values - centre).max()), 1e-6)
    return TwoSlopeNorm(vcenter=centre, vmin=centre - spread, vmax=centre + spread)


#: (title, value at which the colour is white) of each table.
_PANELS = {"B": ("B: additive bias", 0.0), "C": ("C: URPE scale (1 at init)", 1.0)}


def sequence_figure(
    bias: np.ndarray | None, scale: np.ndarray | None, heads: Sequence[int] | None = None, title: str = ""
) -> Figure:
    """B and C matrices of ``heads`` (default: those whose C, else B, varies most), one row each, as in Figure 2.

    Shapes: bias, scale (H, n, n), or None (no positional encoding; RPE)."""
    panels = [(name, m) for name, m in (("B", bias), ("C", scale)) if m is not None]
    if not panels:
        raise ValueError("the model has neither B nor C (attention: none): nothing to draw")
    if heads is None:
        heads = most_varied_heads(panels[-1][1], min(DEFAULT_HEADS_SHOWN, panels[-1][1].shape[0]))
    figure = Figure(figsize=(3.2 * len(panels), 2.8 * len(heads)), layout="constrained")
    axes = np.asarray(figure.subplots(len(heads), len(panels), squeeze=False))
    for row, head in enumerate(heads):
        for col, (name, matrix) in enumerate(panels):
            ax = axes[row, col]
            image = ax.imshow(
                matrix[head], cmap="RdBu_r", norm=_centred(matrix[head], _PANELS[name][1]), interpolation="nearest"
            )
            ax.set_title(f"{name}, head {head}", fontsize=9)
            ax.set_xlabel("key j", fontsize=8)
            ax.set_ylabel("query i", fontsize=8)
            ax.tick_params(labelsize=7)
            figure.colorbar(image, ax=ax, shrink=0.8)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


def graph_figure(labels: Sequence[str], bias: np.ndarray, scale: np.ndarray | None, title: str = "") -> Figure:
    """Heatmaps of the B and C tables, heads x relation (graph token, SPD 0, 1, ...).

    Shapes: labels (R',), bias (H, R'), scale (H, R') or None (RPE)."""
    panels = [(name, m) for name, m in (("B", bias), ("C", scale)) if m is not None]
    heads = bias.shape[0]
    figure = Figure(
        figsize=(max(6.0, 0.35 * len(labels) + 2.0), (0.3 * heads + 1.4) * len(panels)), layout="constrained"
    )
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (name, table) in zip(axes, panels):
        panel_title, centre = _PANELS[name]
        image = ax.imshow(table, aspect="auto", cmap="RdBu_r", norm=_centred(table, centre), interpolation="nearest")
        ax.set_title(panel_title, fontsize=9)
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_yticks(range(heads), [str(h) for h in range(heads)], fontsize=7)
        ax.set_xlabel("relation: graph token (if any), then shortest-path distance", fontsize=8)
        ax.set_ylabel("head", fontsize=8)
        figure.colorbar(image, ax=ax, shrink=0.9)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


def has_relative_encodings(model: nn.Module) -> bool:
    """Whether :func:`relative_encoding_figure` can draw ``model`` (a Graphormer, or a sequence model with B)."""
    return isinstance(model, Graphormer) or (isinstance(model, SequenceTransformer) and model.relative_bias is not None)


def relative_encoding_figure(model: nn.Module, title: str = "", heads: Sequence[int] | None = None) -> Figure:
    """The learned B and C of a sequence model or Graphormer (``task.model``); ``heads``: sequence models only."""
    if isinstance(model, SequenceTransformer):
        return sequence_figure(*sequence_matrices(model), heads, title)
    if isinstance(model, Graphormer):
        return graph_figure(*graph_tables(model), title=title)
    raise TypeError(f"cannot draw the relative encodings of a {type(model).__name__}")
