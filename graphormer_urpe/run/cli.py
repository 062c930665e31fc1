"""The command line of ``graphormer-urpe train`` and ``graphormer-urpe evaluate`` (LightningCLI), and the run directory
it picks."""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import pytorch_lightning as pl
import torch
import torch.distributed as dist
import yaml
from jsonargparse import ArgumentError, get_loader, set_loader
from lightning_fabric.plugins import CheckpointIO
from lightning_fabric.plugins.environments import ClusterEnvironment, SLURMEnvironment
from lightning_fabric.utilities.exceptions import MisconfigurationException
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.loggers import Logger

from graphormer_urpe.configs import shipped_config, shipped_config_names
from graphormer_urpe.data.datamodule import available_cores
from graphormer_urpe.data.files import unwritable
from graphormer_urpe.errors import (
    ConfigError,
    InputError,
    check_choice,
    check_int,
    check_number,
    import_object,
)
from graphormer_urpe.run.callbacks import (
    LastCheckpoint,
    LoggedStep,
    NonFiniteLossGuard,
    PreemptionCheckpoint,
    RelationTablePlots,
    RNGState,
    StepProgressBar,
    StopDecision,
    TrainingDataPosition,
)
from graphormer_urpe.run.checkpoints import AtomicCheckpointIO
from graphormer_urpe.run.finetune import SourceCheckpoint, read_source, take_architecture
from graphormer_urpe.run.ledger import MetricsLog, RunDirectory, create_timestamped_dir
from graphormer_urpe.run.tracking import WandbOptions, wandb_logger

log = logging.getLogger("graphormer_urpe")

#: Environment variable through which processes launched by this one (Lightning's DDP) share its run directory.
RUN_DIR_ENV = "GRAPHORMER_RUN_DIR"
#: Run directories this process chose itself (a later run in the same process must not reuse them).
_CHOSEN_HERE: set[str] = set()


#: jsonargparse parser mode of this CLI: YAML, with a bare
#: ``None`` (a nested override's null, passed on) read as null.
PARSER_MODE = "graphormer_yaml"
_yaml_loader = get_loader("yaml")


def _load_value(text: str) -> Any:
    return None if text.strip() == "None" else _yaml_loader(text)


set_loader(PARSER_MODE, _load_value, (yaml.YAMLError,))


def close_process_group() -> None:
    """Destroy the default process group, if DDP started one, whatever its backend.

    Lightning destroys it at exit for NCCL only. A gloo group (DDP on CPUs) left to the interpreter's finalisation
    can abort a process whose work is all done: its worker threads outlive the interpreter (SIGABRT, "terminate
    called without an active exception"), and a finished ``graphormer-urpe train`` or ``evaluate`` exits with -6."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# registered when this module is imported, before any run starts a group: atexit runs it after the command's work,
# while the interpreter is whole (handlers run in reverse order of registration)
atexit.register(close_process_group)


def set_threads(config: Mapping[str, Any]) -> None:
    """Give torch ``--threads`` threads, or by default the cores this process may use minus one per data-loader
    worker (at least 1), unless the environment sets ``OMP_NUM_THREADS``. Threads beyond the free cores wait for each
    other at every operation whenever another process takes a core: on 2 cores a run with 2 threads and a loader
    worker fell from 8.7 to 0.96 steps/s beside one busy process (docs/throughput.md, "Sharing cores")."""
    threads = config.get("threads")
    if threads is None:
        if "OMP_NUM_THREADS" in os.environ:
            return
        workers = ((config.get("data") or {}).get("init_args") or {}).get("num_workers") or 0
        threads = max(1, available_cores() - workers)
    check_int("threads", threads, 1, hint=" (torch threads of this process), or null")
    torch.set_num_threads(threads)


def resolve_config_paths(argv: Sequence[str]) -> list[str]:
    """Turn ``--config zinc_subset[.yaml]`` into the path of the shipped config when it is not an existing file, and
    check every config file (:func:`check_config_file`); :class:`ConfigError` for a name that is neither."""
    args = list(argv)
    for i, arg in enumerate(args):
        name = None
        if arg == "--config" and i + 1 < len(args):
            name, index = args[i + 1], i + 1
        elif arg.startswith("--config="):
            name, index = arg.split("=", 1)[1], i
        if name is None:
            continue
        if Path(name).is_file():
            check_config_file(name)
            continue
        candidate = shipped_config(name)
        if candidate is None:
            raise ConfigError(
                "config",
                name,
                f"is neither a file nor a shipped config (available: {', '.join(shipped_config_names())})",
            )
        args[index] = str(candidate) if index != i else f"--config={candidate}"
    return args


#: What a config file holds.
CONFIG_SHAPE = "a mapping of options (trainer:, model:, data:, ...)"
#: How a refusal names what a config file holds instead of a mapping.
_HELD = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def check_config_file(path: str) -> None:
    """Refuse (:class:`ConfigError`, key ``config``) a config file that is not :data:`CONFIG_SHAPE`: broken YAML (with
    its line and column), an empty file, a list or a single value; jsonargparse's own reports name no file."""
    try:
        content = yaml.safe_load(Path(path).read_text())
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = "" if mark is None else f" (line {mark.line + 1}, column {mark.column + 1})"
        raise ConfigError("config", path, f"is not valid YAML: {error.problem}{where}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError("config", path, f"is not valid YAML: {error}") from None
    if content is None:
        raise ConfigError("config", path, f"is empty: a config is {CONFIG_SHAPE}")
    if not isinstance(content, dict):
        held = _HELD.get(type(content), type(content).__name__)
        raise ConfigError("config", path, f"holds {held}, not {CONFIG_SHAPE}")


def configure_logging() -> None:
    """INFO-level messages of this package on stderr, one line each."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(asctime)s %(levelname)s] %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def launcher_run_id() -> str | None:
    """An id that every process of this launch sees: SLURM job (and srun step), or torchrun run id."""
    if job := os.environ.get("SLURM_JOB_ID"):
        array, step = os.environ.get("SLURM_ARRAY_TASK_ID"), os.environ.get("SLURM_STEP_ID")
        return (
            f"slurm{os.environ.get('SLURM_ARRAY_JOB_ID', job)}"
            + (f"_{array}" if array else "")
            + (f".{step}" if step else "")
        )
    torchrun = os.environ.get("TORCHELASTIC_RUN_ID")
    if torchrun and torchrun != "none":
        return f"torchrun-{torchrun[:12]}"
    return None


def resolve_run_dir(
    run_root: str | Path, run_name: str | None, config_name: str, now: datetime.datetime | None = None
) -> RunDirectory:
    """The run directory, identical in every process: ``run_root/run_name``, the launching process's, the launch
    id's under SLURM or torchrun, else a new ``<config>-<timestamp>`` (``now``: default the current time)."""
    if run_name:
        directory = RunDirectory(Path(run_root) / run_name)
    elif os.environ.get(RUN_DIR_ENV) and os.environ[RUN_DIR_ENV] not in _CHOSEN_HERE:
        directory = RunDirectory(Path(os.environ[RUN_DIR_ENV]))
    elif (launch := launcher_run_id()) is not None:
        directory = RunDirectory(Path(run_root) / f"{config_name}-{launch}")
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1 or int(os.environ.get("NODE_RANK", "0")) > 0:
        raise InputError(
            "this process is one of several started by a launcher that gives them no common id; pass "
            "--run_name NAME so that they share one run directory"
        )
    else:
        directory = create_timestamped_dir(Path(run_root), config_name, now)
    _CHOSEN_HERE.add(str(directory.path))
    os.environ[RUN_DIR_ENV] = str(directory.path)
    return directory


@dataclass
class CheckpointOptions:
    """When ``last.ckpt`` (the checkpoint that ``--ckpt_path last`` resumes) is written.

    Args:
        every_n_steps: every N optimiser steps, and always at the end of training and on signals (0: only then).
        signals: signals after which the run finishes its step, writes ``last.ckpt`` and exits (128 + signal number);
            SLURM sends SIGTERM on preemption, SIGUSR1 before the time limit with ``#SBATCH --signal=USR1@120``.
        requeue: under SLURM, requeue the job (``scontrol requeue``) after SIGUSR1.
    """

    every_n_steps: int = 1000
    signals: list[str] = field(default_factory=lambda: ["SIGTERM", "SIGUSR1"])
    requeue: bool = True

    def __post_init__(self) -> None:
        check_int("checkpoint.every_n_steps", self.every_n_steps, 0, hint=" (0: only at the end and on signals)")
        catchable = {s.name for s in signal.valid_signals() if isinstance(s, signal.Signals)} - {
            "SIGKILL",
            "SIGSTOP",
        }
        for name in self.signals:
            if name not in catchable:
                raise ConfigError(
                    "checkpoint.signals",
                    name,
                    "is not a signal this process can catch (e.g. SIGTERM, SIGUSR1, SIGUSR2)",
                )
        check_choice("checkpoint.requeue", self.requeue, (True, False))


class Trainer(pl.Trainer):
    """Lightning's Trainer, its batch limits read integer first.

    Lightning reads an integer limit as a number of batches and a float as a fraction, but annotates the limits
    ``float | int``: jsonargparse, which takes the first type a value fits, made the command line's ``2`` a ``2.0``,
    a fraction above 1. Every other argument is the Trainer's own.

    Args:
        limit_train_batches: training batches per epoch: an integer is a number of batches, a float a fraction in
            [0, 1] (``1.0`` or null: all); per process.
        limit_val_batches: validation batches, as ``limit_train_batches`` (0: no validation).
        limit_test_batches: test batches, as ``limit_train_batches``.
        limit_predict_batches: prediction batches, as ``limit_train_batches``.
    """

    def __init__(
        self,
        *,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches,
            limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches,
            **kwargs,
        )


class GraphormerCLI(LightningCLI):
    """LightningCLI with the data-to-model link and one-line refusals: parses a config (a file, or ``config_text``,
    a resolved config as YAML, read before the command line) and builds data, model and a trainer that writes
    nothing (what ``graphormer-urpe evaluate`` uses); :class:`TrainingCLI` adds the run."""

    def __init__(
        self,
        args: Sequence[str] | None = None,
        *,
        config_text: str | None = None,
        prog: str | None = None,
        **kwargs: Any,
    ) -> None:
        """``prog`` is the command named by ``--help``'s usage line (default: the program's file name)."""
        configure_logging()
        # we always pass the (config-resolved) command line as ``args``; Lightning warns about that
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
        #: The command line as given (recorded per segment in ``run.json``).
        self.argv = list(sys.argv[1:] if args is None else args)
        try:
            argv = resolve_config_paths(self.argv)
        except ConfigError as error:
            stop_on_input_error(error)
        self.config_name = next(
            (
                Path(a.split("=", 1)[1] if a.startswith("--config=") else argv[i + 1]).stem
                for i, a in enumerate(argv)
                if a == "--config" or a.startswith("--config=")
            ),
            "run",
        )
        if config_text is not None:
            argv = ["--config", config_text, *argv]
        super().__init__(
            pl.LightningModule,
            pl.LightningDataModule,
            trainer_class=Trainer,
            subclass_mode_model=True,
            subclass_mode_data=True,
            run=False,
            args=argv,
            save_config_callback=None,  # RunRecord writes config.yaml later
            parser_kwargs={"default_env": False, "parser_mode": PARSER_MODE, "exit_on_error": False, "prog": prog},
            **kwargs,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # the run's options (used by TrainingCLI) are parsed here too: every run's config.yaml reads back
        parser.add_argument("--run_root", type=str, default="runs", help="Directory holding one directory per run.")
        parser.add_argument(
            "--run_name",
            type=str | None,
            default=None,
            help="Run directory name (default: config name and the SLURM job, torchrun id or time).",
        )
        parser.add_argument(
            "--logger",
            type=Literal["csv", "wandb", "none"],
            default="csv",
            help="Where metrics go: csv, wandb (W&B and csv) or none.",
        )
        parser.add_class_arguments(WandbOptions, "wandb")
        parser.add_class_arguments(CheckpointOptions, "checkpoint")
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default=None,
            help="Resume training from this checkpoint; 'last': <run dir>/checkpoints/last.ckpt "
            "(which must exist); 'auto': that one if it exists, else start the run.",
        )
        parser.add_argument(
            "--init_from",
            type=str | None,
            default=None,
            help="Start a new run from this checkpoint's weights (ours or converted, any dataset): "
            "it decides the encoder's architecture; the head is rebuilt when the data's targets "
            "differ; a URPE run takes an RPE checkpoint with C set to ones (docs/finetuning.md).",
        )
        parser.add_argument(
            "--threads",
            type=int | None,
            default=None,
            help="Torch threads of this process (null: the cores it may use minus one per data "
            "loader worker, at least 1, unless OMP_NUM_THREADS is set; docs/throughput.md).",
        )
        # what the data is (vocabularies, widths, outputs, targets) reaches the task in one declaration
        parser.link_arguments("data.spec", "model.init_args.data", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then check what needs no object built; a bad value is an :class:`InputError` of one line naming
        the key (a :class:`ConfigError`, or jsonargparse's report in :func:`parse_error_line`)."""
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as error:
            raise InputError(parse_error_line(str(error))) from None
        self.config["run_root"] = os.path.expanduser(self.config["run_root"])  # ~/runs: the home's, not ./~
        self.check_options(self.config)
        set_threads(self.config)

    def check_options(self, config: Mapping[str, Any]) -> None:
        """Refuse (:class:`ConfigError`) a seed or trainer option that Lightning would accept, then fail on."""
        check_trainer_options(config)

    def instantiate_classes(self) -> None:
        """Build data, model and trainer; a refusal is one line, exit code 2."""
        try:
            super().instantiate_classes()
        except Exception as error:
            stop_on_input_error(error)

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        """The trainer of the config, by default with no logger and no checkpoints (``kwargs`` override both)."""
        try:
            return super().instantiate_trainer(**{"logger": False, "enable_checkpointing": False, **kwargs})
        except ValueError as error:  # Lightning refuses e.g. an unknown accelerator with a plain ValueError
            raise InputError(f"trainer: {error}") from error

    @property
    def config_yaml(self) -> str:
        """The resolved config as YAML, nulls kept (``spatial_pos_max: null``): ``config.yaml``, checkpoints."""
        return self.parser.dump(self.config, skip_none=False)

    def config_dict(self) -> dict:
        """The resolved config as plain data (for loggers)."""
        return yaml.safe_load(self.parser.dump(self.config))


#: The command that trains, as ``--help`` and every run's record name it (a checkout's root script runs the same
#: code).
TRAIN_COMMAND = "graphormer-urpe train"


class TrainingCLI(GraphormerCLI):
    """The command line of ``graphormer-urpe train``: also the run directory, ``--init_from``'s architecture, and the
    trainer's run callbacks and loggers. What a start does with them is :mod:`graphormer_urpe.run.start`'s."""

    def __init__(self, args: Sequence[str] | None = None, **kwargs: Any) -> None:
        #: Whether the seed is drawn at random (``seed_everything: true``), so that every start has another.
        self.seed_drawn = False
        #: The checkpoint ``--init_from`` names, read before the model is built (it decides the architecture).
        self.init_source: SourceCheckpoint | None = None
        #: The encoder fields of the config that ``init_source`` replaced: field -> {"config", "checkpoint"}.
        self.init_overridden: dict[str, dict[str, Any]] = {}
        #: This run's directory, the same in every process; chosen
        #: when the trainer is built (which needs its path).
        self.run_directory: RunDirectory | None = None
        super().__init__(args, prog=TRAIN_COMMAND, **kwargs)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        self.seed_drawn = self.config["seed_everything"] is True

    def check_options(self, config: Mapping[str, Any]) -> None:
        """Refuse a run name, run root, checkpoint option, seed or trainer option that cannot work."""
        check_run_options(config)
        super().check_options(config)

    def instantiate_classes(self) -> None:
        """``--init_from``: read the checkpoint and take its architecture, then build data, model and trainer."""
        if self.config["init_from"]:  # the checkpoint decides the architecture: set before anything is built
            try:
                task_class = import_object("model.class_path", self.config["model"]["class_path"])
                self.init_source = read_source(self.config["init_from"], task_class)
            except InputError as error:
                stop_on_input_error(error)
            self.init_overridden = take_architecture(self.config["model"]["init_args"]["encoder"], self.init_source)
        super().instantiate_classes()

    @property
    def run_dir(self) -> Path:
        """This run's directory."""
        return self.run_directory.path

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints go."""
        return self.run_dir / "checkpoints"

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        self.run_directory = resolve_run_dir(self.config["run_root"], self.config.get("run_name"), self.config_name)
        run_dir, checkpoint_dir = self.run_dir, self.checkpoint_dir
        options: CheckpointOptions = self.config_init["checkpoint"]
        trainer_config = self._get(self.config_init, "trainer", default={})
        callbacks = list(trainer_config.get("callbacks") or [])
        monitor, mode = getattr(self.model, "monitor", ("val/loss", "min"))
        callbacks += [
            ModelCheckpoint(
                dirpath=checkpoint_dir,
                filename="best-{step}",
                monitor=monitor,
                mode=mode,
                auto_insert_metric_name=False,
            ),
            LastCheckpoint(checkpoint_dir, options.every_n_steps),
            LoggedStep(),
            RNGState(),
            TrainingDataPosition(),
            StopDecision(),
            # after LastCheckpoint: Lightning calls checkpoint callbacks last, in their order
            PreemptionCheckpoint(
                checkpoint_dir, tuple(options.signals), requeue_signals=("SIGUSR1",) if options.requeue else ()
            ),
            NonFiniteLossGuard(),
        ]
        has_progress_bar = any(isinstance(callback, ProgressBar) for callback in callbacks)
        if trainer_config.get("enable_progress_bar") is not False and not has_progress_bar:
            callbacks.append(StepProgressBar())
        loggers: list[Logger] = [MetricsLog(run_dir)] if self.config["logger"] != "none" else []
        if self.config["logger"] != "none":
            callbacks.append(LearningRateMonitor(logging_interval="step"))
        if self.config["logger"] == "wandb":
            loggers.append(wandb_logger(self.config_init["wandb"], run_dir))
            callbacks.append(RelationTablePlots(run_dir / "plots", self.config_init["wandb"].plot_every_n_validations))
        plugins = trainer_config.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, list) else [plugins]
        if SLURMEnvironment.detect() and not any(isinstance(p, ClusterEnvironment) for p in plugins):
            # our PreemptionCheckpoint requeues at a step boundary; Lightning's would save mid-step
            plugins.append(SLURMEnvironment(auto_requeue=False))
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            plugins.append(AtomicCheckpointIO())  # an interrupted save never tears last.ckpt
        try:
            return super().instantiate_trainer(
                default_root_dir=str(run_dir),
                logger=loggers,
                callbacks=callbacks,
                plugins=plugins or None,
                enable_checkpointing=trainer_config.get("enable_checkpointing"),
                **kwargs,
            )
        except BaseException:
            self.run_directory.release()  # no run directory left behind
            raise

    @property
    def uses_wandb(self) -> bool:
        """Whether this run logs to W&B."""
        return self.config["logger"] == "wandb"


def stop_on_input_error(error: Exception) -> NoReturn:
    """Raise the bad input behind ``error`` as an :class:`InputError`, one line that the commands' ``exit_codes``
    turns into exit code 2: ``error`` itself or the InputError it was raised from, or Lightning's
    MisconfigurationException (also as its cause); raise anything else as it is."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, InputError | MisconfigurationException):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        raise error
    if isinstance(cause, InputError):
        raise cause
    raise InputError(str(cause)) from error


def parse_error_line(report: str) -> str:
    """jsonargparse's nested parse error as one line: the innermost key (no ``init_args``) and its own report."""
    lines = report.splitlines()
    keys, detail = [], None
    for k, line in enumerate(lines):
        if (found := re.search(r'Parser key "([^"]+)"', line)) is not None:
            keys.append(found.group(1))
            rest = [text.strip(" -") for text in lines[k + 1 :] if text.strip(" -")]
            own = line[found.end() :].strip(" :")
            detail = own or next((text for text in rest if not text.startswith(_REPORT_FRAMING)), None)
    if not keys:
        return " ".join(text.strip() for text in lines if text.strip())
    key = ".".join(keys).replace("init_args.", "")
    if detail and (unknown := re.fullmatch(r"unrecognized arguments: --(?:init_args\.)?([^=\s]+).*", detail)):
        return f"{key}.{unknown.group(1)}: no such option"
    # an option that may be null (float | None) reports its value on a "Given value:" line of its own
    given = next(
        (text.strip()[len("Given value: ") :] for text in lines if text.strip().startswith("Given value: ")), None
    )
    if detail and given is not None and detail.startswith("Expected a") and "Got value" not in detail:
        detail = f"{detail}. Got value: {given}"
    return f"{key}: {detail}" if detail else key


#: Lines of a jsonargparse report that frame the error rather than state it.
_REPORT_FRAMING = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "Given value",
    "Problem with given class_path",
)


def check_run_options(config: Mapping[str, Any]) -> None:
    """Refuse a run name, run root or checkpoint option that would start another run than the one meant."""
    name = config["run_name"]
    if name is not None and (name in ("", ".", "..") or "/" in name):
        raise ConfigError(
            "run_name",
            name,
            "must name one directory under run_root (not empty, '.' or '..', no '/'), "
            "or be null (a new directory per start)",
        )
    if config["init_from"] == "":
        raise ConfigError("init_from", "", "must name a checkpoint file, or be null (the config's own initialisation)")
    if config["ckpt_path"] == "":
        raise ConfigError("ckpt_path", "", "must name a checkpoint file, 'last' or 'auto', or be null (a new run)")
    if Path(config["run_root"]).is_file():
        raise ConfigError("run_root", config["run_root"], "is a file; run_root is the directory that holds the runs")
    if (read_only := unwritable(Path(config["run_root"]))) is not None:
        raise ConfigError(
            "run_root",
            config["run_root"],
            f"{read_only} is not writable, so no run directory can be made there; choose a writable run_root",
        )


def check_trainer_options(config: Mapping[str, Any]) -> None:
    """Refuse a seed or trainer option that Lightning would accept, then fail on (or misuse)."""
    seed = config["seed_everything"]
    if not isinstance(seed, bool) and seed is not None:
        check_int("seed_everything", seed, 0, 2**32 - 1, hint=", true (a random seed) or false/null (none)")
    trainer = config["trainer"]
    check_int("trainer.accumulate_grad_batches", trainer["accumulate_grad_batches"], 1)
    interval = trainer["val_check_interval"]
    if isinstance(interval, float):
        check_number(
            "trainer.val_check_interval",
            interval,
            0.0,
            1.0,
            include_minimum=False,
            hint=" (a fraction of an epoch), or an integer number of training batches >= 1",
        )
    elif interval is not None:
        check_int("trainer.val_check_interval", interval, 1, hint=" (training batches), or a fraction in (0, 1]")
    for name, minimum in (
        ("check_val_every_n_epoch", 1),
        ("min_steps", 0),
        ("min_epochs", 0),
        ("num_sanity_val_steps", -1),
        ("log_every_n_steps", 1),
        ("max_epochs", -1),
    ):
        if trainer[name] is not None:
            check_int(f"trainer.{name}", trainer[name], minimum)
    check_int("trainer.max_steps", trainer["max_steps"], -1, hint=" (-1: no limit)")
    check_int("trainer.num_nodes", trainer["num_nodes"], 1)
    if trainer["gradient_clip_val"] is not None:
        check_number("trainer.gradient_clip_val", trainer["gradient_clip_val"], 0.0, hint=", or null (no clipping)")
    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"):
        limit = trainer[name]
        if isinstance(limit, float):
            check_number(f"trainer.{name}", limit, 0.0, 1.0, hint=" (a fraction), or an integer number of batches")
        elif limit is not None:
            check_int(f"trainer.{name}", limit, 0, hint=" (batches), or a fraction in [0, 1]")
