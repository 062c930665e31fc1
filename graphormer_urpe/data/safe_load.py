"""Loading ``torch.save`` files safely: numeric numpy arrays (ogb's ``split_dict.pt``) under ``weights_only=True``,
allow-listing those arrays for one load, under their numpy 1.x and 2.x names (``docs/ogb-lsc.md``); other
implementations' checkpoints with every foreign object inert (:func:`load_restricted`); and what a file that is not
our checkpoint is, in one line (:func:`not_a_checkpoint`)."""

from __future__ import annotations

import contextlib
import importlib
import io
import pickle
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphormer_urpe.errors import InputError

#: dtypes whose arrays may be rebuilt (no object, string or structured dtypes).
NUMERIC_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
#: The module of ``_reconstruct`` and ``scalar`` as numpy 1.x and numpy 2.x pickles name it.
MULTIARRAY_SPELLINGS = ("numpy.core.multiarray", "numpy._core.multiarray")


class UnsafeCheckpoint(InputError, RuntimeError):
    """A file could not be loaded with the numpy allow-list: it is corrupt or holds other objects."""


def _multiarray() -> Any:
    """numpy's ``multiarray`` module under the name this numpy release gives it."""
    for name in reversed(MULTIARRAY_SPELLINGS):
        with contextlib.suppress(ImportError):
            return importlib.import_module(name)
    raise ImportError("numpy has neither numpy._core.multiarray nor numpy.core.multiarray")


def numpy_safe_globals() -> list[tuple[Callable, str]]:
    """The globals a pickle of numeric numpy arrays and scalars needs, as ``(object, pickled name)``; the dtype
    classes are needed because the unpickler only restores the state of allow-listed types."""
    multiarray = _multiarray()
    entries: list[tuple[Callable, str]] = [
        (np.ndarray, "numpy.ndarray"),
        (np.dtype, "numpy.dtype"),
        (bytes, "builtins.bytes"),
    ]  # an empty array's data: bytes()
    entries += [
        (getattr(multiarray, name), f"{module}.{name}")
        for module in MULTIARRAY_SPELLINGS
        for name in ("_reconstruct", "scalar")
    ]
    dtype_classes = [type(np.dtype(name)) for name in NUMERIC_DTYPES]
    return entries + [(dtype, f"{dtype.__module__}.{dtype.__qualname__}") for dtype in dtype_classes]


def load_numpy_checkpoint(path: Path | str) -> Any:
    """``torch.load(path, weights_only=True)`` with numeric numpy arrays allowed for this one load."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    with torch.serialization.safe_globals(numpy_safe_globals()):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            try:
                refused = torch.serialization.get_unsafe_globals_in_checkpoint(path)
            except ValueError:  # not a zip checkpoint: the original error says why
                refused = []
            detail = (
                f"it needs globals outside the numpy allow-list: {', '.join(refused)}"
                if refused
                else load_failure(error)
            )
            raise UnsafeCheckpoint(f"{path}: refusing to load with weights_only=True: {detail}") from error
        except (RuntimeError, EOFError, ValueError) as error:
            raise UnsafeCheckpoint(
                f"{path} is not a readable torch.save file (truncated or corrupt?): {error}"
            ) from error


def load_split_dict(path: Path | str, names: Sequence[str]) -> dict[str, np.ndarray]:
    """An OGB ``split_dict.pt`` holding the splits ``names``: split name -> (R,) int64 row indices."""
    loaded = load_numpy_checkpoint(path)
    if not isinstance(loaded, dict):
        raise UnsafeCheckpoint(f"{path} holds a {type(loaded).__name__}, expected a dict of split name -> indices")
    if missing := [name for name in names if name not in loaded]:
        raise UnsafeCheckpoint(f"{path} has no split(s) {missing}; it holds {sorted(loaded)}")
    splits = {}
    for name, value in loaded.items():
        array = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise UnsafeCheckpoint(
                f"{path}: split '{name}' is a {array.dtype} array of shape {array.shape}, "
                "expected 1-D integer row indices"
            )
        splits[name] = array.astype(np.int64)
    return splits


class _Placeholder:
    """Stands for any object in the file but tensors and plain containers; ignores its state and items."""

    def _ignore(self, *args: Any, **kwargs: Any) -> None:
        pass

    __init__ = __setstate__ = __setitem__ = append = extend = _ignore


_ALLOWED = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch", "Size"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("argparse", "Namespace"),  # fairseq's args and cfg['model']: a plain attribute container
}


class _RestrictedPickle:
    """A ``pickle_module`` for ``torch.load`` that rebuilds tensors, plain containers and ``argparse.Namespace``
    only, every other object (fairseq's ``cfg``, Lightning's callbacks) as an inert placeholder."""

    __name__ = "graphormer_urpe.data.safe_load"

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) in _ALLOWED or (module == "torch" and name.endswith("Storage")):
                return super().find_class(module, name)
            return type(name, (_Placeholder,), {"__module__": "graphormer_urpe.data.safe_load.placeholder"})

    @classmethod
    def load(cls, file: io.IOBase, **kwargs: Any) -> Any:
        return cls.Unpickler(file, **kwargs).load()


def load_restricted(path: Path) -> Any:
    """What a ``torch.save`` file holds, read without running code from it: ``weights_only=True``, else every
    object but tensors, plain containers and ``argparse.Namespace`` as an inert placeholder; raises torch's error
    for a file that neither reads."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # foreign objects inside: the restricted unpickler instead
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_RestrictedPickle)


#: Terminal escape codes (torch's bold advice), removed from messages.
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Bytes read to tell a text file from a binary one.
_TEXT_PEEK = 4096
_ZIP_MAGIC = b"PK\x03\x04"
#: The commands that convert another implementation's checkpoint into ours (docs/official-graphormer.md).
CONVERT_OFFICIAL = "graphormer-urpe convert official"
CONVERT_HUGGINGFACE = "graphormer-urpe convert huggingface"
#: Where an official checkpoint keeps its weights, the node-feature table there, and the format's name
#: (``convert/official.py``'s layouts V2 and V1 name the same tables).
OFFICIAL_NODE_TABLES = (
    ("model", "encoder.graph_encoder.graph_node_feature.atom_encoder.weight", "official v2"),
    ("state_dict", "atom_encoder.weight", "official v1.0"),
)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message without terminal codes (its type when it has no message)."""
    text = _TERMINAL_CODES.sub("", str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


#: The start of torch's message when ``weights_only=True`` refuses a file; its advice (load it with
#: ``weights_only=False``, that is, unpickle it and let it run code) is never passed on.
_WEIGHTS_ONLY_REFUSAL = "Weights only load failed"


def load_failure(error: BaseException) -> str:
    """Why ``torch.load`` could not read a file, in one line, without torch's advice to load it with
    ``weights_only=False``: an object in it that is not weights, bytes that are no torch file, or torch's first
    line (a damaged archive).

    Example:
        >>> load_failure(RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central"))
        'probably truncated or corrupted (PytorchStreamReader failed reading zip archive: failed finding central)'
    """
    text = _TERMINAL_CODES.sub("", str(error))
    if not text.startswith(_WEIGHTS_ONLY_REFUSAL):
        return f"probably truncated or corrupted ({first_line(error)})"
    if (found := re.search(r"Unsupported global: GLOBAL (\S+)", text)) is not None:
        return (
            f"it holds {found.group(1)}, a Python object besides weights, which is never unpickled here "
            "(unpickling a file can run code from it)"
        )
    found = re.search(r"Unsupported operand (\d+)", text)
    opcode = f" (the weights reader stops at pickle opcode {found.group(1)})" if found else ""
    return f"neither a torch.save archive nor a legacy torch file{opcode}: not a checkpoint, or a damaged one"


def text_file(path: Path) -> str | None:
    """``a text file of 6 bytes ('hello')`` when ``path`` holds UTF-8 text (or nothing), for messages about a file
    that should be a torch file; None for a binary file."""
    size = path.stat().st_size
    if size == 0:
        return "an empty file (0 bytes)"
    with open(path, "rb") as file:
        head = file.read(_TEXT_PEEK)
    if b"\x00" in head or head.startswith(_ZIP_MAGIC):  # torch.save writes a zip archive
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 3:  # more than a character cut by the end of the peek
            return None
        text = head[: error.start].decode("utf-8")
    shown = text.strip().splitlines()[0][:40] if text.strip() else ""
    return f"a text file of {size:,} bytes" + (f" ({shown!r})" if shown else " (blank)")


def directory_problem(path: Path) -> str:
    """Why a directory is no checkpoint file; a transformers directory (it holds ``config.json``) names its
    converter."""
    if (path / "config.json").is_file():
        return (
            f"{path} is a directory with config.json, a transformers Graphormer: convert it with "
            f"{CONVERT_HUGGINGFACE} {path} OUT.ckpt"
        )
    return f"{path} is a directory; name the checkpoint file"


def official_format(checkpoint: object) -> str | None:
    """``official v2`` or ``official v1.0`` when ``checkpoint`` holds that format's node-feature table, else None."""
    for key, table, name in OFFICIAL_NODE_TABLES:
        state = checkpoint.get(key) if isinstance(checkpoint, Mapping) else None
        if isinstance(state, Mapping) and table in state:
            return name
    return None


def not_a_checkpoint(path: Path, error: BaseException) -> str:
    """One line saying what ``path`` is, given that ``torch.load(path, weights_only=True)`` raised ``error``: a text
    file, an official Graphormer checkpoint (with the command that converts it), or a damaged file."""
    if (text := text_file(path)) is not None:
        return f"{path} is {text}, not a checkpoint"
    try:
        name = official_format(load_restricted(path))
    except Exception:  # as damaged for the restricted reader: torch's first error says why
        name = None
    if name is not None:
        return (
            f"{path} is a checkpoint of the official Graphormer ({name}), not one of this project: convert it "
            f"with {CONVERT_OFFICIAL} {path} {path.with_suffix('')}-converted.ckpt"
        )
    return f"{path} ({path.stat().st_size:,} bytes) is not a readable checkpoint: {load_failure(error)}"
