"""What a run (:class:`RunData`) and evaluation (:class:`PredictableData`) ask of a DataModule (``docs/loaders.md``),
and :class:`SplitRows`, a split's rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from torch.utils.data import DataLoader

from graphormer_urpe.data.spec import DataSpec, SequenceSpec


@dataclass(frozen=True)
class SplitRows:
    """The rows of one split in its official order (what a submission's rows refer to).

    Shapes:
        rows: (R,) int64 row ids (source rows of a table, paper ids of MAG240M); items: (R,) int64 the
        ``index`` a batch carries for each row's example, -1 for a row skipped while preprocessing (its reason
        in ``skipped``); targets: (R, Y) float32, NaN where unknown or hidden."""

    rows: np.ndarray
    items: np.ndarray
    targets: np.ndarray
    skipped: dict[int, str]


@runtime_checkable
class PredictableData(Protocol):
    """The part of a DataModule that evaluation uses (``GraphDataModule``, ``MAG240MDataModule``)."""

    root: Path  # the dataset root (<root>/<dataset>/split_dict.pt gives a submission's row count)

    @property
    def cache_dir(self) -> Path:
        """Where the preprocessed files are."""

    @property
    def spec(self) -> DataSpec:
        """What the data is; ``spec.submission`` is the OGB-LSC test-submission format, if any."""

    @property
    def split_sizes(self) -> dict[str, int]:
        """Examples per split (after setup)."""

    @property
    def preprocessing_seconds(self) -> float:
        """Seconds this process spent building preprocessed files (0.0 when they were found built)."""

    def predict_on(self, split: str) -> None:
        """Choose the split that ``predict_dataloader`` serves."""

    def split_rows(self, split: str) -> SplitRows:
        """The rows of ``split`` (after setup)."""

    def training_mean(self) -> np.ndarray | None:
        """(Y,) mean of the training targets, predicted for skipped rows; None for data that skip none."""

    def predict_dataloader(self) -> DataLoader:
        """This process's contiguous shard of the split chosen by :meth:`predict_on`; batches carry ``index``."""


@runtime_checkable
class RunData(Protocol):
    """What a run needs of its DataModule beyond Lightning's hooks (``GraphDataModule``, ``MAG240MDataModule``
    and the synthetic ones have it)."""

    batch_size: int  # examples per optimiser step over all processes (the global batch)
    bucket_window: int  # size-aware batching of the training order, in global batches (0: none)

    @property
    def eval_batch_size(self) -> int:
        """Examples per evaluation step over all processes."""

    @property
    def spec(self) -> DataSpec | SequenceSpec:
        """What the data is, linked into the model."""

    @property
    def split_sizes(self) -> dict[str, int]:
        """Examples per split (after setup); a run tests its best checkpoint when there is a ``test`` split."""

    def describe(self) -> dict:
        """What the run record says about the data (``run.json``'s ``dataset``)."""

    def identity(self) -> dict:
        """Which data these are: what every checkpoint records, and a resume or an evaluation compares."""
