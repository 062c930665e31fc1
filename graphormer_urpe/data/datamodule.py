"""One LightningDataModule for every graph-level dataset: cache, splits, loaders."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset

from graphormer_urpe.data.batch import GraphRecord, collate_graphs
from graphormer_urpe.data.cache import MANIFEST, GraphSpec, GraphStore, build_store, chunk_problem
from graphormer_urpe.data.sources.base import GraphSource

log = logging.getLogger(__name__)


def per_device_batch_size(batch_size: int, trainer: pl.Trainer | None) -> int:
    """The global ``batch_size`` divided over the trainer's processes (all of it without a trainer)."""
    world = trainer.world_size if trainer is not None else 1
    if batch_size % world:
        raise ValueError(f"batch_size={batch_size} is not divisible by the {world} processes")
    return batch_size // world


class GraphDataset(Dataset):
    """The graphs of one split, read from the memory-mapped cache.

    Args:
        store: the cache.
        indices: graph indices of the split.
    """

    def __init__(self, store: GraphStore, indices: np.ndarray) -> None:
        self.store = store
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> GraphRecord:
        return self.store.record(int(self.indices[i]))


class GraphDataModule(pl.LightningDataModule):
    """Preprocesses a :class:`GraphSource` once into a cache and serves padded batches.

    Args:
        source: the dataset (``ZINC``, ``QM9Gap`` ...).
        root: dataset root directory.
        batch_size: graphs per optimiser step over all devices (the global batch); each of the
            W processes loads ``batch_size / W``.
        num_workers: DataLoader worker processes.
        preprocess_workers: processes for the one-off preprocessing; None uses every core.
        chunk_size: source rows per cache chunk.
        max_nodes: graphs with more nodes are skipped and counted when the cache is built.
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
    ) -> None:
        super().__init__()
        self.source = source
        self.root = Path(root)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.preprocess_workers = (os.cpu_count() or 1) if preprocess_workers is None else preprocess_workers
        self.chunk_size = chunk_size
        self.spec = GraphSpec(source.node_vocab, source.edge_vocab, source.num_targets, max_nodes)
        cache_name, self.cache_key = source.cache_key({"max_nodes": max_nodes})
        self.cache_dir = self.root / source.name / "graphormer" / cache_name
        self.datasets: dict[str, GraphDataset] = {}

    @property
    def node_vocab(self) -> list[int]:
        """Values per node-feature column (linked to the model's config)."""
        return list(self.source.node_vocab)

    @property
    def edge_vocab(self) -> list[int]:
        """Values per edge-feature column (linked to the model's config)."""
        return list(self.source.edge_vocab)

    @property
    def num_targets(self) -> int:
        """Targets per graph (linked to the model's output width)."""
        return self.source.num_targets

    def prepare_data(self) -> None:
        """Check or fetch the raw files, then build (or finish, or repair) the cache once."""
        self.source.ensure_raw(self.root)
        if self._cache_is_valid():
            return
        log.info("preprocessing %s into %s with %d workers", self.source.name, self.cache_dir, self.preprocess_workers)
        reader = self.source.open(self.root)
        summary = build_store(
            reader, self.cache_dir, self.cache_key, self.spec, self.source.splits(self.root, reader),
            num_workers=self.preprocess_workers, chunk_size=self.chunk_size,
            description=f"preprocessing {self.source.name}",
        )
        log.info(
            "%s: %d graphs cached, %d rows skipped%s, %.1f s",
            self.source.name, summary.graphs, len(summary.skipped),
            f" (first: {summary.skipped[:3]})" if summary.skipped else "", summary.seconds,
        )

    def _cache_is_valid(self) -> bool:
        """Whether the cache is complete and intact; a damaged one loses its manifest and is repaired."""
        manifest_path = self.cache_dir / MANIFEST
        if not manifest_path.is_file():
            return False
        for name in json.loads(manifest_path.read_text())["chunks"]:
            problem = chunk_problem(self.cache_dir / name)
            if problem is not None:
                log.warning("%s/%s: %s; it will be rebuilt", self.cache_dir, name, problem)
                manifest_path.unlink()
                return False
        return True

    def setup(self, stage: str | None = None) -> None:
        """Open the cache and the splits; say how big they are."""
        if self.datasets:
            return
        store = GraphStore(self.cache_dir)
        manifest = store.manifest
        if manifest["skipped"]:
            log.warning(
                "%s: %d of %d rows were skipped while preprocessing (first: %s)",
                self.source.name, manifest["skipped"], manifest["rows"], manifest["skipped_examples"][:3],
            )
        self.datasets = {name: GraphDataset(store, idx) for name, idx in store.split_indices().items()}
        sizes = {name: len(ds) for name, ds in self.datasets.items()}
        log.info("%s splits: %s", self.source.name, ", ".join(f"{k} {v:,}" for k, v in sizes.items()))
        published = self.source.published_split_sizes
        if published and any(sizes.get(k) != v for k, v in published.items()):
            log.warning(
                "!!! %s split sizes %s differ from the published %s: results are not comparable with the papers !!!",
                self.source.name, sizes, dict(published),
            )

    @property
    def split_sizes(self) -> dict[str, int]:
        """Graphs per split (after setup)."""
        return {name: len(ds) for name, ds in self.datasets.items()}

    def describe(self) -> dict:
        """Dataset name, options, cache directory and split sizes (after setup)."""
        return {"source": type(self.source).__name__, **self.source.options(), "cache": str(self.cache_dir),
                "splits": self.split_sizes, "batch_size": self.batch_size}

    def target_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """(Y,) mean and standard deviation of the training targets, NaNs ignored."""
        train = self.datasets["train"]
        targets = train.store.targets()[train.indices]
        return np.nanmean(targets, axis=0), np.maximum(np.nanstd(targets, axis=0), 1e-6)

    def per_device_batch_size(self) -> int:
        """``batch_size`` divided over the processes, so the optimiser always sees the global batch."""
        return per_device_batch_size(self.batch_size, self.trainer)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.datasets[split],
            batch_size=self.per_device_batch_size(),
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=collate_graphs,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
