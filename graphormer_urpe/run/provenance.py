"""Where a result came from: the commit of the checkout that runs the package and the versions of the packages that
decide results, as every record (a run's ``run.json``, a saved ensemble's, a submission's) carries them."""

from __future__ import annotations

import platform
import subprocess
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: The packages whose versions a record names.
PACKAGES = ("torch", "pytorch-lightning", "torch-geometric", "torchmetrics", "ogb", "rdkit", "numpy", "wandb")
#: The project's name in ``pyproject.toml``: a folder holding
#: the package is a checkout of this project only if so.
PROJECT = "graphormer-urpe"
#: The commit a run records when the package is not in a git checkout of this project (an installed wheel).
NO_CHECKOUT = "no git checkout"


def git_commit() -> str:
    """The commit of the checkout that holds the running package (with ``-dirty`` if it has local changes),
    :data:`NO_CHECKOUT` when the package is not in a checkout of this project (installed into site-packages, also
    where site-packages lies inside some other repository), or ``unknown`` when git cannot tell."""
    root = Path(__file__).resolve().parents[2]  # the folder above the package
    if not _names_this_project(root / "pyproject.toml"):
        return NO_CHECKOUT
    try:
        toplevel = _git(root, "rev-parse", "--show-toplevel")
        if Path(toplevel).resolve() != root:  # a copy of the sources inside another repository
            return NO_CHECKOUT
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
        return _git(root, "rev-parse", "HEAD") + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _names_this_project(pyproject: Path) -> bool:
    try:
        return tomllib.loads(pyproject.read_text())["project"]["name"] == PROJECT
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return False


def _git(directory: Path, *args: str) -> str:
    """The output of ``git ARGS`` run in ``directory``, stripped; raises on failure."""
    return subprocess.run(
        ["git", *args], cwd=directory, capture_output=True, text=True, timeout=5, check=True
    ).stdout.strip()


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that decide results."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions
