"""train.py end to end on the synthetic configs, and ``--init_from`` from an RPE run to a URPE run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import train
from graphormer_urpe.cli import RUN_DIR_ENV

TINY_SEQUENCES = ["--data.length", "8", "--data.val_size", "16", "--data.test_size", "16", "--data.batch_size", "8"]
TINY = {
    "synthetic_pi": TINY_SEQUENCES,
    "synthetic_etp": TINY_SEQUENCES,
    "synthetic_graph": ["--data.train_graphs", "8", "--data.val_graphs", "4", "--data.test_graphs", "4",
                        "--data.batch_size", "4"],
}


def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, config: str, *extra: str) -> tuple[dict, Path]:
    """A two-step training run in its own directory; returns metrics.json and the run directory."""
    run_dir = tmp_path / name
    monkeypatch.setenv(RUN_DIR_ENV, str(run_dir))  # the CLI shares it through the environment
    train.main(["--config", config, "--trainer.max_steps", "2", "--trainer.val_check_interval", "1",
                "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
                *TINY[config], *extra])
    return json.loads((run_dir / "metrics.json").read_text()), run_dir


@pytest.mark.parametrize("config,method", [("synthetic_pi", "none"), ("synthetic_pi", "rpe"),
                                           ("synthetic_etp", "urpe"), ("synthetic_graph", "rpe")])
def test_synthetic_configs_train_and_test(monkeypatch, tmp_path, config, method):
    metrics, run_dir = run(monkeypatch, tmp_path, "run", config, "--model.encoder.attention", method)
    assert 0.0 <= metrics["test"]["test/accuracy"] <= 1.0
    assert Path(metrics["best_checkpoint"]).is_file()
    checkpoint = torch.load(metrics["best_checkpoint"], map_location="cpu", weights_only=True)
    assert checkpoint["hyper_parameters"]["encoder"]["attention"] == method
    assert json.loads((run_dir / "run.json").read_text())["dataset"]["source"].startswith("synthetic")


def test_init_from_turns_an_rpe_run_into_an_identical_urpe_run(monkeypatch, tmp_path):
    rpe_metrics, _ = run(monkeypatch, tmp_path, "rpe", "synthetic_graph", "--model.encoder.attention", "rpe")
    # one step at the first learning rate of the warm-up, which is 0: the URPE run keeps the loaded weights
    _, urpe_dir = run(monkeypatch, tmp_path, "urpe", "synthetic_graph", "--model.encoder.attention", "urpe",
                      "--init_from", rpe_metrics["best_checkpoint"], "--trainer.max_steps", "1")
    rpe = torch.load(rpe_metrics["best_checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    urpe = torch.load(urpe_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    scale = urpe.pop("model.relative_scale.weight")
    assert torch.equal(scale[1:], torch.ones_like(scale[1:]))
    assert urpe.keys() == rpe.keys()
    assert all(torch.equal(urpe[key], rpe[key]) for key in rpe)
