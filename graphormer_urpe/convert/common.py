"""What every converter shares: the error, reading foreign torch files safely, and writing our checkpoint."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from graphormer_urpe.data.files import unwritable
from graphormer_urpe.data.safe_load import directory_problem, load_failure, load_restricted, text_file
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig

log = logging.getLogger(__name__)


class ConversionError(CheckpointError):
    """A file is not a checkpoint we can map exactly; the message (one line) says why."""


@dataclass(frozen=True)
class Found:
    """One hyper-parameter as a file stores it, and where (for messages)."""

    value: Any
    where: str

    def __str__(self) -> str:
        return f"{self.where} = {self.value!r}"

    @staticmethod
    def get(section: Any, key: str, where: str, kind: type) -> Found | None:
        """``section[key]`` (a mapping's or ``Namespace``'s; anything else holds none) of type ``kind``, or None
        when absent or None; ``True`` is no int here."""
        items = vars(section) if isinstance(section, argparse.Namespace) else section
        value = items.get(key) if isinstance(items, Mapping) else None
        if value is None:
            return None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConversionError(f"{where} = {value!r}: expected {kind.__name__}")
        return Found(value, where)


def check_source(source: str | Path) -> Path:
    """``source``, the torch file to convert, as a path, refused before any work (and before the output is looked at,
    so that a message names the real problem): a directory, a missing path, a text file."""
    path = Path(source)
    if path.is_dir():
        raise ConversionError(directory_problem(path))
    if not path.is_file():
        raise ConversionError(f"{path} does not exist")
    if (text := text_file(path)) is not None:
        raise ConversionError(f"{path} is {text}, not a torch file")
    return path


def read_torch_file(path: Path) -> Mapping[str, Any]:
    """The dictionary a ``torch.save`` file holds, read without running code from it."""
    check_source(path)
    try:
        checkpoint = load_restricted(path)
    except Exception as error:
        raise ConversionError(f"{path} is not a readable torch file: {load_failure(error)}") from None
    if not isinstance(checkpoint, Mapping):
        raise ConversionError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dictionary")
    return checkpoint


def check_output(output: str | Path, companions: Sequence[str] = (".yaml",)) -> Path:
    """``output`` as a path, refused before any work if it cannot be written: a directory (or a name ending in
    ``/``), below a file, in an unwritable directory, or an earlier conversion (it or its ``companions`` suffixes)."""
    path = Path(output)
    if path.is_dir():
        raise ConversionError(
            f"{output} is a directory; name the checkpoint file to write, e.g. {path / 'graphormer.ckpt'}"
        )
    if str(output).endswith(("/", os.sep)):  # no such directory: the name still asks for one
        raise ConversionError(
            f"{output} ends with '{str(output)[-1]}', the name of a directory; name the checkpoint "
            f"file to write, e.g. {path / 'graphormer.ckpt'}"
        )
    for path_to_write in (path, *(path.with_suffix(suffix) for suffix in companions)):
        if path_to_write.exists():
            raise ConversionError(f"{path_to_write} exists; choose another output path (nothing is overwritten)")
    blocking = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise ConversionError(f"cannot write {path}: {blocking} is a file, not a directory")
    if (read_only := unwritable(path.parent)) is not None:
        raise ConversionError(f"cannot write {path}: {read_only} is not writable")
    return path


@dataclass(frozen=True)
class Converted:
    """Our encoder config and state dict, and the source tensors dropped as never applied."""

    config: GraphormerConfig
    weights: dict[str, torch.Tensor]
    dropped: list[str]


def write_checkpoint(converted: Converted, output: Path, *, source: Path, source_format: str, task: str) -> None:
    """Write our checkpoint and its ``.yaml`` (``docs/official-graphormer.md``); classification heads are binary."""
    config = converted.config
    Graphormer(config).load_state_dict(converted.weights)  # shapes were checked against the source: this asserts
    model_state = {f"model.{k}": v.float().contiguous() for k, v in converted.weights.items()}
    if task == "regression":
        model_state["target_mean"] = torch.zeros(config.num_outputs)
        model_state["target_std"] = torch.ones(config.num_outputs)
    output.parent.mkdir(parents=True, exist_ok=True)
    settings = dataclasses.asdict(config)
    encoder = {k: v for k, v in settings.items() if k in GraphormerConfig.ARCHITECTURE}
    hparams = {"encoder": settings, "target_kind": "regression" if task == "regression" else "binary"}
    converted_from = {"source": str(source), "format": source_format, "dropped": converted.dropped}
    torch.save({"state_dict": model_state, "hyper_parameters": hparams, "converted_from": converted_from}, output)
    config_yaml = {
        "model": {"init_args": {"encoder": encoder}},
        "data": {"init_args": {"path_order": "official"}},
    }
    output.with_suffix(".yaml").write_text(yaml.safe_dump(config_yaml, sort_keys=False))
    note = f"; dropped (never applied by the source): {', '.join(converted.dropped)}" if converted.dropped else ""
    log.info(
        "%s checkpoint %s -> %s (+ %s): %d layers, width %d, %d heads, %s, multi_hop_max_dist %d, spatial_pos_max %s%s",
        source_format,
        source,
        output,
        output.with_suffix(".yaml").name,
        config.num_layers,
        config.hidden_dim,
        config.num_heads,
        config.edge_encoding,
        config.multi_hop_max_dist,
        config.spatial_pos_max,
        note,
    )
