"""LightningDataModule for MAG240M node classification on subgraphs sampled in the DataLoader workers."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.lsc_formats import MAG240M, SubmissionFormat
from graphormer_urpe.data.mag240m.batch import CompactGraphBatch
from graphormer_urpe.data.mag240m.release import (
    DATASET_DIR,
    FEATURE_DIM,
    PUBLISHED_SPLIT_SIZES,
    RELATIONS,
    MAG240MGraph,
    MAG240MRaw,
    NodeType,
    prepare_derived,
)
from graphormer_urpe.data.mag240m.sampler import SubgraphCollator

log = logging.getLogger(__name__)

#: Splits that have labels; ``test-dev`` and ``test-challenge`` are hidden and only predicted.
LABELLED_SPLITS = ("train", "valid")


class TargetPapers(Dataset):
    """The target papers of one split; items are ``(epoch, paper id)`` for the collator.

    Args:
        papers: paper ids.
    """

    def __init__(self, papers: np.ndarray) -> None:
        self.papers = papers

    def __len__(self) -> int:
        return len(self.papers)

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, int]:
        epoch, position = key
        return epoch, int(self.papers[position])


class ShardedTargetSampler(DistributedSampler):
    """This process's shard of a split as ``(epoch, position)`` items.

    Training shards are reshuffled every epoch (seeded), padded to equal length as DDP needs, and
    tagged with the epoch so that subgraphs are resampled. Evaluation shards keep the split's
    order, are not padded (every target is evaluated exactly once) and are always tagged epoch 0,
    so evaluation sees the same subgraphs whenever it runs. Lightning calls :meth:`set_epoch`
    every epoch and leaves a ``DistributedSampler`` in place.

    Args:
        dataset: the split.
        num_replicas: processes (world size).
        rank: this process.
        train: training (shuffle, pad, new subgraphs each epoch) or evaluation.
        seed: shuffling seed.
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, train: bool, seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=train, seed=seed)
        self.train = train

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.train:
            return ((self.epoch, position) for position in super().__iter__())
        return ((0, position) for position in range(self.rank, len(self.dataset), self.num_replicas))

    def __len__(self) -> int:
        return self.num_samples if self.train else len(range(self.rank, len(self.dataset), self.num_replicas))


class MAG240MDataModule(pl.LightningDataModule):
    """MAG240M: preprocesses once (CSR, author/institution features), then samples subgraphs.

    Args:
        root: dataset root holding ``mag240m_kddcup2021/``.
        batch_size: target papers per optimiser step over all devices (the global batch).
        fanouts: neighbours drawn per node at each hop (OGB-LSC baseline: ``[25, 15]``).
        num_workers: DataLoader workers per process; sampling runs in them.
        seed: sampling seed (subgraphs depend on seed, epoch and batch).
        num_classes: classes in ``meta.pt`` (153 for the release; checked in ``setup``).
        cache_dir: where derived files go (default ``ROOT/mag240m_kddcup2021/graphormer``).
        verify_checksums: recompute the CRC32 of every derived file at start-up (otherwise only
            for files whose size or modification time changed since they were built).
        eval_batch_size: target papers per evaluation step over all devices (default: batch_size).
        handover_slots: shared-memory slots per worker that batches are built in and reused from
            (:class:`~graphormer_urpe.data.mag240m.slots.SlotRing`; /dev/shm holds about
            ``1.25 * slots * workers`` batches); 0: PyTorch's copy into new shared memory per batch.
    """

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
        self.raw = MAG240MRaw(root)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.fanouts = list(fanouts)
        self.num_workers = num_workers
        self.seed = seed
        self.num_classes = num_classes
        self.cache_dir = Path(cache_dir) if cache_dir else self.raw.directory / "graphormer"
        self.verify_checksums = verify_checksums
        if handover_slots < 0:
            raise ValueError(f"handover_slots must be >= 0, got {handover_slots}")
        self.handover_slots = handover_slots
        self._prepared = False
        self.graph: MAG240MGraph | None = None
        self.splits: dict[str, np.ndarray] = {}
        self.predict_split = "test-dev"

    # -- values linked into the model's config
    @property
    def node_vocab(self) -> list[int]:
        """One categorical column: the node type."""
        return [len(NodeType)]

    @property
    def edge_vocab(self) -> list[int]:
        """One categorical column: the relation."""
        return [len(RELATIONS)]

    @property
    def num_targets(self) -> int:
        """Classes (the model's output width)."""
        return self.num_classes

    @property
    def continuous_node_dim(self) -> int:
        """Width of the continuous node features (RoBERTa embeddings)."""
        return FEATURE_DIM

    @property
    def readout(self) -> str:
        """Predictions are read at the target paper."""
        return "target_node"

    @property
    def target_kind(self) -> str:
        """One class label (the arXiv subject) per target paper (linked to the task)."""
        return "multiclass"

    @property
    def submission_format(self) -> SubmissionFormat:
        """How test predictions are submitted (read by ``evaluate.py``)."""
        return MAG240M

    # -- data
    def prepare_data(self) -> None:
        """Check the release and build (or finish, or repair) the derived files, once per process
        (Lightning calls this before fitting, validating and predicting alike)."""
        if self._prepared:
            return
        self.raw.check()
        prepare_derived(self.raw, self.cache_dir, verify_checksums=self.verify_checksums)
        self._prepared = True

    def setup(self, stage: str | None = None) -> None:
        """Map the graph, read the splits, say how big everything is."""
        if self.graph is not None:
            return
        self.raw.check()
        meta = self.raw.meta
        if meta["num_classes"] != self.num_classes:
            raise ValueError(f"{self.raw.directory / 'meta.pt'} has {meta['num_classes']} classes but "
                             f"data.num_classes={self.num_classes}; set --data.num_classes {meta['num_classes']}")
        self.graph = MAG240MGraph(self.raw.directory, self.cache_dir, {t: meta[t.name.lower()] for t in NodeType})
        split = self.raw.splits()
        self.splits = {name: split[name] for name in ("train", "valid", "test-dev", "test-challenge")}
        for name in LABELLED_SPLITS:  # a bad label would stop training midway (cross-entropy index error)
            labels = self.graph.labels(self.splits[name])
            bad = np.flatnonzero(np.isnan(labels) | (labels >= self.num_classes) | (labels != np.round(labels)))
            if len(bad):
                paper = int(self.splits[name][bad[0]])
                raise ValueError(f"{self.raw.directory / 'processed/paper/node_label.npy'}: {len(bad)} {name} papers "
                                 f"have no valid label in 0..{self.num_classes - 1} (first: paper {paper}, "
                                 f"label {self.raw.paper_labels[paper]})")
        sizes = {name: len(ids) for name, ids in self.splits.items()}
        log.info("MAG240M (%s): %s papers, %s authors, %s institutions; splits %s; fanouts %s; %d workers, "
                 "%d shared-memory slots each", self.raw.directory,
                 f"{meta['paper']:,}", f"{meta['author']:,}", f"{meta['institution']:,}",
                 ", ".join(f"{k} {v:,}" for k, v in sizes.items()), self.fanouts, self.num_workers, self.handover_slots)
        if sizes != PUBLISHED_SPLIT_SIZES:
            log.warning("!!! MAG240M split sizes %s differ from the published %s: this is not the OGB-LSC release "
                        "(a synthetic graph?); results are not comparable with the papers !!!",
                        sizes, PUBLISHED_SPLIT_SIZES)

    @property
    def split_sizes(self) -> dict[str, int]:
        """Papers per split (after setup); no labelled ``test`` split: its labels are hidden."""
        return {name: len(ids) for name, ids in self.splits.items()}

    def describe(self) -> dict:
        """Dataset, directories, split sizes and sampling settings (after setup)."""
        return {"source": "MAG240M", "root": str(self.raw.root / DATASET_DIR), "cache": str(self.cache_dir),
                "splits": self.split_sizes, "fanouts": self.fanouts, "batch_size": self.batch_size,
                "handover_slots": self.handover_slots}

    def split_index(self, split: str) -> np.ndarray:
        """Paper ids of ``split`` in the official order (what a submission's rows refer to)."""
        return self.splits[split]

    def predict_on(self, split: str) -> None:
        """Choose the split ``predict_dataloader`` serves (``train``, ``valid``, ``test-dev``, ``test-challenge``)."""
        self.predict_split = split

    def _world(self) -> tuple[int, int]:
        if self.trainer is None:
            return 1, 0
        return self.trainer.world_size, self.trainer.global_rank

    def _loader(self, split: str, train: bool) -> DataLoader:
        world, rank = self._world()
        batch = self.batch_size if train else self.eval_batch_size
        if batch % world:
            raise ValueError(f"batch size {batch} is not divisible by the {world} processes")
        dataset = TargetPapers(self.splits[split])
        return DataLoader(
            dataset,
            batch_size=batch // world,
            sampler=ShardedTargetSampler(dataset, world, rank, train=train, seed=self.seed),
            num_workers=self.num_workers,
            collate_fn=SubgraphCollator(self.graph, self.fanouts, self.seed, slots=self.handover_slots),
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", train=False)

    def on_after_batch_transfer(self, batch: CompactGraphBatch, dataloader_idx: int) -> GraphBatch:
        """Pad the workers' unpadded batch into the model's input, on the device it was moved to
        (cheap on a GPU; the workers copy fewer bytes into shared memory), and give the worker's
        shared-memory slot back (the padded batch is new memory)."""
        padded = batch.pad()
        batch.release()
        return padded

    def predict_dataloader(self) -> DataLoader:
        if self.predict_split not in self.splits:
            raise ValueError(f"unknown split '{self.predict_split}'; expected one of {sorted(self.splits)}")
        return self._loader(self.predict_split, train=False)
