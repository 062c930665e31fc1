"""Loading ``torch.save`` files that hold numpy arrays (ogb's ``split_dict.pt``) with safe loading on.

Since torch 2.6 ``torch.load`` defaults to ``weights_only=True``, which refuses the numpy globals
that a pickled numpy array names. The official OGB-LSC split files were written under numpy 1.x,
so they name ``numpy.core.multiarray._reconstruct``; files written under numpy 2 name
``numpy._core.multiarray._reconstruct``. :func:`load_numpy_checkpoint` allow-lists, for the
duration of one load, exactly what rebuilding numeric numpy arrays and scalars needs, under both
spellings, and nothing else: object arrays and every other global are still refused, and
``weights_only=False`` is never used.
"""

from __future__ import annotations

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
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("numpy has neither numpy._core.multiarray nor numpy.core.multiarray")


def numpy_safe_globals() -> list[tuple[Callable, str]]:
    """The globals a pickle of numeric numpy arrays and scalars needs, as ``(object, pickled name)``.

    Both spellings of ``_reconstruct`` and ``scalar`` map to this numpy's functions; the dtype
    classes are needed because the unpickler only restores the state of allow-listed types.
    """
    multiarray = _multiarray()
    entries: list[tuple[Callable, str]] = [
        (np.ndarray, "numpy.ndarray"), (np.dtype, "numpy.dtype"),
        (bytes, "builtins.bytes"),  # the (empty) data of an empty array is pickled as bytes()
    ]
    for module in MULTIARRAY_SPELLINGS:
        entries.append((multiarray._reconstruct, f"{module}._reconstruct"))
        entries.append((multiarray.scalar, f"{module}.scalar"))
    for name in NUMERIC_DTYPES:
        dtype_class = type(np.dtype(name))
        entries.append((dtype_class, f"{dtype_class.__module__}.{dtype_class.__qualname__}"))
    return entries


def load_numpy_checkpoint(path: Path | str) -> Any:
    """``torch.load(path, weights_only=True)`` with numeric numpy arrays allowed for this one load.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsafeCheckpoint: the file is corrupt, or it needs globals beyond numeric numpy arrays
            (the message lists them).
    """
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
    """An OGB ``split_dict.pt``: split name -> (R,) int64 row indices.

    Args:
        path: the file.
        names: splits that must be present.

    Raises:
        UnsafeCheckpoint: as :func:`load_numpy_checkpoint`, or the file is not a dict of 1-D
            integer arrays holding ``names``.
    """
    loaded = load_numpy_checkpoint(path)
    if not isinstance(loaded, dict):
        raise UnsafeCheckpoint(f"{path} holds a {type(loaded).__name__}, expected a dict of split name -> indices")
    missing = [name for name in names if name not in loaded]
    if missing:
        raise UnsafeCheckpoint(f"{path} has no split(s) {missing}; it holds {sorted(loaded)}")
    splits = {}
    for name, value in loaded.items():
        array = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise UnsafeCheckpoint(f"{path}: split '{name}' is a {array.dtype} array of shape {array.shape}, "
                                   "expected 1-D integer row indices")
        splits[name] = array.astype(np.int64)
    return splits
