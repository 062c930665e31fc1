"""What every record carries (commit, package versions, parameter count), and JSON written atomically."""

from __future__ import annotations

import json
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from graphormer_urpe.data.files import atomic_write_text

REPO_DIR = Path(__file__).resolve().parents[2]
PACKAGES = ("torch", "pytorch-lightning", "torch-geometric", "torchmetrics", "ogb", "rdkit", "numpy", "wandb")


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


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` as indented JSON, atomically (readers see the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=2, default=str) + "\n")
