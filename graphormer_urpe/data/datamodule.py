"""One LightningDataModule for every graph-level dataset: cache, splits, loaders."""

from __future__ import annotations

import functools
import logging
import math
import os
from functools import cached_property
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset

from graphormer_urpe.data.batch import BatchShape, GraphRecord, collate_graphs
from graphormer_urpe.data.cache import (
    MANIFEST,
    BuildSummary,
    CacheSpec,
    GraphStore,
    build_store,
    cache_problem,
    exclusive_build,
)
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.data.loaders import (
    eval_loader,
    per_device_batch_size,
    process_grid,
    train_loader,
    warn_if_not_published,
)
from graphormer_urpe.data.predictable import SplitRows
from graphormer_urpe.data.sources.base import GraphSource
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import MAX_NODES, PathOrder, check_path_order
from graphormer_urpe.errors import ConfigError, DataError, check_int

log = logging.getLogger(__name__)


class GraphDataset(Dataset):
    """The graphs of one split (``indices``: their graph indices), read from the memory-mapped cache."""

    def __init__(self, store: GraphStore, indices: np.ndarray) -> None:
        self.store = store
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> GraphRecord:
        return self.store.record(int(self.indices[i]))

    @property
    def sizes(self) -> np.ndarray:
        """(len,) node count of every graph, what size-aware batching sorts by."""
        return self.store.num_nodes[self.indices]

    @property
    def edges_per_node(self) -> int:
        """The largest ratio of directed edges to nodes of these graphs, rounded up (at least 1): what bounds the
        edges of a batch padded to a node count (:class:`~graphormer_urpe.data.batch.BatchShape`)."""
        ratios = self.store.num_edges[self.indices] / np.maximum(self.sizes, 1)
        return max(1, math.ceil(float(ratios.max(initial=0.0))))


class GraphDataModule(pl.LightningDataModule):
    """Preprocesses a :class:`GraphSource` once into a cache and serves padded batches; nothing is read or built
    until ``prepare_data``/``setup``.

    Example:
        >>> from graphormer_urpe.data.sources import ZINC
        >>> data = GraphDataModule(ZINC(subset=True), root="data", batch_size=128)
        >>> data.spec.node_vocab, data.spec.edge_vocab, data.spec.readout  # the CLI links data.spec into the model
        ((28,), (4,), 'graph_token')

    Args:
        source: the dataset (``ZINC``, ``QM9`` ...).
        root: dataset root directory.
        batch_size: graphs per optimiser step over all devices (the global batch); each of W processes loads 1/W.
        num_workers: DataLoader worker processes.
        preprocess_workers: processes for the one-off preprocessing; None: every core this process may run on.
        chunk_size: source rows per cache chunk.
        max_nodes: graphs with more nodes are skipped and counted when the cache is built (at most 32,767).
        prepare_per_node: build the cache on every node (``root`` on node-local disks), not once on global rank 0.
        path_order: the shortest paths of the edge encoding: ``smallest_next`` or ``official`` (imported checkpoints).
        bucket_window: size-aware batching (``docs/throughput.md``): global batches sorted together by size; 0: off.
        pad_nodes_to: pad every training batch to a node count that is a multiple of this, to its full number of
            graphs and to a fixed number of edges, so that a compiled step sees one shape per multiple
            (``docs/throughput.md``, "A compiled step"); 1: off, each batch padded to its largest graph only. At
            most ``max_nodes``: a larger multiple would pad every batch beyond any graph the data may hold.
    """

    def __init__(
        self,
        source: GraphSource,
        root: str = "data",
        batch_size: int = 256,
        num_workers: int = 2,
        preprocess_workers: int | None = None,
        chunk_size: int = 10_000,
        max_nodes: int = 512,
        prepare_per_node: bool = False,
        path_order: PathOrder = "smallest_next",
        bucket_window: int = 0,
        pad_nodes_to: int = 1,
    ) -> None:
        super().__init__()
        check_int("data.batch_size", batch_size, 1)
        check_int("data.num_workers", num_workers, 0)
        if preprocess_workers is not None:
            check_int("data.preprocess_workers", preprocess_workers, 0, hint=" (0: in this process), or null")
        check_int("data.chunk_size", chunk_size, 1)
        check_int("data.max_nodes", max_nodes, 1, MAX_NODES)
        check_path_order(path_order, "data.path_order")
        check_int("data.bucket_window", bucket_window, 0, hint=" (0: off, else a number of global batches, e.g. 100)")
        check_int(
            "data.pad_nodes_to",
            pad_nodes_to,
            1,
            max_nodes,
            hint=" (1: off, else a node count such as 8; at most data.max_nodes, the largest graph the data may hold)",
        )
        self.prepare_data_per_node = prepare_per_node  # Lightning: who calls prepare_data; the rest wait
        self.source = source
        self.root = Path(root).expanduser()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.preprocess_workers = available_cores() if preprocess_workers is None else preprocess_workers
        self.chunk_size = chunk_size
        self.max_nodes = max_nodes
        self.path_order = path_order
        self.bucket_window = bucket_window
        self.pad_nodes_to = pad_nodes_to
        if (read_only := unwritable(self.root)) is not None and not (self.cache_dir / MANIFEST).is_file():
            raise ConfigError(
                "data.root",
                root,
                f"{read_only} is not writable, and the cache must be built there "
                "(choose a writable data.root, or build the cache once where it is writable)",
            )
        self.datasets: dict[str, GraphDataset] = {}
        self.predict_split = "test"  # served by predict_dataloader (predict_on)
        # what building the cache did here; None: it was found built
        self.build_summary: BuildSummary | None = None

    @property
    def spec(self) -> DataSpec:
        """What the data is (the source's :class:`~graphormer_urpe.data.spec.DataSpec`), linked into the model."""
        return self.source.spec

    @cached_property
    def cache_spec(self) -> CacheSpec:
        """What every cached graph looks like: the data's spec and this module's cache options."""
        return CacheSpec(self.spec, self.max_nodes, self.path_order)

    @cached_property
    def _cache_name_and_key(self) -> tuple[str, dict]:
        return self.source.cache_key(self.cache_spec.key())

    @property
    def cache_key(self) -> dict:
        """Everything the cache depends on (stored in its manifest)."""
        return self._cache_name_and_key[1]

    def identity(self) -> dict:
        """Which data these are, as checkpoints record it: the :attr:`cache_key`."""
        return self.cache_key

    @property
    def eval_batch_size(self) -> int:
        """Graphs per evaluation step over all devices: the training batch's."""
        return self.batch_size

    @property
    def cache_dir(self) -> Path:
        """``ROOT/<dataset>/graphormer/<name>-<key hash>``."""
        return self.root / self.source.name / "graphormer" / self._cache_name_and_key[0]

    def prepare_data(self) -> None:
        """Check or fetch the raw files, then build (or finish, or repair) the cache once, under a file lock.
        A valid cache needs no raw files: it is used as it is (a machine may be given the cache alone)."""
        if self._cache_is_valid():
            return
        self.source.ensure_raw(self.root)
        with exclusive_build(self.cache_dir):
            if not self._cache_is_valid():  # another job may have built it while we waited
                self._build_cache()

    def _build_cache(self) -> None:
        log.info("preprocessing %s into %s with %d workers", self.source.name, self.cache_dir, self.preprocess_workers)
        reader = self.source.open(self.root)
        self.build_summary = build_store(
            reader,
            self.cache_dir,
            self.cache_key,
            self.cache_spec,
            self.source.splits(self.root, reader),
            num_workers=self.preprocess_workers,
            chunk_size=self.chunk_size,
            description=f"preprocessing {self.source.name}",
        )

    def _cache_is_valid(self) -> bool:
        """Whether the cache is intact; a damaged one is named and loses its manifest, so it is rebuilt."""
        manifest_path = self.cache_dir / MANIFEST
        if not manifest_path.is_file():
            return False
        if (problem := cache_problem(self.cache_dir, self.cache_key, chunks=False)) is not None:
            log.warning("%s; the cache will be rebuilt", problem)
        elif cache_problem(self.cache_dir, self.cache_key) is None:
            return True
        manifest_path.unlink()  # a damaged chunk is named by the rebuild, once per chunk
        return False

    def setup(self, stage: str | None = None) -> None:
        """Open the cache and the splits; say how big they are."""
        if self.datasets:
            return
        if not (self.cache_dir / MANIFEST).is_file():
            raise FileNotFoundError(
                f"{self.cache_dir} holds no complete cache on this machine; if data.root is not "
                "shared by all nodes, set --data.prepare_per_node true so that every node builds "
                "its own"
            )
        store = GraphStore(self.cache_dir)
        manifest = store.manifest
        if manifest["skipped"]:
            per_split = ", ".join(f"{k} {v}" for k, v in manifest["skipped_by_split"].items() if v)
            log.warning(
                "%s: %d of %d rows were skipped while preprocessing (%s; first: %s)",
                self.source.origin(),
                manifest["skipped"],
                manifest["rows"],
                per_split,
                manifest["skipped_examples"][:3],
            )
        datasets = {name: GraphDataset(store, idx) for name, idx in store.split_indices().items()}
        sizes = {name: len(ds) for name, ds in datasets.items()}
        if stage in ("fit", None) and sizes.get("train") == 0:
            raise DataError(
                f"{self.source.origin()}: no training graph is left, every one of its rows was skipped "
                f"while preprocessing (first: {manifest['skipped_examples'][:3]}); check the data, or "
                f"data.max_nodes={self.max_nodes}"
            )
        self.datasets = datasets
        log.info("%s splits: %s", self.source.name, ", ".join(f"{k} {v:,}" for k, v in sizes.items()))
        if stage in ("fit", None) and "train" in datasets and self.spec.target_kind == "regression":
            self.warn_if_constant_targets()
        warn_if_not_published(self.source.name, sizes, self.source.published_split_sizes or {})

    @property
    def split_sizes(self) -> dict[str, int]:
        """Graphs per split (after setup)."""
        return {name: len(ds) for name, ds in self.datasets.items()}

    def describe(self) -> dict:
        """Dataset name, options, cache directory and split sizes (after setup)."""
        return {
            "source": type(self.source).__name__,
            **self.source.options(),
            "cache": str(self.cache_dir),
            "splits": self.split_sizes,
            "batch_size": self.batch_size,
            "bucket_window": self.bucket_window,
        }

    def target_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """(Y,) float64 mean and standard deviation of the training targets (of every node for per-node
        targets), NaNs ignored; float64 because the squares of float32 targets above ~1e19 overflow float32."""
        train = self.datasets["train"]
        targets = train.store.targets(train.indices).astype(np.float64)
        known = np.isfinite(targets).sum(axis=0)
        if (known == 0).any():
            name = self.spec.target_names[int(np.argmin(known))]
            raise DataError(
                f"{self.source.origin()}: target '{name}' has no known value in the training split, "
                "so it cannot be normalised or learned"
            )
        return np.nanmean(targets, axis=0), np.maximum(np.nanstd(targets, axis=0), 1e-6)

    def warn_if_constant_targets(self) -> None:
        """Say so, in one line, when a regression target has one value in the whole training split: the model can
        only learn that constant, and its error is 0 wherever the target has it (a figure that says nothing)."""
        train = self.datasets["train"]
        targets = train.store.targets(train.indices).astype(np.float64).reshape(-1, len(self.spec.target_names))
        constant = []
        for name, values in zip(self.spec.target_names, targets.T):
            values = values[np.isfinite(values)]
            if len(values) and values.min() == values.max():
                constant.append(f"'{name}' is {values[0]:g} in all {len(values):,} training values")
        if constant:
            log.warning(
                "%s: target %s: a model of it learns only that constant, and its error is 0 wherever the "
                "target has that value; check the target (data.source.targets)",
                self.source.origin(),
                "; ".join(constant),
            )

    def molecule_feature_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """(M,) float64 mean and standard deviation that standardise the molecule-level features: the training
        split's for the table's feature columns (NaNs ignored), 0 and 1 for descriptors (already on one scale)."""
        # imported here: the module needs RDKit, which datasets without molecule features never load
        from graphormer_urpe.data.sources.molecule_features import feature_statistics

        train = self.datasets["train"]
        try:
            return feature_statistics(self.spec.molecule_features, train.store.molecule_features(train.indices))
        except ValueError as error:
            raise DataError(f"{self.source.origin()}: {error}") from None

    def _split(self, split: str) -> GraphDataset:
        if split not in self.datasets:
            raise ValueError(f"{self.source.name} has no split '{split}'; its splits are {', '.join(self.datasets)}")
        return self.datasets[split]

    def train_dataloader(self) -> DataLoader:
        """Shuffled global batches, this process's slice of each; resumable mid-epoch."""
        train = self._split("train")
        return train_loader(
            train,
            self.batch_size,
            self.trainer,
            functools.partial(collate_graphs, shape=self.shape()),
            self.num_workers,
            sizes=train.sizes,
            bucket_window=self.bucket_window,
        )

    def shape(self) -> BatchShape | None:
        """The shape training batches are padded to (``pad_nodes_to``), None when off."""
        if self.pad_nodes_to == 1:
            return None
        world, _ = process_grid(self.trainer)
        return BatchShape(
            node_multiple=self.pad_nodes_to,
            graphs=per_device_batch_size(self.batch_size, world),
            edges_per_node=self._split("train").edges_per_node,
        )

    def val_dataloader(self) -> DataLoader:
        """This process's exact, unpadded shard of the validation split."""
        return self._eval_loader("valid")

    def test_dataloader(self) -> DataLoader:
        """This process's exact, unpadded shard of the test split."""
        return self._eval_loader("test")

    def _eval_loader(self, split: str) -> DataLoader:
        dataset = self._split(split)
        return eval_loader(
            dataset,
            self.batch_size,
            self.trainer,
            collate_graphs,
            self.num_workers,
            sizes=dataset.sizes if self.bucket_window else None,
        )

    def predict_dataloader(self) -> DataLoader:
        """This process's exact, unpadded shard of the split chosen by :meth:`predict_on`."""
        return self._eval_loader(self.predict_split)

    def predict_on(self, split: str) -> None:
        """Choose the split ``predict_dataloader`` serves (this and what follows: ``PredictableData``)."""
        self.predict_split = split

    @property
    def preprocessing_seconds(self) -> float:
        """Seconds this process spent building the cache (0.0 when it found a valid one)."""
        return self.build_summary.seconds if self.build_summary is not None else 0.0

    def training_mean(self) -> np.ndarray:
        """(Y,) float64 mean of the training targets, what a submission predicts for skipped rows."""
        return self.target_statistics()[0]

    def split_rows(self, split: str) -> SplitRows:
        """The source rows of ``split`` in order, skipped rows included (no graph, NaN targets, their reason)."""
        store = self._split(split).store
        rows = store.split_rows()[split]
        graphs = store.graphs_of_rows(rows)
        cached = graphs >= 0
        targets = store.targets()
        target_of_row = np.full((len(rows), targets.shape[1]), np.nan, dtype=np.float32)
        target_of_row[cached] = targets[graphs[cached]]
        reasons = store.skipped_rows()
        return SplitRows(
            rows=rows,
            items=graphs,
            targets=target_of_row,
            skipped={int(r): reasons.get(int(r), "not in the cache") for r in rows[~cached]},
        )


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a SLURM allocation), at least 1."""
    return max(1, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
