"""What every converter shares: the error, reading foreign torch files safely, and writing our checkpoint."""

from __future__ import annotations

import argparse
import dataclasses
import io
import logging
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

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


class _Placeholder:
    """Stands for any object in the file but tensors and plain containers; ignores its state and items."""

    def _ignore(self, *args: Any, **kwargs: Any) -> None:
        pass

    __init__ = __setstate__ = __setitem__ = append = extend = _ignore


_ALLOWED = {
    ("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_tensor"), ("torch", "Size"), ("builtins", "set"), ("builtins", "frozenset"),
    ("argparse", "Namespace"),  # fairseq's args and cfg['model']: a plain attribute container
}


class _RestrictedPickle:
    """A ``pickle_module`` for ``torch.load`` that rebuilds tensors, plain containers and ``argparse.Namespace``
    only, every other object (fairseq's ``cfg``, Lightning's callbacks) as an inert placeholder."""

    __name__ = "graphormer_urpe.convert.common"

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) in _ALLOWED or (module == "torch" and name.endswith("Storage")):
                return super().find_class(module, name)
            return type(name, (_Placeholder,), {"__module__": "graphormer_urpe.convert.placeholder"})

    @classmethod
    def load(cls, file: io.IOBase, **kwargs: Any) -> Any:
        return cls.Unpickler(file, **kwargs).load()


def read_torch_file(path: Path) -> Mapping[str, Any]:
    """The dictionary a ``torch.save`` file holds, read without running code from it."""
    if not path.is_file():
        raise ConversionError(f"{path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # foreign objects inside: the restricted unpickler instead
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_RestrictedPickle)
        except Exception as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConversionError(f"{path} is not a readable torch file: {reason}") from None
    if not isinstance(checkpoint, Mapping):
        raise ConversionError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dictionary")
    return checkpoint


def check_output(output: Path) -> None:
    """Refuse to overwrite an earlier conversion (the checkpoint or its ``.yaml``)."""
    for path in (output, output.with_suffix(".yaml")):
        if path.exists():
            raise ConversionError(f"{path} exists; choose another output path (nothing is overwritten)")


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
    config_yaml = {"model": {"init_args": {"encoder": encoder}}, "data": {"init_args": {"path_order": "official"}}}
    output.with_suffix(".yaml").write_text(yaml.safe_dump(config_yaml, sort_keys=False))
    note = f"; dropped (never applied by the source): {', '.join(converted.dropped)}" if converted.dropped else ""
    log.info("%s checkpoint %s -> %s (+ %s): %d layers, width %d, %d heads, %s, multi_hop_max_dist %d, "
             "spatial_pos_max %s%s", source_format, source, output, output.with_suffix(".yaml").name, config.num_layers,
             config.hidden_dim, config.num_heads, config.edge_encoding, config.multi_hop_max_dist,
             config.spatial_pos_max, note)
