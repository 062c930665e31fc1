"""Reading checkpoints, and clear errors for unusable ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import evaluate
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.run.checkpoints import AtomicCheckpointIO, check_checkpoint, load_checkpoint, saved_loader_states
from graphormer_urpe.run.cli import TrainingCLI
from graphormer_urpe.tasks import GraphRegression
from graphormer_urpe.testing.official_checkpoints import official_weights, save_official
from graphormer_urpe.testing.runs import tiny_run_args, train


def task(**encoder: object) -> GraphRegression:
    config = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4)
    return GraphRegression(dataclasses.replace(config, **encoder))


def save(module: GraphRegression, path: Path) -> Path:
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    return path


@pytest.fixture(scope="module")
def trained_run(qm9_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a 4-step training run (checkpoints every 2 steps)."""
    run_root = tmp_path_factory.mktemp("runs")
    train(
        tiny_run_args(
            qm9_root, run_root, "--trainer.max_steps", "4", "--checkpoint.every_n_steps", "2", "--run_name", "trained"
        )
    )
    return run_root / "trained"


def test_saved_loader_states_are_the_training_loaders_positions(trained_run: Path) -> None:
    checkpoint = load_checkpoint(trained_run / "checkpoints" / "last.ckpt")
    assert saved_loader_states(checkpoint) == [
        {"epoch": 0, "batches_done": 4, "seed": 0, "dataset_size": 40, "global_batch": 8, "bucket_window": 0}
    ]
    assert saved_loader_states({"state_dict": {}}) == []


def test_unreadable_files_are_named_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.ckpt")
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"\x00not a checkpoint" * 10)
    with pytest.raises(CheckpointError, match=r"garbage.ckpt \(170 bytes\) is not a readable checkpoint"):
        load_checkpoint(garbage)
    whole = save(task(), tmp_path / "whole.ckpt").read_bytes()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CheckpointError, match="probably truncated or corrupted"):
        load_checkpoint(truncated)
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(CheckpointError, match="not a Lightning checkpoint"):
        load_checkpoint(plain)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointError) as refused:  # a run directory given instead of one of its files
        load_checkpoint(tmp_path / "run")
    assert str(refused.value) == (
        f"checkpoint {tmp_path / 'run'} is a directory; name a checkpoint file (it holds no .ckpt file)"
    )
    (tmp_path / "run" / "checkpoints" / "last.ckpt").write_bytes(whole)
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(tmp_path / "run")
    assert str(refused.value) == (
        f"checkpoint {tmp_path / 'run'} is a directory; name a checkpoint file, e.g. "
        f"{tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}"
    )


def test_rpe_checkpoint_in_a_urpe_model_names_the_attention_type(tmp_path: Path) -> None:
    path = save(task(attention="rpe"), tmp_path / "rpe.ckpt")
    model = task(attention="urpe")
    with pytest.raises(CheckpointError) as error:
        check_checkpoint(path, model, model.hparams)
    message = str(error.value)
    assert "1 parameters of the model are not in the checkpoint: model.relative_scale.weight" in message
    assert "encoder.attention: checkpoint 'rpe', config 'urpe'" in message


def test_other_depth_and_width_name_keys_and_shapes(tmp_path: Path) -> None:
    path = save(task(num_layers=3, hidden_dim=32, ffn_dim=32), tmp_path / "big.ckpt")
    model = task()
    with pytest.raises(CheckpointError) as error:
        check_checkpoint(path, model, model.hparams)
    message = str(error.value)
    assert "checkpoint parameters are not in the model: model.layers.2." in message
    assert "model.graph_token.weight (1, 32) in the checkpoint vs (1, 16) in the model" in message
    assert "encoder.num_layers: checkpoint 3, config 2" in message
    assert "encoder.hidden_dim: checkpoint 32, config 16" in message


def test_matching_checkpoint_passes(tmp_path: Path) -> None:
    model = task()
    checkpoint = check_checkpoint(save(model, tmp_path / "same.ckpt"), task(), model.hparams)
    assert set(checkpoint["state_dict"]) == set(model.state_dict())


def test_evaluate_reports_a_corrupt_checkpoint_without_a_traceback(
    trained_run: Path, tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    corrupt = tmp_path / "corrupt.ckpt"
    whole = (trained_run / "checkpoints" / "last.ckpt").read_bytes()
    corrupt.write_bytes(whole[:1000])
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--ckpt", str(corrupt)])
    assert exit_info.value.code == 2
    assert "corrupt.ckpt (1,000 bytes) is not a readable checkpoint" in package_log.text


def test_evaluate_with_another_attention_type_names_it(
    trained_run: Path, package_log: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--ckpt", str(trained_run / "checkpoints" / "last.ckpt"), "--model.encoder.attention", "rpe"])
    assert exit_info.value.code == 2
    assert "encoder.attention: checkpoint 'urpe', config 'rpe'" in package_log.text
    assert "model.relative_scale.weight" in package_log.text


def test_resuming_from_a_truncated_last_checkpoint_stops_before_training(
    trained_run: Path, qm9_root: Path, tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    run_root = tmp_path / "runs"
    checkpoints = run_root / "broken" / "checkpoints"
    checkpoints.mkdir(parents=True)
    whole = (trained_run / "checkpoints" / "last.ckpt").read_bytes()
    (checkpoints / "last.ckpt").write_bytes(whole[: len(whole) - 100])
    with pytest.raises(SystemExit) as exit_info:
        train(tiny_run_args(qm9_root, run_root, "--run_name", "broken", "--ckpt_path", "last"))
    assert exit_info.value.code == 2
    assert "last.ckpt" in package_log.text and "probably truncated or corrupted" in package_log.text
    assert not (run_root / "broken" / "metrics.json").exists()


class Unpicklable:
    """Fails ``torch.save`` when it is reached, after everything before it was written."""

    def __reduce__(self) -> tuple:
        raise RuntimeError("disk full")


def test_an_interrupted_save_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 4, "weights": torch.arange(6.0)}, path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="disk full"):
        io.save_checkpoint({"global_step": 6, "weights": torch.zeros(100_000), "z": Unpicklable()}, path)
    assert path.read_bytes() == before and sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]
    io.save_checkpoint({"global_step": 6, "weights": torch.ones(3)}, path)
    saved = torch.load(path, weights_only=True)
    assert saved["global_step"] == 6 and torch.equal(saved["weights"], torch.ones(3))
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]


def test_training_writes_its_checkpoints_through_the_atomic_writer(
    trained_run: Path, qm9_root: Path, tmp_path: Path
) -> None:
    cli = TrainingCLI(tiny_run_args(qm9_root, tmp_path, "--run_name", "io"))
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    written = sorted(p.name for p in (trained_run / "checkpoints").iterdir())  # four saves, no partial file left
    assert "last.ckpt" in written and all(name.endswith(".ckpt") and not name.startswith(".") for name in written)


def test_an_official_checkpoint_or_a_text_file_is_named_with_what_to_do(tmp_path: Path) -> None:
    official = save_official(tmp_path / "v2.pt", "fairseq", official_weights("v2"))
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(official)
    assert str(refused.value) == (
        f"{official} is a checkpoint of the official Graphormer (official v2), not one of "
        f"this project: convert it with graphormer-urpe convert official "
        f"{official} {tmp_path / 'v2'}-converted.ckpt"
    )
    text = tmp_path / "notes.ckpt"
    text.write_text("hello\n")
    with pytest.raises(CheckpointError, match=r"notes\.ckpt is a text file of 6 bytes \('hello'\), not a checkpoint$"):
        load_checkpoint(text)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    with pytest.raises(
        CheckpointError,
        match=r"hf is a directory with config\.json, a transformers Graphormer: "
        r"convert it with graphormer-urpe convert huggingface ",
    ):
        load_checkpoint(tmp_path / "hf")
