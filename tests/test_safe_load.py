"""load_numpy_checkpoint: OGB split files pickled under numpy 1.x or 2.x load under weights_only; nothing else does."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from graphormer_urpe.data.mag240m_synthetic import torch_save_like_numpy1
from graphormer_urpe.data.safe_load import UnsafeCheckpoint, load_numpy_checkpoint


def _split() -> dict:
    return {"train": np.arange(5, dtype=np.int64), "valid": np.array([7, 9]), "test": np.zeros(0, np.int64),
            "scalar": np.float32(2.5), "half": np.array([0.5], dtype=np.float16)}


def _assert_same(loaded: dict, expected: dict) -> None:
    assert loaded.keys() == expected.keys()
    for key, value in expected.items():
        assert np.asarray(loaded[key]).dtype == np.asarray(value).dtype
        np.testing.assert_array_equal(loaded[key], value)


def test_numpy2_pickles_load(tmp_path) -> None:
    torch.save(_split(), tmp_path / "split_dict.pt")
    _assert_same(load_numpy_checkpoint(tmp_path / "split_dict.pt"), _split())


def test_numpy1_pickles_load_where_plain_weights_only_fails(tmp_path) -> None:
    path = tmp_path / "split_dict.pt"
    torch_save_like_numpy1(_split(), path)
    with pytest.raises(pickle.UnpicklingError):  # the compatibility trap this module exists for
        torch.load(path, weights_only=True)
    _assert_same(load_numpy_checkpoint(path), _split())


class _Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_other_globals_are_refused_and_the_file_named(tmp_path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"x": _Payload()}, path)
    with pytest.raises(UnsafeCheckpoint, match="evil.pt"):
        load_numpy_checkpoint(path)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        load_numpy_checkpoint(tmp_path / "nothing.pt")
