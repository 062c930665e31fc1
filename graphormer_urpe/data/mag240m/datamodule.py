"""LightningDataModule for MAG240M node classification on subgraphs sampled in the DataLoader workers; target
papers go through the shared loaders (:mod:`graphormer_urpe.data.loaders`), keyed by epoch as well."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.data.loaders import (
    EvalShardSampler,
    GlobalBatchSampler,
    eval_loader,
    train_loader,
    warn_if_not_published,
)
from graphormer_urpe.data.lsc_formats import MAG240M
from graphormer_urpe.data.mag240m.derived import MANIFEST, MAG240MGraph, prepare_derived
from graphormer_urpe.data.mag240m.release import FEATURE_DIM, RELATIONS, MAG240MRaw, NodeType
from graphormer_urpe.data.mag240m.sampler import CompactGraphBatch, SubgraphCollator
from graphormer_urpe.data.predictable import SplitRows
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import ConfigError, check_int

log = logging.getLogger(__name__)


@dataclass
class TargetPapers(Dataset):
    """The target papers of one split; items are ``(epoch, paper id)`` for the collator."""

    papers: np.ndarray

    def __len__(self) -> int:
        return len(self.papers)

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, int]:
        epoch, position = key
        return epoch, int(self.papers[position])


class TrainingTargets(GlobalBatchSampler):
    """The shared global-batch order, each position tagged ``(epoch, position)``: new subgraphs every epoch."""

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        return ((epoch, position) for position in super().__iter__())


class EvaluationTargets(EvalShardSampler):
    """This process's contiguous shard, tagged ``(0, position)``: the same subgraphs at every evaluation."""

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((0, position) for position in super().__iter__())


class MAG240MDataModule(pl.LightningDataModule):
    """MAG240M: preprocesses once (CSR, author/institution features), then samples subgraphs.

    Args:
        root: dataset root holding ``mag240m_kddcup2021/``.
        batch_size: target papers per optimiser step over all devices (the global batch).
        fanouts: neighbours drawn per node at each hop (OGB-LSC baseline: ``[25, 15]``).
        num_workers: DataLoader workers per process; sampling runs in them.
        seed: seed of the training order (``seed + epoch``) and of the sampling (with epoch and target papers).
        num_classes: classes in ``meta.pt`` (153 for the release; checked in ``setup``).
        cache_dir: where derived files go (default ``ROOT/mag240m_kddcup2021/graphormer``).
        verify_checksums: recompute every derived file's CRC32 at start-up (else only for changed files).
        eval_batch_size: target papers per evaluation step over all devices (default: batch_size).
        handover_slots: shared-memory slots per worker to build batches in (/dev/shm holds about 1.25 * slots *
            workers batches); 0: none, PyTorch copies each batch into new shared memory.
    """

    #: Size-aware batching (``GraphDataModule.bucket_window``): none, the subgraphs are sampled per batch.
    bucket_window = 0

    def __init__(
        self,
        root: str = "data",
        batch_size: int = 1024,
        fanouts: Sequence[int] = (25, 15),
        num_workers: int = 8,
        seed: int = 0,
        num_classes: int = 153,
        cache_dir: str | None = None,
        verify_checksums: bool = False,
        eval_batch_size: int | None = None,
        handover_slots: int = 4,
    ) -> None:
        super().__init__()
        check_int("data.batch_size", batch_size, 1)
        if eval_batch_size is not None:
            check_int("data.eval_batch_size", eval_batch_size, 1, hint=", or null (data.batch_size)")
        if isinstance(fanouts, str) or not isinstance(fanouts, Sequence):
            raise ConfigError(
                "data.fanouts",
                fanouts,
                "must be a list of neighbours per hop, e.g. [25, 15] ([]: the target paper alone)",
            )
        for hop, fanout in enumerate(fanouts):
            check_int(f"data.fanouts[{hop}]", fanout, 1)
        check_int("data.num_workers", num_workers, 0)
        check_int("data.num_classes", num_classes, 2)
        check_int("data.handover_slots", handover_slots, 0, hint=" (0: no shared-memory slots)")
        self.root = Path(root).expanduser()
        self.raw = MAG240MRaw(self.root)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.fanouts = list(fanouts)
        self.num_workers = num_workers
        self.seed = seed
        self.num_classes = num_classes
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else self.raw.directory / "graphormer"
        #: The option that chose :attr:`cache_dir`, named when it cannot be written.
        self.cache_dir_key, cache_option = ("data.cache_dir", cache_dir) if cache_dir else ("data.root", root)
        if (read_only := unwritable(self.cache_dir)) is not None and not (self.cache_dir / MANIFEST).is_file():
            raise ConfigError(
                self.cache_dir_key,
                cache_option,
                f"{read_only} is not writable, and MAG240M's derived "
                f"files must be built in {self.cache_dir} (set data.cache_dir to a writable directory, "
                "or build them once where it is writable)",
            )
        self.verify_checksums = verify_checksums
        self.handover_slots = handover_slots
        self._prepared = False
        self.graph: MAG240MGraph | None = None
        self.splits: dict[str, np.ndarray] = {}
        self.predict_split = "test-dev"
        #: Seconds this process spent building derived files (0.0 when it found them all built).
        self.preprocessing_seconds = 0.0

    @property
    def spec(self) -> DataSpec:
        """Node type, six relations, 768 continuous paper features, one class per target paper; OGB-LSC submission."""
        return DataSpec(
            node_vocab=(len(NodeType),),
            edge_vocab=(len(RELATIONS),),
            num_targets=1,
            num_outputs=self.num_classes,
            continuous_node_dim=FEATURE_DIM,
            target_level="target_node",
            target_kind="multiclass",
            submission=MAG240M,
        )

    # -- data
    def prepare_data(self) -> None:
        """Check the release and build (or finish, or repair) the derived files, once per process."""
        if self._prepared:
            return
        started, manifest = time.perf_counter(), self.cache_dir / MANIFEST
        before = manifest.read_bytes() if manifest.is_file() else None
        self.raw.check()
        prepare_derived(self.raw, self.cache_dir, verify_checksums=self.verify_checksums, key=self.cache_dir_key)
        if manifest.read_bytes() != before:  # something was built
            self.preprocessing_seconds = time.perf_counter() - started
        self._prepared = True

    def setup(self, stage: str | None = None) -> None:
        """Map the graph, read the splits, say how big everything is."""
        if self.graph is not None:
            return
        self.raw.check()
        meta = self.raw.meta
        if meta["num_classes"] != self.num_classes:
            raise ValueError(
                f"{self.raw.directory / 'meta.pt'} has {meta['num_classes']} classes but "
                f"data.num_classes={self.num_classes}; set --data.num_classes {meta['num_classes']}"
            )
        self.graph = MAG240MGraph(self.raw.directory, self.cache_dir, {t: meta[t.name.lower()] for t in NodeType})
        split = self.raw.splits()
        self.splits = {name: split[name] for name in ("train", "valid", "test-dev", "test-challenge")}
        for name in ("train", "valid"):  # the labelled splits: a bad label would stop training midway
            labels = self.graph.labels(self.splits[name])
            bad = np.flatnonzero(np.isnan(labels) | (labels >= self.num_classes) | (labels != np.round(labels)))
            if len(bad):
                paper = int(self.splits[name][bad[0]])
                raise ValueError(
                    f"{self.raw.directory / 'processed/paper/node_label.npy'}: {len(bad)} {name} papers "
                    f"have no valid label in 0..{self.num_classes - 1} (first: paper {paper}, "
                    f"label {self.raw.paper_labels[paper]})"
                )
        sizes = self.split_sizes
        log.info(
            "MAG240M (%s): %s papers, %s authors, %s institutions; splits %s; fanouts %s; %d workers, "
            "%d shared-memory slots each",
            self.raw.directory,
            f"{meta['paper']:,}",
            f"{meta['author']:,}",
            f"{meta['institution']:,}",
            ", ".join(f"{k} {v:,}" for k, v in sizes.items()),
            self.fanouts,
            self.num_workers,
            self.handover_slots,
        )
        warn_if_not_published(
            "MAG240M", sizes, MAG240M.official_sizes, "this is not the OGB-LSC release (a synthetic graph?)"
        )

    @property
    def split_sizes(self) -> dict[str, int]:
        """Papers per split (after setup); no labelled ``test`` split: its labels are hidden."""
        return {name: len(ids) for name, ids in self.splits.items()}

    def describe(self) -> dict:
        """Dataset, directories, split sizes and sampling settings (after setup)."""
        return {
            "source": "MAG240M",
            "root": str(self.raw.directory),
            "cache": str(self.cache_dir),
            "splits": self.split_sizes,
            "fanouts": self.fanouts,
            "batch_size": self.batch_size,
            "handover_slots": self.handover_slots,
        }

    def identity(self) -> dict:
        """Which data these are, as checkpoints record it: the class and the options that decide the examples."""
        return {
            "datamodule": f"{type(self).__module__}.{type(self).__qualname__}",
            "fanouts": self.fanouts,
            "seed": self.seed,
            "num_classes": self.num_classes,
        }

    def split_rows(self, split: str) -> SplitRows:
        """Paper ids of ``split`` in the official order, each its own item (batch ``index``); NaN labels if hidden."""
        papers = self._split(split)
        return SplitRows(rows=papers, items=papers, targets=self.graph.labels(papers)[:, None], skipped={})

    def training_mean(self) -> None:
        """None: every paper has an example, so no row of a split is ever skipped."""
        return None

    def predict_on(self, split: str) -> None:
        """Choose the split ``predict_dataloader`` serves (``train``, ``valid``, ``test-dev``, ``test-challenge``)."""
        self.predict_split = split

    def _split(self, split: str) -> np.ndarray:
        if split not in self.splits:
            raise ValueError(f"unknown split '{split}'; expected one of {sorted(self.splits)}")
        return self.splits[split]

    def _collator(self) -> SubgraphCollator:
        return SubgraphCollator(self.graph, self.fanouts, self.seed, slots=self.handover_slots)

    def train_dataloader(self) -> DataLoader:
        """Shuffled global batches (this process's slice), resumable mid-epoch, new subgraphs each epoch; unpinned."""
        return train_loader(
            TargetPapers(self._split("train")),
            self.batch_size,
            self.trainer,
            self._collator(),
            self.num_workers,
            seed=self.seed,
            sampler_type=TrainingTargets,
            pin_memory=False,
        )

    def _eval_loader(self, split: str) -> DataLoader:
        return eval_loader(
            TargetPapers(self._split(split)),
            self.eval_batch_size,
            self.trainer,
            self._collator(),
            self.num_workers,
            sampler_type=EvaluationTargets,
            pin_memory=False,
        )

    def val_dataloader(self) -> DataLoader:
        """This process's contiguous shard of ``valid``; the same subgraphs at every evaluation."""
        return self._eval_loader("valid")

    def predict_dataloader(self) -> DataLoader:
        """This process's contiguous shard of the split chosen by :meth:`predict_on`."""
        return self._eval_loader(self.predict_split)

    def on_after_batch_transfer(self, batch: CompactGraphBatch, dataloader_idx: int) -> GraphBatch:
        """Pad the workers' batch into the model's input on its device; give the worker's slot back."""
        padded = batch.pad()
        batch.release()
        return padded
