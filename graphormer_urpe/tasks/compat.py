"""Configs and checkpoints written before the task family was merged (issue 13), read in today's layout.

Three things changed:

* the optimiser arguments ``lr``, ``warmup_steps``, ``end_lr``, ``weight_decay`` and ``adam_eps``
  moved from the task's own arguments into one ``optim`` group (:class:`~graphormer_urpe.tasks.OptimConfig`);
* ``GraphClassification``, ``NodeClassification`` (MAG240M) and ``NodeTagging`` (synthetic regular
  graphs) became one :class:`~graphormer_urpe.tasks.Classification`; their old names stay importable
  as aliases, so old ``class_path`` values keep working;
* ``val/acc`` became ``val/accuracy`` (a logged name only: nothing to migrate).

:func:`migrate_config` rewrites a config (the one embedded in an old checkpoint, which ``evaluate.py``
rebuilds its run from), :func:`checkpoint_init_args` the hyper-parameters of an old checkpoint
(``from_checkpoint``). ``--init_from`` and ``--ckpt_path`` read weights only, which did not change.
A user's config or command line in the old layout is refused with the lines to change
(:func:`old_layout_arguments`); old class names keep working.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

#: The optimiser arguments that every task took before they became ``optim``.
OPTIM_KEYS = ("lr", "warmup_steps", "end_lr", "weight_decay", "adam_eps")
CLASSIFICATION = "graphormer_urpe.tasks.Classification"
#: Old task class paths (this layout's and the one before it) and what they are now.
RENAMED_TASKS = {
    "graphormer_urpe.tasks.GraphClassification": CLASSIFICATION,
    "graphormer_urpe.tasks.graph.GraphClassification": CLASSIFICATION,
    "graphormer_urpe.tasks.NodeClassification": CLASSIFICATION,
    "graphormer_urpe.tasks.graph.NodeClassification": CLASSIFICATION,
    "graphormer_urpe.tasks.NodeTagging": CLASSIFICATION,
    "graphormer_urpe.tasks.tokens.NodeTagging": CLASSIFICATION,
    "graphormer_urpe.classification.NodeTagging": CLASSIFICATION,
    "graphormer_urpe.classification.SequenceTagging": "graphormer_urpe.tasks.SequenceTagging",
}
#: Old tasks whose kind of target was fixed by the class (the data links ``target_kind`` now).
MULTICLASS_TASKS = ("NodeClassification", "NodeTagging")


def _flat_optim(init_args: dict[str, Any]) -> dict[str, Any]:
    """``init_args`` with the top-level optimiser arguments moved into ``optim``."""
    moved = {key: init_args.pop(key) for key in OPTIM_KEYS if key in init_args}
    if moved:
        init_args["optim"] = {**moved, **(init_args.get("optim") or {})}
    return init_args


def migrate_config(config_yaml: str) -> str:
    """A config in today's layout: renamed task classes, optimiser arguments under ``optim``.

    A config already in today's layout comes back unchanged. Used on the config embedded in a
    checkpoint, so checkpoints of the old layout still evaluate.
    """
    config = yaml.safe_load(config_yaml)
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict) or not old_layout_problems(model):
        return config_yaml
    old = model.get("class_path")
    model["class_path"] = RENAMED_TASKS.get(old, old)
    model["init_args"] = _flat_optim(dict(model.get("init_args") or {}))
    log.info("config written by an older version: read with model.class_path %s and the optimiser arguments "
             "under model.init_args.optim", model["class_path"])
    return yaml.safe_dump(config, sort_keys=False)


def old_layout_problems(model: Mapping[str, Any]) -> list[str]:
    """What in a config's ``model`` section is in the old layout, one line each with the new form."""
    problems = []
    old = model.get("class_path")
    if old in RENAMED_TASKS:
        problems.append(f"model.class_path {old} is now {RENAMED_TASKS[old]}")
    init_args = model.get("init_args") or {}
    for key in OPTIM_KEYS:
        if key in init_args:
            problems.append(f"model.init_args.{key} is now model.init_args.optim.{key}")
    return problems


def checkpoint_init_args(checkpoint: Mapping[str, Any], cls: type) -> dict[str, Any]:
    """The constructor arguments of ``cls`` saved in a checkpoint (``encoder`` and ``optim`` as dicts).

    Reads both layouts: today's, and the old one (optimiser arguments at the top level; the kind of
    target implied by the old class ``NodeClassification`` or ``NodeTagging``, named by the checkpoint's
    ``_class_path``).

    Raises:
        ValueError: a saved argument ``cls`` does not take (a checkpoint of another task).
    """
    saved = dict(checkpoint["hyper_parameters"])
    old_class = str(saved.get("_class_path", "")).rsplit(".", 1)[-1]
    # LightningCLI adds private entries such as ``_class_path``
    hparams = _flat_optim({k: v for k, v in saved.items() if not k.startswith("_")})
    hparams.setdefault("optim", {})
    accepted = inspect.signature(cls.__init__).parameters
    if old_class in MULTICLASS_TASKS and "target_kind" in accepted:
        hparams.setdefault("target_kind", "multiclass")
    unknown = sorted(set(hparams) - set(accepted))
    if unknown:
        raise ValueError(f"the checkpoint's hyper-parameters {unknown} are not arguments of {cls.__name__} (a "
                         f"checkpoint of {saved.get('_class_path', 'another task')}?): load it with its own task class")
    return hparams


#: ``--model.lr`` or ``--model.init_args.lr`` (with ``=VALUE`` or not), for every optimiser argument.
_OLD_FLAG = re.compile(r"--model\.(init_args\.)?(" + "|".join(OPTIM_KEYS) + r")(=.*)?$")


def old_layout_arguments(argv: Sequence[str]) -> list[str]:
    """Optimiser arguments given in the old layout on a command line or in its ``--config`` files,
    one line each with the new form (class names are not listed: the old ones still work)."""
    problems = []
    for i, arg in enumerate(argv):
        if (match := _OLD_FLAG.match(arg)) is not None:
            problems.append(f"{arg.split('=', 1)[0]} is now --model.{match.group(1) or ''}optim.{match.group(2)}")
        config = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else \
            arg.split("=", 1)[1] if arg.startswith("--config=") else None
        if config is not None and Path(config).is_file():
            model = (yaml.safe_load(Path(config).read_text()) or {}).get("model")
            if isinstance(model, dict):
                problems += [f"{config}: {line}" for line in old_layout_problems(model) if "optim" in line]
    return problems
