"""One start of a run (``graphormer-urpe train``): planned, every refusal before any file is written, then run
(docs/running.md).

    cli = TrainingCLI(args)
    with exit_codes(finish=partial(finish_start, cli)):  # graphormer_urpe.commands.exits
        metrics = run_start(cli, plan_start(cli))
"""

from __future__ import annotations

import datetime
import math
import shlex
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import pytorch_lightning as pl
import yaml
from pytorch_lightning.callbacks import Callback

from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.predictable import RunData
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.run.callbacks import remove_weight_averaging
from graphormer_urpe.run.checkpoints import (
    CONFIG_KEY,
    DATA_IDENTITY_KEY,
    check_resume,
    config_identity,
    data_identity,
    differences,
)
from graphormer_urpe.run.cli import TRAIN_COMMAND, TrainingCLI, launcher_run_id, log
from graphormer_urpe.run.finetune import Initialisation, describe, initialise, plan_initialisation
from graphormer_urpe.run.ledger import (
    CONFIG_FILE,
    MetricsLog,
    RunDirectory,
    RunDirError,
    count_parameters,
    start_segment,
    write_json,
)
from graphormer_urpe.run.provenance import git_commit, package_versions


@dataclass(frozen=True)
class Start:
    """One start of a run, decided by :func:`plan_start`; :class:`RunRecord` records it as a segment of the run."""

    directory: RunDirectory  # held by this process (rank 0 created and locked it)
    kind: Literal["new", "resume", "restart"]  # restart: step 0 again in a directory holding earlier segments
    checkpoint: str | None  # the checkpoint a resume continues (None: step 0)
    start_step: int  # the optimiser step the segment starts from
    initialisation: Initialisation | None  # what --init_from loads into a run starting at step 0
    config_name: str  # the --config name (the run directory's prefix)
    config: dict[str, Any]  # the resolved config as plain data, nulls left out (for loggers)
    config_yaml: str  # the resolved config, nulls kept (config.yaml, every checkpoint)
    argv: tuple[str, ...]  # the command line as given
    git_commit: str  # the checkout's commit when the start was planned, before any preprocessing: the code it runs


class RunRecord(Callback):
    """Records a planned :class:`Start` as a segment of its run (``config.yaml``, ``run.json``, ``metrics.csv``)
    when training starts, after every check; puts the resolved config and the identity of the data into every
    checkpoint."""

    def __init__(self, start: Start) -> None:
        self.start = start
        self.recorded = False

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[CONFIG_KEY] = self.start.config_yaml
        checkpoint[DATA_IDENTITY_KEY] = data_identity(trainer.datamodule)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record(trainer, pl_module)
        if trainer.is_global_zero:
            warn_if_never_validated(trainer)  # here the training batches of an epoch are known

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.recorded:  # nothing was left to train: Lightning skipped the training loop
            self._record(trainer, pl_module)

    def _record(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.recorded = True
        start, run_dir = self.start, self.start.directory.path
        seed = start.config.get("seed_everything")
        initialised = getattr(pl_module, "initialised_from", None)  # a resumed run carries it in its checkpoint
        info = {
            "run_dir": str(run_dir),
            "config": start.config_name,
            "command": shlex.join([*TRAIN_COMMAND.split(), *start.argv]),
            "dataset": trainer.datamodule.describe() if trainer.datamodule is not None else None,
            "parameters": count_parameters(pl_module),
            "device": f"{type(trainer.accelerator).__name__} x {trainer.num_devices} x {trainer.num_nodes} node(s)",
            "precision": trainer.precision,
            "seed": seed,
            "git_commit": start.git_commit,
            "versions": package_versions(),
            "initialised_from": describe(initialised) if initialised else None,
        }
        segment = {
            "command": info["command"],
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "kind": start.kind,
            "start_step": start.start_step,
            "resumed_from": start.checkpoint,
            "initialised_from": initialised if start.checkpoint is None else None,
            # the record's own git_commit is the latest start's; a run resumed across commits keeps each here
            "git_commit": info["git_commit"],
        }
        for logger in trainer.loggers:  # W&B: the resolved config, parameters, commit, dataset sizes
            logger.log_hyperparams({"config": start.config, "run": info})
        if trainer.is_global_zero:
            number = start_segment(run_dir, info, segment, start.config_yaml)
            for logger in trainer.loggers:
                if isinstance(logger, MetricsLog):
                    logger.open(number)
            log.info("run directory: %s (segment %d, from step %d)", run_dir, number, start.start_step)
            log.info("dataset: %s", info["dataset"])
            log.info(
                "%s: %s trainable parameters; device %s; precision %s; seed %s",
                type(pl_module).__name__,
                f"{info['parameters']:,}",
                info["device"],
                info["precision"],
                seed,
            )


def plan_start(cli: TrainingCLI) -> Start:
    """Decide how this start uses its run directory and make every check, before any file is written: the data's
    global batches, ``--init_from``'s weights, the directory and ``--ckpt_path``, the checkpoint a resume continues
    (or the config of a restart); then hold the directory (rank 0 creates and locks it)."""
    data, trainer = cli.datamodule, cli.trainer
    if not isinstance(data, RunData):
        raise ConfigError(
            "data.class_path",
            cli.config["data"]["class_path"],
            "does not give what a run needs of "
            "its data (graphormer_urpe.data.predictable.RunData: spec, split_sizes, batch_size, "
            "eval_batch_size, bucket_window, describe(), identity())",
        )
    check_global_batch(data, trainer.world_size)
    initialisation = None
    if cli.init_source is not None:
        graphs = isinstance(data, GraphDataModule)  # the one datamodule with a source and a choice of path order
        initialisation = plan_initialisation(
            cli.init_source,
            cli.model,
            data.spec,
            type(data.source if graphs else data).__name__,
            data.path_order if graphs else None,
            cli.init_overridden,
        )
    directory = cli.run_directory
    planned = directory.plan(cli.config["ckpt_path"])
    start_step = 0
    if planned.checkpoint is not None:
        start_step = check_resume(
            planned.checkpoint, cli.model, cli.trainer.max_steps, cli.config_yaml, cli.seed_drawn, data
        )
        if initialisation is not None:
            log.info(
                "resuming from %s: --init_from %s only starts new runs (it decided the architecture)",
                planned.checkpoint,
                cli.config["init_from"],
            )
            initialisation = None
    elif planned.earlier_segments:
        check_same_run(cli)
    directory.take(writer=trainer.is_global_zero, launch=launcher_run_id() if trainer.world_size > 1 else None)
    kind = "resume" if planned.checkpoint is not None else "restart" if planned.earlier_segments else "new"
    return Start(
        directory=directory,
        kind=kind,
        checkpoint=planned.checkpoint,
        start_step=start_step,
        initialisation=initialisation,
        config_name=cli.config_name,
        config=cli.config_dict(),
        config_yaml=cli.config_yaml,
        argv=tuple(cli.argv),
        git_commit=git_commit(),
    )


class RunMetrics(TypedDict):
    """A finished start's result: what ``train`` returns and writes to the run's ``metrics.json``."""

    best_checkpoint: str | None  # the best validation checkpoint's path; None: no checkpoint was kept
    global_step: int  # optimiser steps taken, over every segment of the run
    validation: dict[str, float] | None  # the best checkpoint's validation metrics (val/...); None: none evaluated
    test: dict[str, float] | None  # its test metrics (test/...); None: no labelled test split, or none evaluated


def run_start(cli: TrainingCLI, start: Start) -> RunMetrics:
    """Initialise (``--init_from``), fit with the start recorded as a segment, validate and test the best
    checkpoint, write ``metrics.json``; returns the final metrics. A start that fails before its run's first
    checkpoint leaves no directory of its own behind (:meth:`RunDirectory.discard`)."""
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    try:
        if start.initialisation is not None:
            initialise(model, start.initialisation)
        trainer.callbacks.append(RunRecord(start))
        trainer.fit(model, datamodule, ckpt_path=start.checkpoint)
        best = trainer.checkpoint_callback.best_model_path or None
        remove_weight_averaging(trainer)
        # no result (None) when no batch is evaluated: trainer.limit_val_batches (limit_test_batches) 0
        validation = next(iter(trainer.validate(model, datamodule, ckpt_path=best, verbose=False)), None)
        if "test" in datamodule.split_sizes:
            test = next(iter(trainer.test(model, datamodule, ckpt_path=best, verbose=False)), None)
        else:  # e.g. PCQM4Mv2, MAG240M: test targets are hidden
            test = None
            hidden = [name for name in datamodule.split_sizes if name not in ("train", "valid")]
            log.info(
                "no labelled 'test' split; write leaderboard predictions with graphormer-urpe evaluate --model %s "
                "--split %s --submission_dir DIR",
                best or "CHECKPOINT",
                "|".join(hidden) or "<split>",
            )
    except BaseException:
        start.directory.discard()
        raise
    metrics = RunMetrics(best_checkpoint=best, global_step=trainer.global_step, validation=validation, test=test)
    if trainer.is_global_zero:
        write_json(start.directory.path / "metrics.json", metrics)
        log.info("validation %s | test %s (best checkpoint %s)", validation, test, best)
        log.info("metrics written to %s", start.directory.path / "metrics.json")
    return metrics


def finish_start(cli: TrainingCLI, exit_code: int, interrupted: bool) -> None:
    """What ends every start, whatever stopped it (``exit_code``, :mod:`graphormer_urpe.commands.exits`): close W&B
    (marked preempted after a signal), let the run directory go, and after a KeyboardInterrupt (``interrupted``: a
    second Ctrl-C in training, or one outside it) say how to continue."""
    finish_wandb(cli, exit_code)
    cli.run_directory.release()
    if interrupted and cli.trainer.is_global_zero:
        last = cli.run_directory.last_checkpoint
        log.warning(
            "interrupted (Ctrl-C) after step %d; %s",
            cli.trainer.global_step,
            f"continue from {last} with --run_name {cli.run_dir.name} --ckpt_path last"
            if last.is_file()
            else "no checkpoint was written",
        )


def check_global_batch(data: RunData, world: int) -> None:
    """Refuse a global ``data.batch_size`` (or ``eval_batch_size``) that does not divide by the ``world`` processes."""
    for name, batch in (("batch_size", data.batch_size), ("eval_batch_size", data.eval_batch_size)):
        if batch % world:
            raise ConfigError(
                f"data.{name}",
                batch,
                f"is the global batch and must divide by the {world} processes "
                f"(trainer.devices x trainer.num_nodes); use e.g. {max(world, batch // world * world)}",
            )


def check_same_run(cli: TrainingCLI) -> None:
    """Before starting from step 0 in a directory that holds earlier segments of a run: stop
    (:class:`RunDirError`) unless this is the configuration recorded there."""
    recorded_path = cli.run_dir / CONFIG_FILE
    if not recorded_path.is_file():  # stopped before its first segment was recorded
        return
    recorded = config_identity(yaml.safe_load(recorded_path.read_text()))
    if differing := differences(recorded, config_identity(yaml.safe_load(cli.config_yaml)), str(recorded_path), "now"):
        raise RunDirError(
            f"{cli.run_dir} holds a run of another configuration and no checkpoint to resume "
            f"({differing}); give this run another --run_name"
        )
    log.info("%s holds no checkpoint of its run: starting it again from step 0 (a new segment)", cli.run_dir)


def warn_if_never_validated(trainer: pl.Trainer) -> None:
    """Say so when ``max_steps`` ends a run that starts at step 0 before its first validation, whether that comes
    every ``val_check_interval`` batches or at the end of epoch ``check_val_every_n_epoch``: then the run never
    validates, keeps no best checkpoint and reports its last weights. Called when training starts, once the
    training batches of an epoch are known."""
    if trainer.max_steps <= 0 or trainer.global_step > 0 or trainer.limit_val_batches == 0:
        return
    if trainer.val_check_batch is None or not math.isfinite(trainer.val_check_batch):
        return  # validation by wall time, or none
    batches = trainer.max_steps * trainer.accumulate_grad_batches
    first = int(trainer.val_check_batch)  # batches before the first validation
    if trainer.check_val_every_n_epoch is not None:
        first += (trainer.check_val_every_n_epoch - 1) * int(trainer.num_training_batches)
    if batches < first:
        log.warning(
            "--trainer.max_steps %d ends training after %d training batches, before its first validation (after "
            "%d): the run never validates while training, keeps no best checkpoint, and its final metrics are "
            "those of the last weights",
            trainer.max_steps,
            batches,
            first,
        )


def finish_wandb(cli: TrainingCLI, exit_code: int) -> None:
    """Close this process's W&B run (marked preempted after a signal), so the next run starts clean."""
    if not cli.uses_wandb:
        return
    import wandb

    if wandb.run is not None:
        if exit_code > 128:
            wandb.run.mark_preempting()
        wandb.finish(exit_code=exit_code)
