"""How every process picks its graphs: global batches for training, exact unpadded shards for evaluation, an
exact resume, for any number of processes W (``docs/loaders.md``). Both samplers subclass ``DistributedSampler``
so that Lightning leaves them in place."""

from __future__ import annotations

import logging
import math
import os
import signal
from collections.abc import Callable, Iterator, Mapping, Sized
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from graphormer_urpe.data.buckets import bucketed_batches, size_sorted
from graphormer_urpe.errors import ConfigError

log = logging.getLogger(__name__)


#: The signals a run stops on, which its loader workers ignore: SIGTERM and SIGUSR1 (``PreemptionCheckpoint``), SIGINT
#: (Ctrl-C).
WORKER_IGNORED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


def ignore_stop_signals(worker_id: int) -> None:
    """Every loader worker's start (``worker_init_fn``): the signals that stop a run are the main process's to act
    on. A scheduler signals every process of a job (SLURM's time limit and ``scancel``, a ``kill`` of the process
    group, Ctrl-C in a terminal); a PyTorch worker dies of a SIGTERM that does not come from its parent, and the main
    process then fails with "DataLoader worker (pid N) is killed by signal: Terminated" wherever it is, even while it
    writes ``last.ckpt``. Ignoring them, the worker serves batches until the main process, having finished its step
    and saved, shuts it down (a worker also ends when its main process is gone)."""
    for signum in WORKER_IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def process_grid(trainer: pl.Trainer | None) -> tuple[int, int]:
    """``(world_size, global_rank)`` of the current process; ``(1, 0)`` without a trainer."""
    return (1, 0) if trainer is None else (trainer.world_size, trainer.global_rank)


def gather_objects(value: Any) -> list[Any]:
    """``value`` of every process of the process group, in rank order (``[value]`` without one); a collective."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def per_device_batch_size(global_batch: int, world_size: int) -> int:
    """The share of one process; the global batch must divide evenly."""
    if global_batch % world_size:
        divisible = max(world_size, global_batch // world_size * world_size)
        raise ValueError(
            f"batch_size={global_batch} is the global batch and must be divisible by the {world_size} "
            f"processes; use e.g. --data.batch_size {divisible}"
        )
    return global_batch // world_size


class GlobalBatchSampler(DistributedSampler):
    """Shuffled training order (``torch.randperm`` seeded with ``seed + epoch``) padded to a multiple of W by
    repeating its first indices, cut into global batches; process ``rank`` takes the ``rank``-th of W equal slices
    of each. With ``bucket_window`` > 0 the unpadded order is cut by
    :func:`~graphormer_urpe.data.buckets.bucketed_batches` (by the positions' ``sizes``) instead."""

    def __init__(
        self,
        dataset: Sized,
        global_batch: int,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        sizes: np.ndarray | None = None,
        bucket_window: int = 0,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.global_batch = global_batch
        self.local_batch = per_device_batch_size(global_batch, num_replicas)
        self.dataset_size = len(dataset)
        self.sizes = _checked_sizes(sizes, self.dataset_size, bucket_window)
        self.bucket_window = bucket_window
        self.skip_batches = 0  # global batches to skip at the start of the next iteration (resume)

    @property
    def batches_per_epoch(self) -> int:
        """Global batches (optimiser micro-steps) per epoch, the same for every W."""
        return math.ceil(self.total_size / self.global_batch)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The global batches of ``epoch`` in training order (dataset indices)."""
        generator = torch.Generator()
        if self.shuffle:
            order = torch.randperm(self.dataset_size, generator=generator.manual_seed(self.seed + epoch)).tolist()
        else:
            order = list(range(self.dataset_size))
        padding = self.total_size - len(order)  # repeat the first indices up to a multiple of W
        order += (order * math.ceil(padding / max(len(order), 1)))[:padding]
        if self.bucket_window:  # bucket the unpadded order, so that the batches do not depend on W
            batches = [
                b.tolist()
                for b in bucketed_batches(
                    np.asarray(order[: self.dataset_size], dtype=np.int64),
                    self.sizes,
                    self.global_batch,
                    self.bucket_window,
                    generator,
                )
            ]
            if batches:
                batches[-1] += order[self.dataset_size :]  # the repeats that give every process the same count
            return batches
        return [order[start : start + self.global_batch] for start in range(0, self.total_size, self.global_batch)]

    def __iter__(self) -> Iterator[int]:
        batches = self.epoch_batches(self.epoch)
        first, self.skip_batches = self.skip_batches, 0  # a resume position applies once
        for block in batches[first:]:
            share = len(block) // self.num_replicas
            yield from block[self.rank * share : (self.rank + 1) * share]

    def resume(self, epoch: int, batches_done: int) -> None:
        """Make the next iteration start at global batch ``batches_done`` of ``epoch``."""
        if batches_done >= self.batches_per_epoch:  # saved after the last batch of an epoch
            epoch, batches_done = epoch + 1, 0
        self.set_epoch(epoch)
        self.skip_batches = batches_done


class EvalShardSampler(DistributedSampler):
    """Contiguous, unpadded shards ``[r * N // W, (r + 1) * N // W)``, in ascending size given ``sizes``."""

    def __init__(self, dataset: Sized, num_replicas: int = 1, rank: int = 0, sizes: np.ndarray | None = None) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False)
        size = len(dataset)
        if size < num_replicas:
            raise ValueError(
                f"an evaluation split of {size} graphs cannot be shared by {num_replicas} processes "
                "without repeating graphs; evaluate on fewer devices"
            )
        self.start, self.stop = rank * size // num_replicas, (rank + 1) * size // num_replicas
        self.num_samples = self.stop - self.start  # DistributedSampler's len()
        self.sizes = _checked_sizes(sizes, size, 0)

    def __iter__(self) -> Iterator[int]:
        shard = np.arange(self.start, self.stop)
        return iter((shard if self.sizes is None else size_sorted(shard, self.sizes)).tolist())


class ResumableLoader(DataLoader):
    """Training DataLoader whose position, (epoch, global batches handed out), Lightning saves in checkpoints and
    restores on resume. Lightning does not prefetch from loaders with a length, so the count equals the batches
    trained on when a checkpoint is written; workers are started per epoch and seeded from (seed, epoch)."""

    def __init__(
        self,
        dataset: Dataset,
        sampler: GlobalBatchSampler,
        collate_fn: Callable[[list[Any]], Any],
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__(
            dataset,
            batch_size=sampler.local_batch,
            sampler=sampler,
            collate_fn=collate_fn,
            num_workers=num_workers,
            pin_memory=pin_memory,
            generator=torch.Generator(),
            worker_init_fn=ignore_stop_signals,
        )
        self.position = (sampler.epoch, 0)

    def __iter__(self) -> Iterator[Any]:
        sampler: GlobalBatchSampler = self.sampler
        epoch, done = sampler.epoch, sampler.skip_batches
        self.generator.manual_seed(sampler.seed * 1_000_003 + epoch)  # worker seeds: from (seed, epoch) alone
        self.position = (epoch, done)
        return self._counted(super().__iter__(), epoch, done)

    def _counted(self, batches: Iterator[Any], epoch: int, skipped: int) -> Iterator[Any]:
        for done, batch in enumerate(batches, start=skipped + 1):
            self.position = (epoch, done)
            yield batch

    def state_dict(self) -> dict[str, int]:
        """Where the data order stands, plus what it depends on (checked on resume)."""
        sampler: GlobalBatchSampler = self.sampler
        epoch, done = self.position
        return {
            "epoch": epoch,
            "batches_done": done,
            "seed": sampler.seed,
            "dataset_size": sampler.dataset_size,
            "global_batch": sampler.global_batch,
            "bucket_window": sampler.bucket_window,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue the data order of a checkpoint at its next batch."""
        sampler: GlobalBatchSampler = self.sampler
        if problem := resume_problem(state, sampler.global_batch, sampler.bucket_window, sampler.dataset_size):
            raise ValueError(problem)
        if state["seed"] != sampler.seed:
            log.warning("resuming the checkpoint's data order (seed %d), not seed %d", state["seed"], sampler.seed)
            sampler.seed = state["seed"]
        sampler.resume(state["epoch"], state["batches_done"])
        log.info("data order resumed at epoch %d, batch %d", sampler.epoch, sampler.skip_batches)


def resume_problem(
    state: Mapping[str, int], global_batch: int, bucket_window: int, dataset_size: int | None = None
) -> str | None:
    """Why a loader's saved position (:meth:`ResumableLoader.state_dict`) cannot continue with these
    settings, or None. ``dataset_size`` None leaves the training-set size unchecked (before ``setup``)."""
    sizes = (state["dataset_size"], state["global_batch"])
    if sizes[1] != global_batch or (dataset_size is not None and sizes[0] != dataset_size):
        now = "batches" if dataset_size is None else f"{dataset_size} graphs in batches"
        return (
            f"the checkpoint's data order is for {sizes[0]} training graphs in global batches of {sizes[1]}, "
            f"this run has {now} of {global_batch}: the run cannot resume exactly; use the same data and "
            "--data.batch_size, or start a new run"
        )
    saved_window = state.get("bucket_window", 0)  # checkpoints from before bucketing: 0
    if saved_window != bucket_window:
        return (
            f"the checkpoint's data order uses bucket_window={saved_window}, this run {bucket_window}: the run "
            f"cannot resume exactly; set --data.bucket_window {saved_window} or start a new run"
        )
    return None


def train_loader(
    dataset: Dataset,
    global_batch: int,
    trainer: pl.Trainer | None,
    collate_fn: Callable[[list[Any]], Any],
    num_workers: int = 0,
    seed: int | None = None,
    sampler_type: type[GlobalBatchSampler] = GlobalBatchSampler,
    pin_memory: bool = True,
    sizes: np.ndarray | None = None,
    bucket_window: int = 0,
) -> ResumableLoader:
    """The training loader of this process (``trainer`` None: one process; ``seed`` None: the run's
    ``seed_everything``). ``sampler_type``, a :class:`GlobalBatchSampler`, may turn each index into the key its
    dataset expects, e.g. ``(epoch, index)``; ``pin_memory`` applies on CUDA only."""
    world, rank = process_grid(trainer)
    if seed is None:  # the run's seed_everything, which Lightning exports
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
    sampler = sampler_type(dataset, global_batch, world, rank, seed, sizes=sizes, bucket_window=bucket_window)
    check_validation_interval(trainer, sampler.batches_per_epoch, len(dataset), global_batch)
    return ResumableLoader(dataset, sampler, collate_fn, num_workers, pin_memory and _on_cuda(trainer))


def check_validation_interval(
    trainer: pl.Trainer | None, batches_per_epoch: int, dataset_size: int, global_batch: int
) -> None:
    """Refuse an integer ``trainer.val_check_interval`` beyond an epoch's batches while
    ``trainer.check_val_every_n_epoch`` is set (Lightning would stop with a traceback once training starts)."""
    if trainer is None or not isinstance(trainer.val_check_interval, int) or trainer.check_val_every_n_epoch is None:
        return
    if trainer.val_check_interval > batches_per_epoch and trainer.limit_val_batches:
        raise ConfigError(
            "trainer.val_check_interval",
            trainer.val_check_interval,
            f"is more than the {batches_per_epoch} training batches of an epoch ({dataset_size} training "
            f"examples in global batches of {global_batch}) while trainer.check_val_every_n_epoch is "
            f"{trainer.check_val_every_n_epoch}; use at most {batches_per_epoch}, a fraction of an epoch "
            "in (0, 1], or trainer.check_val_every_n_epoch null to count batches across epochs",
        )


def eval_loader(
    dataset: Dataset,
    global_batch: int,
    trainer: pl.Trainer | None,
    collate_fn: Callable[[list[Any]], Any],
    num_workers: int = 0,
    sampler_type: type[EvalShardSampler] = EvalShardSampler,
    pin_memory: bool = True,
    sizes: np.ndarray | None = None,
) -> DataLoader:
    """The validation/test/predict loader of this process: its exact shard (an :class:`EvalShardSampler`), in
    ascending size given ``sizes``; workers are kept alive between evaluations."""
    world, rank = process_grid(trainer)
    return DataLoader(
        dataset,
        batch_size=per_device_batch_size(global_batch, world),
        collate_fn=collate_fn,
        sampler=sampler_type(dataset, world, rank, sizes),
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        pin_memory=pin_memory and _on_cuda(trainer),
        generator=torch.Generator().manual_seed(0),
        worker_init_fn=ignore_stop_signals,
    )  # iterating never consumes the global RNG


def _on_cuda(trainer: pl.Trainer | None) -> bool:
    return trainer is not None and trainer.strategy.root_device.type == "cuda"


def warn_if_not_published(name: str, sizes: Mapping[str, int], published: Mapping[str, int], hint: str = "") -> None:
    """Warn loudly when split sizes differ from the ``published`` ones; ``hint`` is a likely reason."""
    if published and any(sizes.get(split) != size for split, size in published.items()):
        log.warning(
            "!!! %s split sizes %s differ from the published %s: %sresults are not comparable with the papers !!!",
            name,
            dict(sizes),
            dict(published),
            f"{hint}; " if hint else "",
        )


def _checked_sizes(sizes: np.ndarray | None, dataset_size: int, bucket_window: int) -> np.ndarray | None:
    if bucket_window < 0:
        raise ValueError(f"bucket_window={bucket_window}; use 0 (no bucketing) or a number of global batches")
    if sizes is None:
        if bucket_window:
            raise ValueError("bucket_window > 0 needs the size of every item (sizes=...)")
        return None
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.shape != (dataset_size,):
        raise ValueError(f"sizes has shape {sizes.shape}, expected one size per item: ({dataset_size},)")
    return sizes
