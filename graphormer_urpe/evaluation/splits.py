"""Predictions for every row of a split, identical whether one process or many computed them.

Under DDP, Lightning shards the prediction loader over W processes (with a sampler that may pad
the last shard with repeated graphs) and each process returns only its own batches, in its own
order. :func:`predict_split` gathers every process's ``(graph index, prediction)`` pairs, keeps
one prediction per graph, checks that exactly the split's graphs came back, and lays them out in
the split's row order; rows that were skipped while preprocessing get NaN and are listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist

from graphormer_urpe.data.datamodule import GraphDataModule


@dataclass
class SplitPredictions:
    """Predictions of one split, one row per source row of the split, in the split's order.

    Shapes:
        rows: (R,) int64 source rows; graphs: (R,) int64 cache index, -1 for skipped rows;
        prediction: (R, Y) float32, NaN for skipped rows; target: (R, Y) float32 (NaN if hidden).

    Args:
        duplicates: predictions dropped because a sampler had given the same graph to two processes.
        skipped: reason each skipped row of the split was left out of the cache.
    """

    split: str
    rows: np.ndarray
    graphs: np.ndarray
    prediction: np.ndarray
    target: np.ndarray
    duplicates: int
    skipped: dict[int, str]


def gather_predictions(index: torch.Tensor, prediction: torch.Tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """Every process's predictions, one per graph, sorted by graph index.

    Args:
        index: (b,) graph indices predicted by this process.
        prediction: (b, Y) or (b,) their predictions (any device).

    Returns:
        (G,) sorted unique graph indices, (G, Y) float32 predictions (the first one seen for a graph
        predicted twice), and the number of repeated predictions dropped.
    """
    values = prediction.detach().to("cpu", torch.float32).numpy()
    parts = [(index.detach().cpu().numpy(), values[:, None] if values.ndim == 1 else values)]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, parts[0])
        parts = gathered
    all_index = np.concatenate([p[0] for p in parts]).astype(np.int64)
    all_prediction = np.concatenate([p[1] for p in parts])
    order = np.argsort(all_index, kind="stable")
    all_index, all_prediction = all_index[order], all_prediction[order]
    first = np.ones(len(all_index), dtype=bool)
    first[1:] = all_index[1:] != all_index[:-1]
    return all_index[first], all_prediction[first], int((~first).sum())


def predict_split(trainer: pl.Trainer, model: pl.LightningModule, datamodule: GraphDataModule, split: str,
                  ckpt_path: str | Path | None) -> SplitPredictions:
    """Run ``trainer.predict`` on ``split`` and return its predictions in the split's row order.

    Every process gets the full result. ``model.predict_step`` must return a dict with ``index``
    (B,) and ``prediction`` (B, Y), as :class:`~graphormer_urpe.tasks.GraphRegression` does.

    Raises:
        RuntimeError: the processes together did not predict exactly the split's graphs.
    """
    datamodule.predict_split = split
    outputs = trainer.predict(model, datamodule=datamodule, ckpt_path=ckpt_path, return_predictions=True) or []
    if outputs:
        index = torch.cat([o["index"] for o in outputs])
        prediction = torch.cat([o["prediction"] for o in outputs])
    else:  # this process was given no batch
        index, prediction = torch.zeros(0, dtype=torch.long), torch.zeros(0, datamodule.num_targets)
    graphs, values, duplicates = gather_predictions(index, prediction)

    store = datamodule.datasets[split].store
    rows = store.split_rows()[split]
    graph_of_row = store.graphs_of_rows(rows)
    expected = np.unique(graph_of_row[graph_of_row >= 0])
    if not np.array_equal(graphs, expected):
        missing, unexpected = np.setdiff1d(expected, graphs), np.setdiff1d(graphs, expected)
        raise RuntimeError(
            f"predicting '{split}' returned {len(graphs)} graphs for {len(expected)} expected: {len(missing)} missing "
            f"(first {missing[:5].tolist()}), {len(unexpected)} not in the split (first {unexpected[:5].tolist()})"
        )
    prediction_of_row = np.full((len(rows), values.shape[1]), np.nan, dtype=np.float32)
    cached = graph_of_row >= 0
    prediction_of_row[cached] = values[np.searchsorted(graphs, graph_of_row[cached])]
    targets = store.targets()
    target_of_row = np.full((len(rows), targets.shape[1]), np.nan, dtype=np.float32)
    target_of_row[cached] = targets[graph_of_row[cached]]
    skipped_reasons = store.skipped_rows()
    return SplitPredictions(
        split=split, rows=rows, graphs=graph_of_row, prediction=prediction_of_row, target=target_of_row,
        duplicates=duplicates, skipped={int(r): skipped_reasons.get(int(r), "not in the cache") for r in rows[~cached]},
    )
