"""What makes a dataset the same dataset, and two runs the same experiment (docs/running.md, "What is safe")."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from graphormer_urpe.errors import CheckpointError

if TYPE_CHECKING:
    from graphormer_urpe.data.predictable import RunData

log = logging.getLogger("graphormer_urpe")

#: Checkpoint key of the :func:`data_identity` of the data the checkpoint was trained on.
DATA_IDENTITY_KEY = "graphormer_data_identity"
#: Top-level config keys that name, place or resume a run without changing what it computes.
PLACEMENT_KEYS = ("run_name", "run_root", "ckpt_path")
#: Config keys (dotted) that decide where a run executes and what it reports, not what it computes (global batches).
EXECUTION_KEYS = ("logger", "wandb", "checkpoint", "trainer.accelerator", "trainer.strategy", "trainer.devices",
                  "trainer.num_nodes", "trainer.enable_progress_bar", "trainer.enable_model_summary",
                  "trainer.log_every_n_steps", "data.init_args.num_workers", "data.init_args.preprocess_workers")
#: Differences named in a message before "+N more".
SHOWN_DIFFERENCES = 5


def data_identity(data: RunData) -> dict[str, Any]:
    """The identity of the dataset ``data`` serves (:meth:`RunData.identity`), as JSON data (lists, not tuples):
    as checkpoints record it."""
    return json.loads(json.dumps(dict(data.identity())))


def config_identity(config: Mapping[str, Any], ignore: Iterable[str] = ()) -> dict[str, Any]:
    """``config`` (plain data) without :data:`PLACEMENT_KEYS`, :data:`EXECUTION_KEYS` and ``ignore`` (dotted)."""
    dropped = {*PLACEMENT_KEYS, *EXECUTION_KEYS, *ignore}

    def kept(mapping: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        return {key: kept(value, f"{prefix}{key}.") if isinstance(value, Mapping) else value
                for key, value in mapping.items() if f"{prefix}{key}" not in dropped}

    return kept(config, "")


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``mapping`` with nested mappings flattened to dotted keys (an empty mapping is a value)."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _shown(values: Mapping[str, Any], key: str) -> str:
    return repr(values[key]) if key in values else "absent"


def differences(recorded: Mapping[str, Any], current: Mapping[str, Any], recorded_as: str, current_as: str) -> str:
    """The keys (dotted) where ``recorded`` and ``current`` differ, as one line, e.g. ``sha1: '0d41'
    (checkpoint) vs '9bc1' (now)``; an empty string when they are equal."""
    old, new = flatten(recorded), flatten(current)
    keys = [key for key in sorted(old.keys() | new.keys()) if key not in old or key not in new or old[key] != new[key]]
    shown = [f"{key}: {_shown(old, key)} ({recorded_as}) vs {_shown(new, key)} ({current_as})"
             for key in keys[:SHOWN_DIFFERENCES]]
    more = f"; +{len(keys) - SHOWN_DIFFERENCES} more" if len(keys) > SHOWN_DIFFERENCES else ""
    return "; ".join(shown) + more


def compare_data(ckpt: str, checkpoint: Mapping[str, Any], current: Mapping[str, Any],
                 allow_other_data: bool) -> dict[str, Any]:
    """Compare the data an evaluation rebuilt with those the checkpoint records; returns what its result records."""
    recorded = checkpoint.get(DATA_IDENTITY_KEY)
    if recorded is None:
        log.warning("%s records no identity of its data (written by an earlier version): the data are not "
                    "compared", ckpt)
        return {"same_data_as_training": None}
    differing = differences(recorded, current, "checkpoint", "now")
    if not differing:
        return {"same_data_as_training": True}
    if not allow_other_data:
        raise CheckpointError(f"{ckpt} was trained on other data than these: {differing}; evaluate on the "
                              "checkpoint's data, or pass --allow-other-data to evaluate on these anyway")
    log.warning("evaluating on OTHER data than %s was trained on (--allow-other-data): %s", ckpt, differing)
    return {"same_data_as_training": False, "data_differences": differing}
