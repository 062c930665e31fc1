"""Predictions for every row of a split, identical from one process or many (``docs/loaders.md``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

from graphormer_urpe.data.loaders import gather_objects
from graphormer_urpe.data.predictable import PredictableData

SHOWN_ROWS = 10  # skipped rows named one by one in log messages (the CSV or the submission log lists all)


@dataclass
class SplitPredictions:
    """Predictions of one split, one row per source row of the split, in the split's order.

    Shapes:
        rows: (R,) int64 source rows (MAG240M: paper ids); graphs: (R,) int64 the example's ``index`` (cache index;
        MAG240M: paper id), -1 for skipped rows; prediction: (R, Y) float32, NaN for skipped rows;
        target: (R, Y) float32 (NaN if hidden).
    """

    split: str
    rows: np.ndarray
    graphs: np.ndarray
    prediction: np.ndarray
    target: np.ndarray
    duplicates: int  # predictions dropped because a sampler had given the same graph to two processes
    skipped: dict[int, str]  # why each skipped row of the split was left out of the cache


def gather_predictions(index: torch.Tensor, prediction: torch.Tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """Every process's predictions, the first one per graph, sorted by graph, and how many repeats were dropped.

    Shapes:
        index: (b,) this process's graphs, prediction: (b, Y) or (b,) -> (G,) graphs, (G, Y) float32.
    """
    values = prediction.detach().to("cpu", torch.float32).numpy()
    parts = gather_objects((index.detach().cpu().numpy(), values[:, None] if values.ndim == 1 else values))
    all_index = np.concatenate([p[0] for p in parts]).astype(np.int64)
    graphs, first = np.unique(all_index, return_index=True)
    return graphs, np.concatenate([p[1] for p in parts])[first], len(all_index) - len(graphs)


def predict_split(
    trainer: pl.Trainer,
    model: pl.LightningModule,
    datamodule: PredictableData,
    split: str,
    ckpt_path: str | Path | None,
) -> SplitPredictions:
    """``split``'s predictions in its row order, on every process; ``model.predict_step`` returns a dict with
    ``index`` (B,) and ``prediction`` (B, Y) or (B,), as the tasks do."""
    datamodule.predict_on(split)
    outputs = trainer.predict(model, datamodule=datamodule, ckpt_path=ckpt_path, return_predictions=True)
    items, values, duplicates = gather_predictions(
        torch.cat([o["index"] for o in outputs]),  # >= 1 batch each
        torch.cat([o["prediction"] for o in outputs]),
    )

    split_rows = datamodule.split_rows(split)
    item_of_row = split_rows.items
    present = item_of_row >= 0
    expected = np.unique(item_of_row[present])
    if not np.array_equal(items, expected):
        missing, unexpected = np.setdiff1d(expected, items), np.setdiff1d(items, expected)
        raise RuntimeError(
            f"predicting '{split}' returned {len(items)} examples for {len(expected)} expected: {len(missing)} missing "
            f"(first {missing[:5].tolist()}), {len(unexpected)} not in the split (first {unexpected[:5].tolist()})"
        )
    prediction_of_row = np.full((len(item_of_row), values.shape[1]), np.nan, dtype=np.float32)
    prediction_of_row[present] = values[np.searchsorted(items, item_of_row[present])]
    return SplitPredictions(
        split=split,
        rows=split_rows.rows,
        graphs=item_of_row,
        prediction=prediction_of_row,
        target=split_rows.targets,
        duplicates=duplicates,
        skipped=split_rows.skipped,
    )
