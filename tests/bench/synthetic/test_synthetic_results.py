"""The synthetic experiments' accuracy figure (bench/synthetic/synthetic_results.py): one bar per method and task."""

from __future__ import annotations

from bench.synthetic.synthetic_results import accuracy_figure


def test_accuracy_figure_bars() -> None:
    results = {"PI": {"noPE": 0.1, "RPE": 0.2, "URPE": 1.0}, "graph": {"RPE": 0.35, "URPE": 0.99}}
    figure = accuracy_figure(results, ["noPE", "RPE", "URPE"], baselines={"graph": 0.35})
    ax = figure.axes[0]
    heights = sorted(round(p.get_height(), 2) for p in ax.patches)
    assert heights == [0.1, 0.2, 0.35, 0.99, 1.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["noPE", "RPE", "URPE"]
