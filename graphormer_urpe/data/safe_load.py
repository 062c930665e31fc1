"""Loading ``torch.save`` files of numeric numpy arrays (ogb's ``split_dict.pt``) under ``weights_only=True``,
allow-listing those arrays for one load, under their numpy 1.x and 2.x names (``docs/ogb-lsc.md``)."""

from __future__ import annotations

import contextlib
import importlib
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphormer_urpe.errors import InputError

#: dtypes whose arrays may be rebuilt (no object, string or structured dtypes).
NUMERIC_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                  "float16", "float32", "float64", "complex64", "complex128")
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
    entries: list[tuple[Callable, str]] = [(np.ndarray, "numpy.ndarray"), (np.dtype, "numpy.dtype"),
                                           (bytes, "builtins.bytes")]  # an empty array's data: bytes()
    entries += [(getattr(multiarray, name), f"{module}.{name}")
                for module in MULTIARRAY_SPELLINGS for name in ("_reconstruct", "scalar")]
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
            detail = f"it needs globals outside the numpy allow-list: {', '.join(refused)}" if refused else str(error)
            raise UnsafeCheckpoint(f"{path}: refusing to load with weights_only=True: {detail}") from error
        except (RuntimeError, EOFError, ValueError) as error:
            raise UnsafeCheckpoint(f"{path} is not a readable torch.save file (truncated or corrupt?): {error}") \
                from error


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
            raise UnsafeCheckpoint(f"{path}: split '{name}' is a {array.dtype} array of shape {array.shape}, "
                                   "expected 1-D integer row indices")
        splits[name] = array.astype(np.int64)
    return splits
