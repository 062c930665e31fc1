"""Configuration, run directories and run records shared by ``train.py`` and ``evaluate.py``.

Built on LightningCLI (jsonargparse): ``--config NAME`` (a bare name resolves to ``configs/``),
dotted overrides such as ``--trainer.max_steps 200``, unknown keys rejected by name, and the
resolved config saved in every run directory and inside every checkpoint.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.loggers import CSVLogger, Logger

log = logging.getLogger("graphormer_urpe")

REPO_DIR = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_DIR / "configs"
#: Environment variable through which DDP processes share the run directory chosen by rank 0.
RUN_DIR_ENV = "GRAPHORMER_RUN_DIR"
#: Checkpoint key holding the resolved YAML config, so a checkpoint rebuilds its run alone.
CONFIG_KEY = "graphormer_config_yaml"
PACKAGES = ("torch", "pytorch-lightning", "torch-geometric", "torchmetrics", "ogb", "rdkit", "numpy", "wandb")


def resolve_config_paths(argv: Sequence[str]) -> list[str]:
    """Turn ``--config zinc_subset.yaml`` or ``--config zinc_subset`` into a path under ``configs/``
    when it is not an existing file."""
    args = list(argv)
    for i, arg in enumerate(args):
        name = None
        if arg == "--config" and i + 1 < len(args):
            name, index = args[i + 1], i + 1
        elif arg.startswith("--config="):
            name, index = arg.split("=", 1)[1], i
        if name is None or Path(name).is_file():
            continue
        for candidate in (CONFIG_DIR / name, CONFIG_DIR / f"{name}.yaml"):
            if candidate.is_file():
                args[index] = str(candidate) if index != i else f"--config={candidate}"
                break
        else:
            available = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
            raise SystemExit(f"error: config '{name}' is neither a file nor in {CONFIG_DIR} (available: {available})")
    return args


def configure_logging() -> None:
    """INFO-level messages of this package on stderr, one line each."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(asctime)s %(levelname)s] %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def git_commit() -> str:
    """The repository's current commit (with ``-dirty`` if it has local changes), or ``unknown``."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_DIR,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that decide results."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class EmbedConfig(Callback):
    """Stores the resolved YAML config in every checkpoint."""

    def __init__(self, config_yaml: str) -> None:
        self.config_yaml = config_yaml

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[CONFIG_KEY] = self.config_yaml


class GraphormerCLI(LightningCLI):
    """LightningCLI with run directories, a logger chosen by one key, and data-to-model links.

    Extra top-level keys:
        run_root: directory under which each run gets its own directory.
        init_from: checkpoint whose weights ``train.py`` loads before fitting (see :mod:`graphormer_urpe.finetune`).
        run_name: name of the run directory (default: config name plus a timestamp).
        logger: ``csv`` (default) or ``none``.
    """

    def __init__(self, args: Sequence[str] | None = None, **kwargs: Any) -> None:
        configure_logging()
        # we always pass the (config-resolved) command line as ``args``; Lightning warns about that
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
        argv = resolve_config_paths(sys.argv[1:] if args is None else args)
        self.config_name = next(
            (Path(a.split("=", 1)[1] if a.startswith("--config=") else argv[i + 1]).stem
             for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")),
            "run",
        )
        super().__init__(
            pl.LightningModule,
            pl.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            run=False,
            args=argv,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"default_env": False},
            **kwargs,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--run_root", type=str, default="runs", help="Directory holding one directory per run.")
        parser.add_argument("--run_name", type=str | None, default=None,
                            help="Run directory name (default: config name and a timestamp).")
        parser.add_argument("--logger", type=Literal["csv", "none"], default="csv", help="Where metrics are logged.")
        parser.add_argument("--init_from", type=str | None, default=None,
                            help="train.py: start from this checkpoint's weights; a URPE model takes an RPE "
                                 "checkpoint with C set to ones (paper section 4.2).")
        parser.link_arguments("data.node_vocab", "model.init_args.encoder.node_vocab", apply_on="instantiate")
        parser.link_arguments("data.edge_vocab", "model.init_args.encoder.edge_vocab", apply_on="instantiate")
        parser.link_arguments("data.num_targets", "model.init_args.encoder.num_outputs", apply_on="instantiate")
        # sequence tasks; jsonargparse skips a link whose source attribute the chosen datamodule lacks,
        # so each datamodule feeds exactly the sizes it defines (graph sizes above, sequence sizes here)
        parser.link_arguments("data.vocab_size", "model.init_args.encoder.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.init_args.encoder.num_classes", apply_on="instantiate")
        parser.link_arguments("data.length", "model.init_args.encoder.length", apply_on="instantiate")

    @property
    def run_dir(self) -> Path:
        """This run's directory, shared by every DDP process."""
        if RUN_DIR_ENV not in os.environ:
            name = self.config.get("run_name") or f"{self.config_name}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
            os.environ[RUN_DIR_ENV] = str(Path(self.config["run_root"]) / name)
        return Path(os.environ[RUN_DIR_ENV])

    def _logger(self, run_dir: Path) -> Logger | bool:
        if self.config["logger"] == "csv":
            return CSVLogger(save_dir=str(run_dir), name="", version="")
        return False

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        run_dir = self.run_dir
        trainer_config = self._get(self.config_init, "trainer", default={})
        callbacks = list(trainer_config.get("callbacks") or [])
        monitor, mode = getattr(self.model, "monitor", ("val/loss", "min"))
        callbacks += [
            ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="best-{step}", monitor=monitor, mode=mode,
                            save_last=True, auto_insert_metric_name=False),
            EmbedConfig(self.parser.dump(self.config)),
            RunRecord(run_dir, self.config_name, self.config.get("seed_everything")),
        ]
        if self.config["logger"] != "none":
            callbacks.append(LearningRateMonitor(logging_interval="step"))
        return super().instantiate_trainer(default_root_dir=str(run_dir), logger=self._logger(run_dir),
                                           callbacks=callbacks, **kwargs)


class RunRecord(Callback):
    """At the start of fitting, states what the run is and writes ``run.json`` in the run directory.

    Records the dataset and its split sizes, parameter count, device, precision, seed, git commit,
    package versions and the command line.
    """

    def __init__(self, run_dir: Path, config_name: str, seed: int | None) -> None:
        self.run_dir, self.config_name, self.seed = run_dir, config_name, seed

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        info = {
            "run_dir": str(self.run_dir),
            "config": self.config_name,
            "command": " ".join(sys.argv),
            "dataset": datamodule.describe() if datamodule is not None else None,
            "parameters": count_parameters(pl_module),
            "device": f"{type(trainer.accelerator).__name__} x {trainer.num_devices} x {trainer.num_nodes} node(s)",
            "precision": trainer.precision,
            "seed": self.seed,
            "git_commit": git_commit(),
            "versions": package_versions(),
        }
        log.info("run directory: %s", self.run_dir)
        log.info("dataset: %s", info["dataset"])
        log.info("%s: %s trainable parameters; device %s; precision %s; seed %s", type(pl_module).__name__,
                 f"{info['parameters']:,}", info["device"], info["precision"], self.seed)
        if trainer.is_global_zero:
            write_json(self.run_dir / "run.json", info)


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
