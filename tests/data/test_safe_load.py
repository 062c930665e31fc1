"""torch.save files of numpy arrays load with weights_only=True, numpy 1.x pickles included; nothing else does."""

from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe.data.safe_load import (
    UnsafeCheckpoint,
    directory_problem,
    load_failure,
    load_numpy_checkpoint,
    load_split_dict,
    not_a_checkpoint,
    numpy_safe_globals,
)
from graphormer_urpe.testing.official_checkpoints import official_weights, save_official
from graphormer_urpe.testing.ogb_layouts import NUMPY1_MULTIARRAY, torch_save_as_numpy1

SPLITS = {
    "train": np.arange(10),
    "valid": np.array([10, 12]),
    "test-dev": np.array([11]),
    "test-challenge": np.array([], dtype=np.int64),
}


def test_a_numpy1_pickle_loads(tmp_path: Path) -> None:
    """The official split files name numpy.core.multiarray._reconstruct: plain torch.load refuses
    them, and allow-listing only numpy 2's names would not help."""
    path = tmp_path / "split_dict.pt"
    values = {**SPLITS, "scalar": np.int64(7), "half": np.ones(3, np.float16), "matrix": np.eye(2, dtype=np.float32)}
    torch_save_as_numpy1(values, path)
    assert NUMPY1_MULTIARRAY in _pickle_bytes(path)
    assert "numpy.core.multiarray._reconstruct" in torch.serialization.get_unsafe_globals_in_checkpoint(path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    with torch.serialization.safe_globals([np.ndarray, np.dtype, np._core.multiarray._reconstruct]):
        with pytest.raises(pickle.UnpicklingError, match="numpy.core.multiarray._reconstruct"):
            torch.load(path, weights_only=True)  # numpy 2's spelling alone is not enough
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning from importing numpy.core
        loaded = load_numpy_checkpoint(path)
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value)
        assert np.asarray(loaded[name]).dtype == np.asarray(value).dtype


def test_a_numpy2_pickle_loads_and_the_allow_list_is_temporary(tmp_path: Path) -> None:
    path = tmp_path / "split_dict.pt"
    torch.save(SPLITS, path)
    assert load_split_dict(path, list(SPLITS))["valid"].tolist() == [10, 12]
    assert not set(numpy_safe_globals()) & set(torch.serialization.get_safe_globals())  # nothing stays allowed
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"train": np.array([object()], dtype=object)}, "builtins.object"),
        ({"train": np.array(["a"])}, "weights_only"),
        ({"train": torch.nn.Linear(1, 1)}, "torch.nn.modules.linear.Linear"),
    ],
)
def test_anything_but_numeric_arrays_is_refused(tmp_path: Path, payload: dict, message: str) -> None:
    path = tmp_path / "split_dict.pt"
    torch.save(payload, path)
    with pytest.raises(UnsafeCheckpoint, match=message) as error:
        load_numpy_checkpoint(path)
    assert str(path) in str(error.value)


def test_corrupt_and_wrong_files_say_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "split_dict.pt"
    torch_save_as_numpy1(SPLITS, path)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:200])
    with pytest.raises(UnsafeCheckpoint, match="truncated or corrupt"):
        load_numpy_checkpoint(truncated)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_numpy_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(UnsafeCheckpoint, match=r"no split\(s\) \['test'\]"):
        load_split_dict(path, ["train", "test"])
    torch.save({"train": np.zeros((2, 2), dtype=np.int64)}, path)
    with pytest.raises(UnsafeCheckpoint, match="split 'train' is a int64 array of shape \\(2, 2\\)"):
        load_split_dict(path, ["train"])
    torch.save([np.arange(3)], path)
    with pytest.raises(UnsafeCheckpoint, match="holds a list"):
        load_split_dict(path, ["train"])


def _load_error(path: Path) -> BaseException:
    """What ``torch.load(path, weights_only=True)`` raises."""
    with pytest.raises(Exception) as error:
        torch.load(path, map_location="cpu", weights_only=True)
    return error.value


def test_a_file_that_is_not_our_checkpoint_is_named_for_what_it_is(tmp_path: Path) -> None:
    text = tmp_path / "notes.ckpt"
    text.write_text("hello\n")
    assert not_a_checkpoint(text, _load_error(text)) == f"{text} is a text file of 6 bytes ('hello'), not a checkpoint"
    empty = tmp_path / "empty.ckpt"
    empty.touch()
    assert not_a_checkpoint(empty, _load_error(empty)) == f"{empty} is an empty file (0 bytes), not a checkpoint"
    for fmt, version, name in (("fairseq", "v2", "official v2"), ("lightning", "v1", "official v1.0")):
        official = save_official(tmp_path / f"{version}.pt", fmt, official_weights(version))
        error = _load_error(official)
        assert "\x1b[" in str(error)  # torch's advice, in bold: none of it reaches the message
        assert not_a_checkpoint(official, error) == (
            f"{official} is a checkpoint of the official Graphormer ({name}), not one of this project: convert it "
            f"with graphormer-urpe convert official {official} {tmp_path / version}-converted.ckpt"
        )
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"PK\x03\x04\x00\xff" * 10)
    assert not_a_checkpoint(garbage, _load_error(garbage)).startswith(
        f"{garbage} (60 bytes) is not a readable checkpoint: probably truncated or corrupted ("
    )


class NotWeights:
    """An object a pickle may hold besides weights."""


def test_torch_advice_to_unpickle_a_file_is_never_passed_on(tmp_path: Path) -> None:
    """Issue 38: torch answers a file that ``weights_only=True`` refuses with the advice that ``weights_only=False``
    "will likely succeed", which runs any code the file holds. The message says what the file is instead."""
    random_bytes, pickled, plain = tmp_path / "random.bin", tmp_path / "object.pt", tmp_path / "plain.pkl"
    random_bytes.write_bytes(bytes(range(132, 256)) * 10)
    torch.save({"weights": torch.ones(2), "extra": NotWeights()}, pickled)
    plain.write_bytes(pickle.dumps({"a": 1}, protocol=4))
    expected = {
        random_bytes: "neither a torch.save archive nor a legacy torch file (the weights reader stops at pickle opcode "
        "132): not a checkpoint, or a damaged one",
        pickled: f"it holds {__name__}.NotWeights, a Python object besides weights, which is never unpickled here "
        "(unpickling a file can run code from it)",
        plain: "neither a torch.save archive nor a legacy torch file (the weights reader stops at pickle opcode 149): "
        "not a checkpoint, or a damaged one",
    }
    for path, reason in expected.items():
        error = _load_error(path)
        assert "weights_only` set to `False` will likely succeed" in str(error)  # what torch says
        assert load_failure(error) == reason
        assert (
            not_a_checkpoint(path, error)
            == f"{path} ({path.stat().st_size:,} bytes) is not a readable checkpoint: {reason}"
        )


def test_a_transformers_directory_names_its_converter(tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    assert directory_problem(tmp_path / "hf") == f"{tmp_path / 'hf'} is a directory; name the checkpoint file"
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert directory_problem(tmp_path / "hf") == (
        f"{tmp_path / 'hf'} is a directory with config.json, a transformers Graphormer: convert it with "
        f"graphormer-urpe convert huggingface {tmp_path / 'hf'} OUT.ckpt"
    )


def _pickle_bytes(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
