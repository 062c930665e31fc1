"""OGB-LSC test-submission formats (file names, dtypes, split sizes), declared as ``DataSpec.submission``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphormer_urpe.data.safe_load import load_split_dict
from graphormer_urpe.errors import SubmissionError

#: The one array a submission file holds.
PREDICTION_KEY = "y_pred"
#: Test splits a submission can be made for.
MODES = ("test-dev", "test-challenge")


@dataclass(frozen=True)
class SubmissionFormat:
    """The test-submission file of one OGB-LSC dataset."""

    dataset: str  # as in ``y_pred_<dataset>_<mode>.npz``; also its directory under the data root
    # builds ogb's evaluator (``eval`` for labelled splits, ``save_test_submission``)
    evaluator: Callable[[], Any]
    dtype: np.dtype  # of ``y_pred`` in the file written by ogb
    # predictions are labels 0 .. num_classes - 1; None: regression (finite floats)
    num_classes: int | None = None
    directory: str | None = None  # the dataset's directory under the data root, when it differs from ``dataset``
    #: Rows of every official split: loading warns when the splits on disk differ; ogb asserts the test ones,
    #: which ``--check-submission`` uses when the dataset is not on disk.
    official_sizes: Mapping[str, int] = field(default_factory=dict)
    examples: str = "molecules"  # what one row is, in messages
    # the official splits (:data:`MODES` are the hidden ones)
    splits: tuple[str, ...] = ("train", "valid", *MODES)

    def filename(self, mode: str) -> str:
        """``y_pred_<dataset>_<mode>.npz``."""
        return f"y_pred_{self.dataset}_{mode}.npz"

    def split_size(self, data_root: Path | str, mode: str) -> int:
        """Rows of test split ``mode`` in ``<data_root>/<dataset>/split_dict.pt`` (one ``test`` split is divided
        3:2 into test-dev and test-challenge, as ogb does)."""
        path = Path(data_root) / (self.directory or self.dataset) / "split_dict.pt"
        splits = load_split_dict(path, [])
        if mode not in splits and "test" in splits:
            import ogb.lsc.utils

            ogb.lsc.utils.split_test(splits)
        if mode not in splits:
            raise SubmissionError(f"{path} has no '{mode}' split (it holds {sorted(splits)})")
        return len(splits[mode])


def _pcqm4mv2_evaluator() -> Any:
    import ogb.lsc  # imported on use: slow

    return ogb.lsc.PCQM4Mv2Evaluator()


def _mag240m_evaluator() -> Any:
    import ogb.lsc

    return ogb.lsc.MAG240MEvaluator()


PCQM4MV2 = SubmissionFormat(
    dataset="pcqm4m-v2",
    evaluator=_pcqm4mv2_evaluator,
    dtype=np.dtype(np.float32),
    official_sizes={"train": 3_378_606, "valid": 73_545, "test-dev": 147_037, "test-challenge": 147_432},
)
#: ogb writes MAG240M labels as int16 (``np.short``).
MAG240M = SubmissionFormat(
    dataset="mag240m",
    evaluator=_mag240m_evaluator,
    dtype=np.dtype(np.int16),
    num_classes=153,
    directory="mag240m_kddcup2021",
    examples="papers",
    official_sizes={"train": 1_112_392, "valid": 138_949, "test-dev": 88_092, "test-challenge": 58_726},
)
#: Every known format by dataset name (``--check-submission`` finds the format from the file name).
FORMATS = {fmt.dataset: fmt for fmt in (PCQM4MV2, MAG240M)}
