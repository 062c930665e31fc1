"""Weights & Biases options, and a logger that never prompts (see docs/running.md, "W&B in three lines")."""

from __future__ import annotations

import hashlib
import logging
import netrc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from lightning_fabric.utilities.rank_zero import rank_zero_only
from pytorch_lightning.loggers import WandbLogger

from graphormer_urpe.data.sources.base import network_reachable
from graphormer_urpe.errors import ConfigError, check_choice, check_int

log = logging.getLogger("graphormer_urpe")


@dataclass
class WandbOptions:
    """Weights & Biases settings, used with ``--logger wandb``.

    Args:
        project: W&B project.
        entity: team or user name (None: your default entity).
        name: run name shown in W&B (None: the run directory's name).
        tags: run tags.
        group: run group, e.g. one experiment over several seeds.
        mode: ``online``, ``offline`` (files only; upload later with ``wandb sync``) or ``disabled``.
        plot_every_n_validations: log an image of the learned B and C every N validations (0: never).
    """

    project: str = "graphormer-urpe"
    entity: str | None = None
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    group: str | None = None
    mode: Literal["online", "offline", "disabled"] = "online"
    plot_every_n_validations: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.project, str) or not self.project.strip():
            raise ConfigError("wandb.project", self.project, "must name a W&B project")
        check_choice("wandb.mode", self.mode, ("online", "offline", "disabled"))
        check_int("wandb.plot_every_n_validations", self.plot_every_n_validations, 0, hint=" (0: never)")


def wandb_url() -> str:
    """The W&B server (``WANDB_BASE_URL`` or the public one)."""
    return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")


def has_api_key() -> bool:
    """Whether an API key is configured (``WANDB_API_KEY`` or ``wandb login``'s netrc entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(urlparse(wandb_url()).hostname or "") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def effective_mode(requested: str) -> str:
    """``requested``, or ``offline`` when an online run could not work (no API key, no network)."""
    if requested != "online":
        return requested
    if not has_api_key():
        reason = "no API key (run `wandb login` or set WANDB_API_KEY)"
    elif not network_reachable(wandb_url(), timeout=3.0):
        reason = f"{wandb_url()} is not reachable"
    else:
        return "online"
    if rank_zero_only.rank == 0:
        log.warning(
            "W&B: %s; logging offline instead, upload later with `wandb sync <run dir>/wandb/offline-run-*`",
            reason,
        )
    return "offline"


def run_id(run_dir: Path) -> str:
    """A W&B run id that is the same for every process and every resume of ``run_dir``."""
    return hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]


def wandb_logger(options: WandbOptions, run_dir: Path) -> WandbLogger:
    """A ``WandbLogger`` writing under ``run_dir/wandb`` with the options' project, names and mode."""
    mode = effective_mode(options.mode)
    os.environ["WANDB_MODE"] = mode  # also governs wandb code paths outside wandb.init: no prompts
    return WandbLogger(
        name=options.name or Path(run_dir).name,
        save_dir=str(run_dir),
        id=run_id(run_dir),
        project=options.project,
        entity=options.entity,
        tags=list(options.tags),
        group=options.group,
        mode=mode,
    )
