"""The experiment configs, one YAML per experiment, shipped inside the package: ``--config NAME`` finds them from
any directory (``graphormer-urpe train --config qm9_gap``), a path to a file of one's own still works."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: The folder of the shipped configs (package data, read through ``importlib.resources``).
CONFIG_DIR = Path(str(resources.files(__name__)))


def shipped_config(name: str) -> Path | None:
    """The shipped config called ``name`` (``zinc_subset`` or ``zinc_subset.yaml``), or None.

    ``configs/zinc_subset.yaml`` finds it too: configs lived in a ``configs/`` folder beside the package until they
    became package data, and earlier commands (run records, the shipped checkpoint's provenance) name them so."""
    stem = Path(name).name if Path(name).parent == Path("configs") else name
    for candidate in (CONFIG_DIR / stem, CONFIG_DIR / f"{stem}.yaml"):
        if candidate.suffix == ".yaml" and candidate.is_file():
            return candidate
    return None


def shipped_config_names() -> list[str]:
    """The names of the shipped configs, sorted."""
    return sorted(path.stem for path in CONFIG_DIR.glob("*.yaml"))
