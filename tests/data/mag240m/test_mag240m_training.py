"""MAG240M end to end: the paper's config, training above chance, submissions at the official shapes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

import evaluate
import train
from graphormer_urpe.data.lsc_formats import MAG240M
from graphormer_urpe.data.mag240m.release import MAG240MRaw
from graphormer_urpe.evaluation.submission import check_submission
from graphormer_urpe.run.cli import RUN_DIR_ENV, GraphormerCLI
from graphormer_urpe.run.ledger import count_parameters
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.mag240m_release import SyntheticMAG, write_synthetic_mag240m

#: Every test here shares a small MAG240M training run (about 10 s).
pytestmark = pytest.mark.slow


TINY = [
    "--model.init_args.encoder.num_layers",
    "1",
    "--model.init_args.encoder.hidden_dim",
    "32",
    "--model.init_args.encoder.ffn_dim",
    "32",
    "--model.init_args.encoder.num_heads",
    "4",
    "--data.num_workers",
    "0",
    "--logger",
    "none",
]


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
    assert 9.5e6 < urpe < 11.5e6  # the paper: 11.0M (docs/ogb-lsc.md explains the difference)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    rpe = _cli(tmp_path, "--model.init_args.encoder.attention", "rpe").model
    assert rpe.model.relative_scale is None
    assert urpe - count_parameters(rpe) == model.model.relative_scale.weight.numel()


def test_a_few_steps_beat_chance(synthetic_mag, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    metrics = train.main(
        [
            "--config",
            "mag240m",
            "--data.root",
            str(synthetic_mag),
            "--data.num_classes",
            "8",
            "--data.batch_size",
            "32",
            "--data.fanouts",
            "[3, 2]",
            "--trainer.max_steps",
            "30",
            "--trainer.val_check_interval",
            "30",
            "--model.init_args.optim.warmup_steps",
            "3",
            "--model.init_args.optim.lr",
            "2e-3",
            "--run_root",
            str(tmp_path),
            *TINY,
        ]
    )
    assert metrics["global_step"] == 30 and metrics["test"] is None  # test labels are hidden
    assert metrics["validation"]["val/accuracy"] > 0.4, metrics  # chance: 1/8


@pytest.fixture(scope="module")
def official_shapes(tmp_path_factory) -> tuple:
    """A synthetic graph whose test split has exactly the release's 146,818 papers, and a checkpoint."""
    root = tmp_path_factory.mktemp("official")
    write_synthetic_mag240m(
        root,
        SyntheticMAG(
            num_papers=150_000, num_authors=5_000, labelled_fraction=1.0, test_size=146_818, citations_per_paper=2.0
        ),
    )
    runs = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(RUN_DIR_ENV, raising=False)
        metrics = train.main(
            [
                "--config",
                "mag240m",
                "--data.root",
                str(root),
                "--data.batch_size",
                "64",
                "--data.fanouts",
                "[]",
                "--trainer.max_steps",
                "2",
                "--trainer.val_check_interval",
                "2",
                "--run_root",
                str(runs),
                *TINY,
            ]
        )
    return root, metrics["best_checkpoint"]


@pytest.mark.parametrize("split, rows", [("test-dev", 88_092), ("test-challenge", 58_726)])
def test_submission_written_and_checked_at_official_shapes(official_shapes, tmp_path, monkeypatch, split, rows):
    root, checkpoint = official_shapes
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    result = evaluate.main(
        [
            "--ckpt",
            checkpoint,
            "--split",
            split,
            "--submission-dir",
            str(tmp_path),
            "--data.root",
            str(root),
            "--data.num_workers",
            "0",
            "--data.eval_batch_size",
            "16384",
        ]
    )
    path = tmp_path / f"y_pred_mag240m_{split}.npz"
    assert result.leaderboard["rows"] == rows and len(check_submission(path, rows, MAG240M)) == rows
    assert evaluate.main(["--check-submission", str(path), "--data-root", str(root)])["mode"] == split
    with np.load(path) as archive:
        assert archive["y_pred"].shape == (rows,) and archive["y_pred"].max() < 153
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(SystemExit):
        evaluate.main(["--check-submission", str(path), "--data-root", str(root)])


def test_resume_after_a_signal_reaches_bitwise_the_same_weights(synthetic_mag, tmp_path, monkeypatch) -> None:
    """As for the other datasets (tests/run/test_callbacks.py): a MAG240M run cut by SIGTERM mid-epoch
    and resumed from last.ckpt ends with exactly the weights of the uninterrupted run (1,433 train
    papers in global batches of 300: 5 steps per epoch, cut at step 3 of 7, dropout on)."""
    from graphormer_urpe.testing.runs import FinalState, SignalDuringStep, train_in_process

    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    args = [
        "--config",
        "mag240m",
        "--data.root",
        str(synthetic_mag),
        "--data.num_classes",
        "8",
        "--data.batch_size",
        "300",
        "--data.fanouts",
        "[3, 2]",
        "--trainer.max_steps",
        "7",
        "--trainer.val_check_interval",
        "5",
        "--checkpoint.every_n_steps",
        "2",
        "--model.init_args.optim.warmup_steps",
        "2",
        "--trainer.enable_progress_bar",
        "false",
        "--run_root",
        str(tmp_path),
        *TINY,
    ]
    uninterrupted = FinalState()
    assert train_in_process([*args, "--run_name", "full"], uninterrupted) == 0
    cut = [*args, "--run_name", "cut"]
    assert train_in_process(cut, SignalDuringStep(3)) == 128 + signal.SIGTERM
    resumed = FinalState()
    assert train_in_process([*cut, "--ckpt_path", "last"], resumed) == 0
    assert resumed.step == uninterrupted.step == 7
    different = [k for k, v in uninterrupted.weights.items() if not torch.equal(v, resumed.weights[k])]
    assert different == []


@pytest.fixture(scope="module")
def small_run(synthetic_mag, tmp_path_factory) -> tuple:
    """A checkpoint of a few steps on the small synthetic graph (114 test-dev papers)."""
    runs = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(RUN_DIR_ENV, raising=False)
        metrics = train.main(
            [
                "--config",
                "mag240m",
                "--data.root",
                str(synthetic_mag),
                "--data.num_classes",
                "8",
                "--data.batch_size",
                "32",
                "--data.fanouts",
                "[3, 2]",
                "--trainer.max_steps",
                "4",
                "--trainer.val_check_interval",
                "4",
                "--model.init_args.optim.warmup_steps",
                "2",
                "--trainer.enable_progress_bar",
                "false",
                "--run_root",
                str(runs),
                *TINY,
            ]
        )
    return synthetic_mag, metrics


def test_valid_accuracy_by_ogbs_evaluator_equals_the_training_metric(small_run, monkeypatch) -> None:
    root, metrics = small_run
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    result = evaluate.main(
        [
            "--ckpt",
            metrics["best_checkpoint"],
            "--split",
            "valid",
            "--data.root",
            str(root),
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert result.leaderboard == {"evaluator": "MAG240MEvaluator", "scored": 179, "skipped": 0}
    # the same count of correct papers over 179: the training metric is that ratio rounded to float32
    float32 = float(np.finfo(np.float32).eps)
    assert result.metrics["acc"] == pytest.approx(metrics["validation"]["val/accuracy"], rel=float32)


def _evaluate_on(devices: int, *args: str) -> None:
    """``evaluate.py`` in a subprocess on ``devices`` CPU processes (DDP over gloo for 2)."""
    env = {k: v for k, v in os.environ.items() if k != RUN_DIR_ENV}
    done = subprocess.run(
        [
            sys.executable,
            "evaluate.py",
            *args,
            "--data.num_workers",
            "0",
            "--trainer.accelerator",
            "cpu",
            "--trainer.devices",
            str(devices),
            "--trainer.strategy",
            "ddp" if devices > 1 else "auto",
            "--trainer.enable_progress_bar",
            "false",
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert devices == 1 or "Starting with 2 processes" in done.stderr + done.stdout


def test_two_processes_predict_exactly_what_one_does(small_run, tmp_path) -> None:
    """Contiguous shards of 57 of the 114 test-dev papers on each of 2 processes, gathered into the
    split's order. A subgraph is drawn per batch of targets, so both runs use the same batches on
    each process (19 papers: a global 19 on one process, 38 on two); then the predictions are equal."""
    root, metrics = small_run
    saved = {}
    for devices, batch in ((1, 19), (2, 38)):
        saved[devices] = tmp_path / f"{devices}.npz"
        _evaluate_on(
            devices,
            "--ckpt",
            metrics["best_checkpoint"],
            "--split",
            "test-dev",
            "--predictions",
            str(saved[devices]),
            "--data.root",
            str(root),
            "--data.eval_batch_size",
            str(batch),
        )
    with np.load(saved[1]) as one, np.load(saved[2]) as two:
        np.testing.assert_array_equal(one["rows"], MAG240MRaw(root).splits()["test-dev"])  # the official order
        np.testing.assert_array_equal(one["rows"], two["rows"])
        np.testing.assert_array_equal(one["prediction"], two["prediction"])
        assert len(one["rows"]) == 114 and len(np.unique(one["prediction"])) > 1


def test_two_processes_write_the_official_submission_of_one(official_shapes, tmp_path, monkeypatch) -> None:
    """A test-challenge submission at the official shape (58,726 papers) from 2 DDP processes is the
    file one process writes."""
    root, checkpoint = official_shapes
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    args = [
        "--ckpt",
        checkpoint,
        "--split",
        "test-challenge",
        "--data.root",
        str(root),
        "--data.eval_batch_size",
        "16384",
    ]
    evaluate.main([*args, "--submission-dir", str(tmp_path / "one"), "--data.num_workers", "0"])
    _evaluate_on(2, *args, "--submission-dir", str(tmp_path / "two"))
    name = "y_pred_mag240m_test-challenge.npz"
    with np.load(tmp_path / "one" / name) as one, np.load(tmp_path / "two" / name) as two:
        assert one["y_pred"].shape == (58_726,) and one["y_pred"].dtype == np.int16
        np.testing.assert_array_equal(one["y_pred"], two["y_pred"])
    assert json.loads((tmp_path / "two" / name.replace(".npz", ".log.json")).read_text())["devices"] == 2
