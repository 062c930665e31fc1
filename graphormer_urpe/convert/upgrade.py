"""``graphormer-urpe convert upgrade OLD.ckpt NEW.ckpt``: our checkpoints written before issue 13 in
today's layout, which alone is read elsewhere (``docs/tasks.md``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

from graphormer_urpe.convert.common import ConversionError, check_output
from graphormer_urpe.errors import InputError, import_object
from graphormer_urpe.run.checkpoints import CONFIG_KEY, load_checkpoint

log = logging.getLogger(__name__)

# task arguments until they became optim
OPTIM_KEYS = ("lr", "warmup_steps", "end_lr", "weight_decay", "adam_eps")
#: Old task class paths (the layout before issue 13 and the one before it) and what they are now.
RENAMED_TASKS = {
    **dict.fromkeys(
        (
            "graphormer_urpe.tasks.GraphClassification",
            "graphormer_urpe.tasks.graph.GraphClassification",
            "graphormer_urpe.tasks.NodeClassification",
            "graphormer_urpe.tasks.graph.NodeClassification",
            "graphormer_urpe.tasks.NodeTagging",
            "graphormer_urpe.tasks.tokens.NodeTagging",
            "graphormer_urpe.classification.NodeTagging",
        ),
        "graphormer_urpe.tasks.Classification",
    ),
    "graphormer_urpe.classification.SequenceTagging": "graphormer_urpe.tasks.SequenceTagging",
}
# old tasks whose targets were multi-class by their class
MULTICLASS_TASKS = ("NodeClassification", "NodeTagging")
OLD_ACCURACY, ACCURACY = "val/acc", "val/accuracy"


def upgraded_arguments(class_path: str, init_args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A task's class path and arguments (hyper-parameters or a config's ``init_args``) in today's layout."""
    arguments = dict(init_args)
    moved = {key: arguments.pop(key) for key in OPTIM_KEYS if key in arguments}
    if moved:
        arguments["optim"] = {**moved, **(arguments.get("optim") or {})}
    return RENAMED_TASKS.get(class_path, class_path), arguments


def upgraded_checkpoint(checkpoint: Mapping[str, Any], source: Path) -> tuple[dict[str, Any], list[str]]:
    """``checkpoint`` in today's layout (``_class_path`` names its task), and what was changed, one line each."""
    hparams = checkpoint.get("hyper_parameters")
    if not isinstance(hparams, Mapping) or "encoder" not in hparams:
        raise ConversionError(
            f"{source}: it holds no task hyper-parameters: not a checkpoint written by graphormer-urpe train"
        )
    config = yaml.safe_load(checkpoint[CONFIG_KEY]) if CONFIG_KEY in checkpoint else None
    model = config.get("model") if isinstance(config, dict) else None
    class_path = hparams.get("_class_path") or (model or {}).get("class_path")
    if not class_path:
        raise ConversionError(
            f"{source}: it names no task class (no _class_path, no embedded config): convert it by hand"
        )
    upgraded, changes = dict(checkpoint), []
    saved = {key: value for key, value in hparams.items() if key != "_class_path"}
    new_path, arguments = upgraded_arguments(class_path, saved)
    if class_path.rsplit(".", 1)[-1] in MULTICLASS_TASKS:
        arguments.setdefault("target_kind", "multiclass")
    if (new_path, arguments) != (class_path, saved):
        changes.append(f"hyper-parameters: task {class_path} -> {new_path}, optimiser arguments under optim")
    upgraded["hyper_parameters"] = {**arguments, "_class_path": new_path}
    if isinstance(model, dict):
        model["class_path"], model["init_args"] = upgraded_arguments(
            model.get("class_path", ""), model.get("init_args") or {}
        )
        dumped = yaml.safe_dump(config, sort_keys=False)
        if yaml.safe_load(dumped) != yaml.safe_load(checkpoint[CONFIG_KEY]):
            upgraded[CONFIG_KEY] = dumped
            changes.append("embedded config: model.class_path and model.init_args.optim")
    callbacks = checkpoint.get("callbacks")
    if isinstance(callbacks, Mapping):
        upgraded["callbacks"] = {}
        for key, state in callbacks.items():
            if isinstance(state, Mapping) and state.get("monitor") == OLD_ACCURACY:
                key = key.replace(f"'monitor': '{OLD_ACCURACY}'", f"'monitor': '{ACCURACY}'")
                state = {**state, "monitor": ACCURACY}
                changes.append(f"best-checkpoint callback: monitors {ACCURACY} (was {OLD_ACCURACY})")
            upgraded["callbacks"][key] = state
    return upgraded, changes


def upgrade(source: str | Path, output: str | Path) -> list[str]:
    """Write ``source`` in today's layout to ``output`` once its task rebuilds from it; returns the changes made."""
    source = Path(source)
    checkpoint = load_checkpoint(source)  # first: a message names the real problem
    output = check_output(output, companions=())
    upgraded, changes = upgraded_checkpoint(checkpoint, source)
    if not changes:
        raise ConversionError(f"{source} is in today's layout already: use it as it is")
    task_class = import_object("model.class_path", upgraded["hyper_parameters"]["_class_path"])
    partial = output.with_name(f".{output.name}.partial")
    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {**upgraded, "converted_from": {"source": str(source), "format": "graphormer-urpe before issue 13"}},
        partial,
    )
    try:
        task_class.from_checkpoint(partial)
    except (InputError, TypeError, RuntimeError) as error:
        partial.unlink()
        raise ConversionError(
            f"{source}: the converted checkpoint does not rebuild {task_class.__name__}: {str(error).splitlines()[0]}"
        ) from error
    os.replace(partial, output)
    log.info("%s -> %s: %s", source, output, "; ".join(changes))
    return changes
