"""MAG240M end to end: the paper's config, training above chance, submissions at the official shapes."""

from __future__ import annotations

import numpy as np
import pytest

import evaluate
import train
from graphormer_urpe.data.lsc_formats import MAG240M
from graphormer_urpe.evaluation.submission import check_submission
from graphormer_urpe.run.cli import RUN_DIR_ENV, GraphormerCLI, count_parameters
from graphormer_urpe.testing.mag240m_release import SyntheticMAG, write_synthetic_mag240m

TINY = ["--model.init_args.encoder.num_layers", "1", "--model.init_args.encoder.hidden_dim", "32",
        "--model.init_args.encoder.ffn_dim", "32", "--model.init_args.encoder.num_heads", "4",
        "--data.num_workers", "0", "--logger", "none"]


def _cli(tmp_path, *args: str) -> GraphormerCLI:
    return GraphormerCLI(["--config", "mag240m", "--run_root", str(tmp_path), "--logger", "none", *args])


def test_paper_config_and_rpe_one_flag_away(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    cli = _cli(tmp_path)  # needs no data: nothing is read before fitting
    model, data, encoder = cli.model, cli.datamodule, cli.model.model.config
    assert (encoder.num_layers, encoder.hidden_dim, encoder.ffn_dim, encoder.num_heads) == (6, 512, 512, 32)
    assert (encoder.attention, encoder.dropout, encoder.drop_path) == ("urpe", 0.5, 0.1)
    assert (encoder.readout, encoder.continuous_node_dim, encoder.num_outputs) == ("target_node", 768, 153)
    assert (model.optim.lr, model.optim.warmup_steps, model.optim.weight_decay) == (3e-4, 6000, 0.01)
    assert (model.binary, model.monitor) == (False, ("val/accuracy", "max"))
    assert cli.trainer.max_steps == 100_000 and data.batch_size == 1024 and data.fanouts == [25, 15]
    urpe = count_parameters(model)
    assert 9.5e6 < urpe < 11.5e6  # the paper: 11.0M (see README for the difference)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    rpe = _cli(tmp_path, "--model.init_args.encoder.attention", "rpe").model
    assert rpe.model.relative_scale is None
    assert urpe - count_parameters(rpe) == model.model.relative_scale.weight.numel()


def test_a_few_steps_beat_chance(synthetic_mag, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    metrics = train.main(["--config", "mag240m", "--data.root", str(synthetic_mag), "--data.num_classes", "8",
                          "--data.batch_size", "32", "--data.fanouts", "[3, 2]", "--trainer.max_steps", "30",
                          "--trainer.val_check_interval", "30", "--model.init_args.optim.warmup_steps", "3",
                          "--model.init_args.optim.lr", "2e-3", "--run_root", str(tmp_path), *TINY])
    assert metrics["global_step"] == 30 and metrics["test"] is None  # test labels are hidden
    assert metrics["validation"]["val/accuracy"] > 0.4, metrics  # chance: 1/8


@pytest.fixture(scope="module")
def official_shapes(tmp_path_factory) -> tuple:
    """A synthetic graph whose test split has exactly the release's 146,818 papers, and a checkpoint."""
    root = tmp_path_factory.mktemp("official")
    write_synthetic_mag240m(root, SyntheticMAG(num_papers=150_000, num_authors=5_000, labelled_fraction=1.0,
                                               test_size=146_818, citations_per_paper=2.0))
    runs = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(RUN_DIR_ENV, raising=False)
        metrics = train.main(["--config", "mag240m", "--data.root", str(root), "--data.batch_size", "64",
                              "--data.fanouts", "[]", "--trainer.max_steps", "2", "--trainer.val_check_interval",
                              "2", "--run_root", str(runs), *TINY])
    return root, metrics["best_checkpoint"]


@pytest.mark.parametrize("split, rows", [("test-dev", 88_092), ("test-challenge", 58_726)])
def test_submission_written_and_checked_at_official_shapes(official_shapes, tmp_path, monkeypatch, split, rows):
    root, checkpoint = official_shapes
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    result = evaluate.main(["--ckpt", checkpoint, "--split", split, "--submission-dir", str(tmp_path),
                            "--data.root", str(root), "--data.num_workers", "0", "--data.eval_batch_size", "16384"])
    path = tmp_path / f"y_pred_mag240m_{split}.npz"
    assert result["rows"] == rows and len(check_submission(path, rows, MAG240M)) == rows
    assert evaluate.main(["--check-submission", str(path), "--data-root", str(root)])["mode"] == split
    with np.load(path) as archive:
        assert archive["y_pred"].shape == (rows,) and archive["y_pred"].max() < 153
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(SystemExit):
        evaluate.main(["--check-submission", str(path), "--data-root", str(root)])
