"""Start a run from the weights of another: ``graphormer-urpe train --config ANY --init_from CKPT``. See
docs/finetuning.md."""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from graphormer_urpe.data.files import sha256_file
from graphormer_urpe.data.spec import DataSpec, SequenceSpec
from graphormer_urpe.errors import CheckpointError, ConfigError, import_object, shown
from graphormer_urpe.model.attention import RelativeScale
from graphormer_urpe.pretrained import resolve_checkpoint
from graphormer_urpe.run.checkpoints import CONFIG_KEY, load_checkpoint, run_config, state_dict_problems
from graphormer_urpe.tasks.base import INITIALISED_FROM, GraphormerTask, check_layout, plain
from graphormer_urpe.tasks.optimiser import is_head

log = logging.getLogger("graphormer_urpe")


@dataclass(frozen=True)
class SourceCheckpoint:
    """A checkpoint read for ``--init_from``: weights, network config, targets, origin, data (None: unrecorded)."""

    path: str
    sha256: str
    state: dict[str, torch.Tensor]
    encoder: Any
    target_kind: str | None
    target_names: list[str] | None
    origin: dict[str, Any]
    data_name: str
    path_order: str | None


def read_source(path: str, task_class: type) -> SourceCheckpoint:
    """Read ``path`` (or the shipped checkpoint, named ``pretrained``) as the source of a run of ``task_class``, or
    raise a one-line :class:`CheckpointError`."""
    path = resolve_checkpoint(path)
    config_class = getattr(task_class, "config_class", None)
    if config_class is None:
        raise CheckpointError(
            f"--init_from {path}: {task_class.__name__} is not a graphormer_urpe task "
            "(GraphormerTask): it cannot take the checkpoint's architecture"
        )
    try:
        checkpoint = load_checkpoint(path)
    except CheckpointError as error:
        raise CheckpointError(f"--init_from: {error}") from None
    hparams = checkpoint.get("hyper_parameters") or {}
    check_layout(path, hparams)
    saved = hparams.get("encoder")
    if not isinstance(saved, Mapping):
        raise CheckpointError(
            f"--init_from {path}: the checkpoint records no encoder settings "
            "(hyper_parameters['encoder']); take one written by graphormer-urpe train or by "
            "graphormer-urpe convert"
        )
    if unknown := sorted(set(saved) - {f.name for f in dataclasses.fields(config_class)}):
        raise CheckpointError(
            f"--init_from {path}: its encoder has settings that {config_class.__name__} does not "
            f"know: {', '.join(unknown)} (a checkpoint of another network, or of a newer version?)"
        )
    try:
        encoder = config_class(**saved)
    except ConfigError as error:
        raise CheckpointError(f"--init_from {path}: its encoder settings are not valid: {error}") from None
    converted = checkpoint.get("converted_from")
    if CONFIG_KEY in checkpoint:  # written by graphormer-urpe train (or upgraded from an earlier layout of ours)
        config = run_config(checkpoint[CONFIG_KEY])
        data_name, path_order = config.data_name, config.data_args.get("path_order")
    elif converted is not None:  # official Graphormer's or transformers' weights, trained on official paths
        data_name, path_order = f"{converted['format']} checkpoint", "official"
    else:
        data_name, path_order = "unknown data", None
    names = hparams.get("target_names")
    return SourceCheckpoint(
        path=str(path),
        sha256=sha256_file(Path(path)),
        state=dict(checkpoint["state_dict"]),
        encoder=encoder,
        target_kind=hparams.get("target_kind"),
        target_names=None if names is None else list(names),
        origin={
            "converted_from": converted,
            "config": checkpoint.get(CONFIG_KEY),
            "initialised_from": checkpoint.get(INITIALISED_FROM),
            "global_step": checkpoint.get("global_step"),
        },
        data_name=data_name,
        path_order=path_order,
    )


def architecture(source: SourceCheckpoint) -> dict[str, Any]:
    """The encoder fields the checkpoint decides (its config class's ``ARCHITECTURE``), with the checkpoint's values."""
    return {field: getattr(source.encoder, field) for field in type(source.encoder).ARCHITECTURE}


def take_architecture(encoder: MutableMapping[str, Any], source: SourceCheckpoint) -> dict[str, dict[str, Any]]:
    """Set the run's encoder config's architecture to the checkpoint's; warn about and return the replaced fields."""
    overridden = {}
    for field, value in architecture(source).items():
        if encoder[field] != value:
            overridden[field] = {"config": encoder[field], "checkpoint": value}
        encoder[field] = value
    if overridden:
        log.warning(
            "--init_from %s decides the encoder's architecture; replaced in the config: %s",
            source.path,
            ", ".join(
                f"{field} {shown(change['config'])} -> {shown(change['checkpoint'])}"
                for field, change in overridden.items()
            ),
        )
    return overridden


def config_as_recorded(config: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved config as plain data (what ``graphormer-urpe train --print_config`` prints) as its run records
    it in ``config.yaml``: with ``init_from``, the encoder's architecture is the checkpoint's (``train`` sets it before
    it builds the model, :func:`take_architecture`). What ``graphormer-urpe sweep`` compares with the config of a
    seed's run, so that a sweep that fine-tunes reuses and resumes its own seeds. A checkpoint that cannot be read
    raises a one-line :class:`CheckpointError` naming it."""
    recorded = copy.deepcopy(dict(config))
    if recorded.get("init_from"):
        task_class = import_object("model.class_path", recorded["model"]["class_path"])
        recorded["model"]["init_args"]["encoder"].update(architecture(read_source(recorded["init_from"], task_class)))
    return recorded


@dataclass(frozen=True)
class Initialisation:
    """What :func:`initialise` loads, the URPE tables C it sets to ones, and the record of the weights' source."""

    weights: dict[str, torch.Tensor]
    reset_to_ones: list[str]
    record: dict[str, Any]


def plan_initialisation(
    source: SourceCheckpoint,
    task: GraphormerTask,
    spec: DataSpec | SequenceSpec,
    data_name: str,
    path_order: str | None,
    overridden: Mapping[str, Any],
) -> Initialisation:
    """Check that ``source`` can start ``task`` on the data ``spec`` declares (named ``data_name`` in messages,
    its shortest paths in ``path_order``, None: no choice of order), and decide what loads."""
    new, old = spec.encoder_fields(), {field: getattr(source.encoder, field) for field in spec.encoder_fields()}
    if any(plain(old[field]) != plain(new[field]) for field in spec.FEATURE_FIELDS):
        raise CheckpointError(
            f"--init_from {source.path}: its feature tables were trained on other input features than this run's "
            f"data has: checkpoint ({source.data_name}) {_features(old, spec)}; data ({data_name}) "
            f"{_features(new, spec)}; fine-tune it on data featurised the same way"
        )
    attention = task.model.config.attention
    if source.encoder.attention == "urpe" and attention != "urpe":
        raise CheckpointError(
            f"--init_from {source.path}: its attention is URPE, with a learned C that "
            f"model.encoder.attention={attention} would drop; fine-tune it with "
            "--model.encoder.attention urpe"
        )
    changes = _target_changes(source, spec)
    keep_head = not changes
    target = task.state_dict()
    scales = [f"{name}.weight" for name, module in task.named_modules() if isinstance(module, RelativeScale)]
    reset = [key for key in scales if key not in source.state]
    rebuilt = [] if keep_head else [key for key in target if is_head(key)]
    into = getattr(task.model.config, "molecule_features_into", "graph_token")  # a sequence model reads none
    molecule = _molecule_features(source, spec, into)
    fresh = [] if molecule == "kept" else [key for key in target if key.startswith(MOLECULE_PREFIX)]
    weights = {
        key: value
        for key, value in source.state.items()
        if (keep_head or not is_head(key)) and (molecule == "kept" or not key.startswith(MOLECULE_PREFIX))
    }
    expected = {key: value for key, value in target.items() if key not in reset + rebuilt + fresh}
    if problems := state_dict_problems(weights, expected):
        raise CheckpointError(
            f"--init_from {source.path} does not fit the model built from its architecture: " + "; ".join(problems)
        )
    if source.path_order is not None and path_order is not None and source.path_order != path_order:
        log.info(
            "--init_from %s learned its edge encoding on shortest paths in the order %s, this run's data "
            "follows %s: set data.path_order %s to give it exactly those paths",
            source.path,
            source.path_order,
            path_order,
            source.path_order,
        )
    data = {
        **{field: plain(value) for field, value in old.items()},
        "target_kind": source.target_kind,
        "target_names": source.target_names,
        "name": source.data_name,
    }
    return Initialisation(
        weights=weights,
        reset_to_ones=reset,
        record={
            "path": source.path,
            "sha256": source.sha256,
            "source": {"data": data, **source.origin},
            "architecture": architecture(source),
            "overridden": dict(overridden),
            "head": "kept" if keep_head else "rebuilt",
            "head_reason": _same_targets(source) if keep_head else "; ".join(changes),
            "loaded": len(weights),
            "rebuilt": rebuilt,
            "reset_to_ones": reset,
            "molecule_features": molecule,
        },
    )


def initialise(task: GraphormerTask, plan: Initialisation) -> None:
    """Load the planned weights into ``task``, set the URPE tables it lacks to ones, and record the source."""
    task.load_state_dict(plan.weights, strict=False)
    scales = {f"{name}.weight": module for name, module in task.named_modules() if isinstance(module, RelativeScale)}
    for key in plan.reset_to_ones:
        scales[key].reset_to_ones()
    task.initialised_from = plan.record
    reset = f"; URPE C set to ones: {', '.join(plan.reset_to_ones)}" if plan.reset_to_ones else ""
    log.info("initialised from %s; %d tensors loaded%s", describe(plan.record), plan.record["loaded"], reset)


def describe(record: Mapping[str, Any]) -> str:
    """An initialisation record in one line: the file, its hash, its data and step, and the head.

    Example:
        >>> describe({"path": "pre.ckpt", "sha256": "d4b73d92eaa02b2f", "head": "rebuilt",
        ...           "head_reason": "num_outputs 12 -> 2", "source": {"data": {"name": "QM9"}, "global_step": 8000}})
        'pre.ckpt (sha256 d4b73d92eaa0; QM9, step 8000): head rebuilt (num_outputs 12 -> 2)'
    """
    source = record["source"]
    step = f", step {source['global_step']}" if source.get("global_step") is not None else ""
    reason = f" ({record['head_reason']})" if record["head"] == "rebuilt" else ""
    return (
        f"{record['path']} (sha256 {record['sha256'][:12]}; {source['data']['name']}{step}): "
        f"head {record['head']}{reason}"
    )


#: Parameters and statistics of the molecule-level features (``Graphormer.molecule``) in a task's state dict.
MOLECULE_PREFIX = "model.molecule."


def _molecule_features(source: SourceCheckpoint, spec: DataSpec | SequenceSpec, into: str) -> str:
    """``kept`` when the checkpoint read the same molecule-level features as the data gives, at the same place
    (``into``, the new model's ``molecule_features_into``; projection and statistics load), ``none`` when neither
    has any, else why the projection starts anew at zero (logged)."""
    old, new = (
        list(getattr(source.encoder, "molecule_features", ())),
        list(getattr(spec, "molecule_features", ())),
    )
    old_into = getattr(source.encoder, "molecule_features_into", "graph_token")
    if old == new and (not new or old_into == into):
        return "kept" if new else "none"
    if not new:
        reason = f"dropped: the data gives none of the checkpoint's {len(old)} molecule features"
    elif not old:
        reason = f"new zero projection: the checkpoint read no molecule features, the data gives {len(new)}"
    elif old == new:
        reason = f"new zero projection: the checkpoint's features entered at its {old_into}, this model's at its {into}"
    else:
        reason = (
            f"new zero projection: the checkpoint read {len(old)} molecule features, other than the data's {len(new)}"
        )
    log.info("--init_from %s: molecule-level features %s", source.path, reason)
    return reason


def _target_changes(source: SourceCheckpoint, spec: DataSpec | SequenceSpec) -> list[str]:
    new = spec.encoder_fields()
    changes = [
        f"{field} {shown(plain(getattr(source.encoder, field)))} -> {shown(plain(new[field]))}"
        for field in spec.OUTPUT_FIELDS
        if plain(getattr(source.encoder, field)) != plain(new[field])
    ]
    if source.target_kind is not None and source.target_kind != spec.target_kind:
        changes.append(f"target_kind {source.target_kind} -> {spec.target_kind}")
    if source.target_names is not None and source.target_names != list(spec.target_names):
        changes.append(f"target_names {listed(source.target_names)} -> {listed(spec.target_names)}")
    return changes


#: Names a list in a log line shows before "+N more": QM9's
#: 12 targets in full, not a descriptor pretraining's 186.
SHOWN_NAMES = 12


def listed(names: Sequence[str]) -> str:
    """``names`` as a list, cut after :data:`SHOWN_NAMES` so that a log line stays one readable line.

    Example:
        >>> listed(["a", "b"])
        "['a', 'b']"
        >>> listed([f"d{k}" for k in range(186)])
        "['d0', 'd1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7', 'd8', 'd9', 'd10', 'd11', +174 more]"
    """
    if len(names) <= SHOWN_NAMES:
        return repr(list(names))
    head = ", ".join(repr(name) for name in names[:SHOWN_NAMES])
    return f"[{head}, +{len(names) - SHOWN_NAMES} more]"


def _same_targets(source: SourceCheckpoint) -> str:
    unrecorded = [
        name for name, value in (("kind", source.target_kind), ("names", source.target_names)) if value is None
    ]
    return "the data's targets are the checkpoint's" + (
        f" (it records no target {' or '.join(unrecorded)})" if unrecorded else ""
    )


def _features(fields: Mapping[str, Any], spec: DataSpec | SequenceSpec) -> str:
    return ", ".join(
        f"{field} {plain(fields[field])}"
        for field in spec.FEATURE_FIELDS
        if fields[field] or not field.startswith("continuous")
    )
