"""Checkpoint files and the identity they record: written whole, read with the config they embed, checked to fit a
model and to continue a run (one-line CheckpointError); what makes a dataset the same dataset, and two runs the same
experiment (docs/running.md, "What is safe")."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytorch_lightning as pl
import torch
import yaml
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from torch import nn

from graphormer_urpe.data.loaders import resume_problem
from graphormer_urpe.data.safe_load import directory_problem, not_a_checkpoint
from graphormer_urpe.errors import CheckpointError, ConfigError, import_object, shown
from graphormer_urpe.tasks.base import INITIALISED_FROM, check_layout

if TYPE_CHECKING:
    from graphormer_urpe.data.predictable import RunData

log = logging.getLogger("graphormer_urpe")

#: Checkpoint key holding the resolved YAML config, so a checkpoint rebuilds its run alone.
CONFIG_KEY = "graphormer_config_yaml"
#: Name of the checkpoint written every N steps and on preemption.
LAST_CHECKPOINT = "last.ckpt"
#: Parameter names listed per kind of mismatch before "...".
SHOWN_KEYS = 5


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint whole or not at all: into ``.<name>.partial-<pid>`` beside it, flushed, renamed over it."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
        try:
            with open(partial, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a Lightning checkpoint on the CPU (``weights_only``), or raise :class:`CheckpointError`."""
    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file():  # a transformers directory, converted by its command
        raise CheckpointError(directory_problem(path))
    if path.is_dir():
        found = sorted(str(p) for p in path.rglob("*.ckpt"))
        raise CheckpointError(
            f"checkpoint {path} is a directory; name a checkpoint file"
            + (f", e.g. {', '.join(found[:3])}" if found else " (it holds no .ckpt file)")
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises RuntimeError, EOFError, UnpicklingError ... for bad files
        raise CheckpointError(not_a_checkpoint(path, error)) from None
    if not isinstance(checkpoint, Mapping) or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is a torch file but not a Lightning checkpoint (no 'state_dict')")
    return dict(checkpoint)


def embedded_config(path: str | Path) -> str:
    """The resolved YAML config that ``graphormer-urpe train`` stored in the checkpoint."""
    checkpoint = load_checkpoint(path)
    if CONFIG_KEY not in checkpoint:
        raise CheckpointError(f"{path} holds no config (not written by graphormer-urpe train); pass --config")
    check_layout(path, checkpoint.get("hyper_parameters") or {})
    return checkpoint[CONFIG_KEY]


@dataclass(frozen=True)
class RunConfig:
    """What commands read of a run's resolved config (``config.yaml``, or the one a checkpoint embeds): its data
    module, its data source and its task, each a class path with its arguments. The one reader of a run's config:
    :func:`run_config`."""

    data_class_path: str  # data.class_path, e.g. graphormer_urpe.data.datamodule.GraphDataModule
    data_args: dict[str, Any]  # data.init_args: batch_size, max_nodes, path_order, ...
    source_class_path: str | None  # data.init_args.source.class_path; None for data without a source (synthetic)
    source_args: dict[str, Any]  # data.init_args.source.init_args: path, targets, smiles_column, descriptors, ...
    model_class_path: str | None  # model.class_path, e.g. graphormer_urpe.tasks.GraphRegression

    @property
    def data_name(self) -> str:
        """The class name of the source, else of the data module: ``SmilesTable``, ``SyntheticGraphs``."""
        return (self.source_class_path or self.data_class_path).rsplit(".", 1)[-1]

    def source_class(self) -> type:
        """The data source's class, imported (:class:`ConfigError` when it cannot be)."""
        return import_object("data.source.class_path", self.source_class_path or "")

    def source(self) -> Any:
        """The data source, built from its arguments as the run built it."""
        return self.source_class()(**self.source_args)


def run_config(config_yaml: str) -> RunConfig:
    """Read a run's resolved config (YAML text) into a :class:`RunConfig`."""
    config = yaml.safe_load(config_yaml) or {}
    data = config.get("data") or {}
    data_args = data.get("init_args") or {}
    source = data_args.get("source")
    model = config.get("model") or {}
    return RunConfig(
        data_class_path=data.get("class_path", ""),
        data_args=dict(data_args),
        source_class_path=source.get("class_path") if isinstance(source, Mapping) else None,
        source_args=dict(source.get("init_args") or {}) if isinstance(source, Mapping) else {},
        model_class_path=model.get("class_path"),
    )


def reduced_checkpoint(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """What a model needs of a checkpoint to predict or to start another run (``--init_from``): its weights (in
    float32), hyper-parameters, config and records; the optimiser, schedule, loop and callback states left out."""
    reduced = {key: checkpoint[key] for key in KEPT_KEYS if key in checkpoint}
    reduced["state_dict"] = {
        name: tensor.float() if tensor.is_floating_point() else tensor
        for name, tensor in checkpoint["state_dict"].items()
    }
    return reduced


def saved_loader_states(checkpoint: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The saved positions of the training loaders (``ResumableLoader.state_dict``) in a Lightning checkpoint."""
    fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
    states = fit_loop.get("state_dict", {}).get("combined_loader", [])
    return [state for state in states if isinstance(state, Mapping) and "global_batch" in state]


def state_dict_problems(saved: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> list[str]:
    """Missing keys, unexpected keys and shape differences between two state dicts, one line each."""
    missing = [k for k in expected if k not in saved]
    unexpected = [k for k in saved if k not in expected]
    reshaped = [
        f"{k} {tuple(saved[k].shape)} in the checkpoint vs {tuple(v.shape)} in the model"
        for k, v in expected.items()
        if k in saved and tuple(saved[k].shape) != tuple(v.shape)
    ]
    found = (
        (missing, "parameters of the model are not in the checkpoint"),
        (unexpected, "checkpoint parameters are not in the model"),
        (reshaped, "parameters differ in shape"),
    )
    return [
        f"{len(names)} {problem}: {', '.join(names[:SHOWN_KEYS])}"
        + (f" ... (+{len(names) - SHOWN_KEYS} more)" if len(names) > SHOWN_KEYS else "")
        for names, problem in found
        if names
    ]


def check_checkpoint(path: str | Path, module: nn.Module, hparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Load ``path`` and make sure its weights fit ``module``, naming the differing ``hparams`` that explain it."""
    checkpoint = load_checkpoint(path)
    if problems := state_dict_problems(checkpoint["state_dict"], module.state_dict()):
        saved_hparams, current = flatten(checkpoint.get("hyper_parameters") or {}), flatten(hparams or {})
        differing = [
            f"{k}: checkpoint {saved_hparams[k]!r}, config {current[k]!r}"
            for k in sorted(set(saved_hparams) & set(current))
            if saved_hparams[k] != current[k]
        ]
        lines = [f"checkpoint {path} does not fit the configured model:", *[f"  - {p}" for p in problems]]
        if differing:
            lines.append("  hyper-parameters that differ: " + "; ".join(differing))
        lines.append(
            "  use the config the checkpoint was trained with (graphormer-urpe evaluate reads it from the checkpoint)"
        )
        raise CheckpointError("\n".join(lines))
    return checkpoint


#: Options a resume takes from the checkpoint (the optimiser's state, the random state) rather than from the
#: command line: one that differs from the checkpoint's would be recorded but not used.
RESUMED_FROM_THE_CHECKPOINT = (
    "model.init_args.optim.lr",
    "model.init_args.optim.weight_decay",
    "model.init_args.optim.adam_eps",
    "seed_everything",
)


def check_resume(
    ckpt_path: str, task: pl.LightningModule, max_steps: int, config_yaml: str, seed_drawn: bool, data: RunData
) -> int:
    """Stop (:class:`CheckpointError`, :class:`ConfigError`) unless ``ckpt_path`` fits ``task``, was trained on
    ``data`` with the options a resume takes from it (:data:`RESUMED_FROM_THE_CHECKPOINT`; those of ``config_yaml``,
    the seed unless ``seed_drawn``), continues in the same global batches and has steps left to reach or evaluate
    (``max_steps``, ``trainer.max_steps``, not below its step); returns the step it continues from."""
    checkpoint = check_checkpoint(ckpt_path, task, task.hparams)
    loader_states = saved_loader_states(checkpoint)
    step = int(checkpoint["global_step"])
    if 0 <= max_steps < step:
        raise ConfigError(
            "trainer.max_steps",
            max_steps,
            f"is below the step of {ckpt_path} ({step}): a resume "
            f"continues a run and cannot shorten it; pass at least {step} ({step} evaluates it again), "
            "or start a new run",
        )
    if CONFIG_KEY in checkpoint:
        trained, now = yaml.safe_load(checkpoint[CONFIG_KEY]), yaml.safe_load(config_yaml)
        for key in RESUMED_FROM_THE_CHECKPOINT:
            old, new = _dotted(trained, key), _dotted(now, key)
            if old != new and not (key == "seed_everything" and seed_drawn):
                raise ConfigError(
                    key.replace("init_args.", ""),
                    new,
                    f"differs from {ckpt_path}'s {shown(old)}, "
                    "which a resume continues with (optimiser and random state); resume with "
                    f"{shown(old)}, or start a new run from its weights with --init_from {ckpt_path}",
                )
    recorded = checkpoint.get(DATA_IDENTITY_KEY)
    if recorded is None:
        log.warning(
            "%s records no identity of its data (written by an earlier version): the data are not compared", ckpt_path
        )
    elif differing := differences(recorded, data_identity(data), "checkpoint", "now"):
        raise CheckpointError(
            f"{ckpt_path} was trained on other data than this run has: {differing}; a resume "
            "continues on its run's data (start a new run, or take the weights with --init_from)"
        )
    for state in loader_states:
        problem = resume_problem(state, data.batch_size, data.bucket_window)
        if problem is not None:
            raise CheckpointError(f"{ckpt_path}: {problem}")
    return step


def _dotted(config: dict, key: str) -> object:
    """The value of a dotted key in a resolved config (None where absent)."""
    for part in key.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


# ----------------------------------------------------------------------------- identity of data and configs
# What makes a dataset the same dataset (what checkpoints record and resumes and evaluations compare), and two
# runs the same experiment (what a restart and graphormer-urpe sweep compare): docs/running.md, "What is safe".

#: Checkpoint key of the :func:`data_identity` of the data the checkpoint was trained on.
DATA_IDENTITY_KEY = "graphormer_data_identity"
#: What :func:`reduced_checkpoint` keeps of a checkpoint (the shipped one, an ensemble's members).
KEPT_KEYS = (
    "epoch",
    "global_step",
    "pytorch-lightning_version",
    "state_dict",
    "hparams_name",
    "hyper_parameters",
    CONFIG_KEY,
    DATA_IDENTITY_KEY,
    INITIALISED_FROM,
)
#: Top-level config keys that name, place or resume a run without changing what it computes.
PLACEMENT_KEYS = ("run_name", "run_root", "ckpt_path")
#: Config keys (dotted) that decide where and how fast a run executes and what it reports, not what it computes
#: (global batches; a compiled step and padded batches compute the same to float rounding).
EXECUTION_KEYS = (
    "logger",
    "wandb",
    "checkpoint",
    "threads",
    "trainer.accelerator",
    "trainer.strategy",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
    "data.init_args.num_workers",
    "data.init_args.preprocess_workers",
    "model.init_args.compile",
    "data.init_args.pad_nodes_to",
)
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
        return {
            key: kept(value, f"{prefix}{key}.") if isinstance(value, Mapping) else value
            for key, value in mapping.items()
            if f"{prefix}{key}" not in dropped
        }

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


#: A key's value where a mapping lacks it (:func:`differences`).
ABSENT = object()


def _shown(values: Mapping[str, Any], key: str) -> str:
    return repr(values[key]) if key in values else "absent"


def differences(recorded: Mapping[str, Any], current: Mapping[str, Any], recorded_as: str, current_as: str) -> str:
    """The keys (dotted) where ``recorded`` and ``current`` differ, as one line, e.g. ``sha1: '0d41'
    (checkpoint) vs '9bc1' (now)``; an empty string when they are equal. A key one side lacks and the other holds
    as None (null) is no difference: an option added since, at its default (off), configures what the record
    configured without it (a run started before ``data.source.fingerprints`` existed resumes)."""
    old, new = flatten(recorded), flatten(current)
    keys = [
        key
        for key in sorted(old.keys() | new.keys())
        if old.get(key, ABSENT) != new.get(key, ABSENT)
        and not (old.get(key, None) is None and new.get(key, None) is None)
    ]  # absent against null
    shown = [
        f"{key}: {_shown(old, key)} ({recorded_as}) vs {_shown(new, key)} ({current_as})"
        for key in keys[:SHOWN_DIFFERENCES]
    ]
    more = f"; +{len(keys) - SHOWN_DIFFERENCES} more" if len(keys) > SHOWN_DIFFERENCES else ""
    return "; ".join(shown) + more


def compare_data(
    ckpt: str, checkpoint: Mapping[str, Any], current: Mapping[str, Any], allow_other_data: bool
) -> dict[str, Any]:
    """Compare the data an evaluation rebuilt with those the checkpoint records; returns what its result records."""
    recorded = checkpoint.get(DATA_IDENTITY_KEY)
    if recorded is None:
        log.warning(
            "%s records no identity of its data (written by an earlier version): the data are not compared", ckpt
        )
        return {"same_data_as_training": None}
    differing = differences(recorded, current, "checkpoint", "now")
    if not differing:
        return {"same_data_as_training": True}
    if not allow_other_data:
        raise CheckpointError(
            f"{ckpt} was trained on other data than these: {differing}; evaluate on the "
            "checkpoint's data, or pass --allow_other_data to evaluate on these anyway"
        )
    log.warning("evaluating on OTHER data than %s was trained on (--allow_other_data): %s", ckpt, differing)
    return {"same_data_as_training": False, "data_differences": differing}
