"""Predictions for every row of a split, identical whether one process or many computed them.

Under DDP, each of W processes predicts its contiguous shard of the split (the DataModule's
``predict_dataloader``, :class:`~graphormer_urpe.data.loaders.EvalShardSampler`) and returns only
its own batches. :func:`predict_split` gathers every process's ``(index, prediction)`` pairs, keeps
one prediction per example (a sampler that repeats examples would be harmless), checks that exactly
the split's examples came back, and lays them out in the split's row order
(:class:`~graphormer_urpe.data.predictable.SplitRows`); rows that were skipped while preprocessing
get NaN and are listed. Graph datasets and MAG240M go through the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

from graphormer_urpe.data.loaders import gather_objects
from graphormer_urpe.data.predictable import PredictableData


@dataclass
class SplitPredictions:
    """Predictions of one split, one row per source row of the split, in the split's order.

    Shapes:
        rows: (R,) int64 source rows (MAG240M: paper ids); graphs: (R,) int64 the example's ``index``
        (cache index; MAG240M: paper id), -1 for skipped rows;
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
    parts = gather_objects((index.detach().cpu().numpy(), values[:, None] if values.ndim == 1 else values))
    all_index = np.concatenate([p[0] for p in parts]).astype(np.int64)
    all_prediction = np.concatenate([p[1] for p in parts])
    order = np.argsort(all_index, kind="stable")
    all_index, all_prediction = all_index[order], all_prediction[order]
    first = np.ones(len(all_index), dtype=bool)
    first[1:] = all_index[1:] != all_index[:-1]
    return all_index[first], all_prediction[first], int((~first).sum())


def predict_split(trainer: pl.Trainer, model: pl.LightningModule, datamodule: PredictableData, split: str,
                  ckpt_path: str | Path | None) -> SplitPredictions:
    """Run ``trainer.predict`` on ``split`` and return its predictions in the split's row order.

    Serves every DataModule that implements :class:`~graphormer_urpe.data.predictable.PredictableData`
    (graph datasets, MAG240M). Every process gets the full result. ``model.predict_step`` must return
    a dict with ``index`` (B,) and ``prediction`` (B, Y) or (B,), as the tasks do.

    Raises:
        RuntimeError: the processes together did not predict exactly the split's examples.
    """
    datamodule.predict_on(split)
    outputs = trainer.predict(model, datamodule=datamodule, ckpt_path=ckpt_path, return_predictions=True)
    index = torch.cat([o["index"] for o in outputs])  # every process has >= 1 batch (EvalShardSampler)
    prediction = torch.cat([o["prediction"] for o in outputs])
    items, values, duplicates = gather_predictions(index, prediction)

    split_rows = datamodule.split_rows(split)
    item_of_row = split_rows.items
    expected = np.unique(item_of_row[item_of_row >= 0])
    if not np.array_equal(items, expected):
        missing, unexpected = np.setdiff1d(expected, items), np.setdiff1d(items, expected)
        raise RuntimeError(
            f"predicting '{split}' returned {len(items)} examples for {len(expected)} expected: {len(missing)} missing "
            f"(first {missing[:5].tolist()}), {len(unexpected)} not in the split (first {unexpected[:5].tolist()})"
        )
    prediction_of_row = np.full((len(item_of_row), values.shape[1]), np.nan, dtype=np.float32)
    present = item_of_row >= 0
    prediction_of_row[present] = values[np.searchsorted(items, item_of_row[present])]
    return SplitPredictions(
        split=split, rows=split_rows.rows, graphs=item_of_row, prediction=prediction_of_row,
        target=split_rows.targets, duplicates=duplicates, skipped=split_rows.skipped,
    )
