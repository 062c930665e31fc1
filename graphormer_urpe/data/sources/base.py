"""What every dataset source provides to the shared preprocessing pipeline."""

from __future__ import annotations

import hashlib
import json
import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from graphormer_urpe.data.cache import CACHE_FORMAT, RowReader
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import ConfigError


def network_reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout`` seconds."""
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def missing_files(directory: Path, names: Sequence[str]) -> list[str]:
    """Names of the files in ``names`` that are not in ``directory``."""
    return [name for name in names if not (directory / name).is_file()]


class GraphSource(ABC):
    """One dataset: what it is, where its raw rows live, how they become graphs, and its official splits; the rest
    is shared by :class:`~graphormer_urpe.data.datamodule.GraphDataModule`."""

    #: Directory under the data root.
    name: str
    #: Split sizes of the official release, checked loudly after loading.
    published_split_sizes: Mapping[str, int] | None = None

    @property
    @abstractmethod
    def spec(self) -> DataSpec:
        """What the data is; a source that infers it reads its data here, once, and ``open`` reuses that read."""

    def origin(self) -> str:
        """Where the rows come from, for messages about them (a file and column, or the dataset name)."""
        return self.name

    @abstractmethod
    def ensure_raw(self, root: Path) -> None:
        """Make the raw files available under ``root / name``: download them, or raise
        :class:`DatasetMissing` within seconds naming the files and where to put them."""

    @abstractmethod
    def open(self, root: Path) -> RowReader:
        """A reader of the raw rows (created once, shared with preprocessing workers)."""

    @abstractmethod
    def splits(self, root: Path, reader: RowReader) -> dict[str, np.ndarray]:
        """Source rows of each split (``train``, ``valid``, ``test`` ...)."""

    def options(self) -> dict:
        """Everything besides the raw files that changes the cache (versions, subset flags)."""
        return {}

    def cache_key(self, extra: Mapping) -> tuple[str, dict]:
        """Cache directory name and the key it stands for."""
        key = {"source": type(self).__name__, "cache_format": CACHE_FORMAT, **self.options(), **extra}
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.name}-{digest}", key


def split_shares(fractions: object) -> tuple[float, float, float]:
    """``data.source.split_fractions`` as three floats; :class:`ConfigError` unless three shares >= 0 summing to 1."""
    listed = isinstance(fractions, Sequence) and not isinstance(fractions, str)
    if not (
        listed
        and len(fractions) == 3
        and all(isinstance(f, int | float) and not isinstance(f, bool) and f >= 0 for f in fractions)
        and abs(sum(fractions) - 1.0) <= 1e-6
    ):
        raise ConfigError(
            "data.source.split_fractions",
            list(fractions) if listed else fractions,
            "must be three shares (train, valid, test), each >= 0, summing to 1, e.g. [0.8, 0.1, 0.1]",
        )
    return tuple(float(f) for f in fractions)


def seeded_split(num_rows: int, seed: int, fractions: Sequence[float] = (0.8, 0.1)) -> dict[str, np.ndarray]:
    """A fixed random train/valid/test split of ``num_rows`` rows (sorted row ids per split)."""
    order = np.random.default_rng(seed).permutation(num_rows)
    n_train, n_valid = int(fractions[0] * num_rows), int(fractions[1] * num_rows)
    parts = np.split(order, [n_train, n_train + n_valid])
    return {name: np.sort(rows) for name, rows in zip(("train", "valid", "test"), parts)}
