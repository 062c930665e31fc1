"""``torch.load`` of OGB's small metadata files (``split_dict.pt``, ``meta.pt``) under ``weights_only``.

OGB-LSC ships split files that are pickled dictionaries of numpy arrays. Since torch 2.6
``torch.load`` defaults to ``weights_only=True`` and refuses the numpy globals those pickles name;
the releases were written under numpy 1.x, so they name ``numpy.core.multiarray._reconstruct``,
which numpy 2 calls ``numpy._core.multiarray._reconstruct``. :func:`safe_torch_load` allow-lists
exactly what rebuilding numpy arrays and scalars needs, under both spellings, and nothing else:
never ``weights_only=False``.
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: numpy's core module under numpy 1.x and numpy 2.x.
_CORE_SPELLINGS = ("numpy.core", "numpy._core")


def _numpy_core() -> Any:
    """The module that holds ``_reconstruct`` and ``scalar`` in the installed numpy."""
    for name in reversed(_CORE_SPELLINGS):
        try:
            return importlib.import_module(f"{name}.multiarray")
        except ImportError:
            continue
    raise ImportError("numpy has neither numpy._core.multiarray nor numpy.core.multiarray")


def numpy_safe_globals() -> list[Any]:
    """The globals a pickled numpy array, dtype or scalar refers to, under both numpy spellings."""
    multiarray = _numpy_core()
    allowed: list[Any] = [np.ndarray, np.dtype, bytes]  # bytes: the buffer of an empty array
    for spelling in _CORE_SPELLINGS:
        allowed.append((multiarray._reconstruct, f"{spelling}.multiarray._reconstruct"))
        allowed.append((multiarray.scalar, f"{spelling}.multiarray.scalar"))
    # numpy >= 1.25 pickles some dtypes by their class (numpy.dtypes.Int64DType ...)
    for code in "?bBhHiIlLqQefdgFDG":
        dtype_class = type(np.dtype(code))
        allowed.append((dtype_class, f"numpy.dtypes.{dtype_class.__name__}"))
    return allowed


def safe_torch_load(path: str | Path) -> Any:
    """Load a ``torch.save`` file that may hold numpy arrays, with ``weights_only=True``.

    Args:
        path: the file (e.g. ``mag240m_kddcup2021/split_dict.pt``).

    Returns:
        The unpickled object (numpy arrays come back as numpy arrays).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        pickle.UnpicklingError: the file needs a global outside the numpy allow-list (the message
            names it and the file).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    with torch.serialization.safe_globals(numpy_safe_globals()):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            raise pickle.UnpicklingError(f"{path}: {error}") from error
