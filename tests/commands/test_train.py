"""End to end: 2-process DDP on CPU against one process, run files, exit codes; the synthetic configs and
``--init_from`` from an RPE run to a URPE run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from graphormer_urpe.commands import evaluate
from graphormer_urpe.run.ledger import read_metrics
from graphormer_urpe.testing.runs import DDP_TWIN_ARGS, synthetic_run, tiny_run_args, train
from graphormer_urpe.testing.tolerance import rounding_tolerance


def lr_per_step(run_dir: Path) -> dict[int, float]:
    """The learning rate of every optimiser step, from the metrics log."""
    return {row["step"]: row["lr-AdamW"] for row in read_metrics(run_dir) if "lr-AdamW" in row}


@pytest.fixture(scope="module")
def single_process_twin(qm9_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The DDP run's configuration on one process."""
    run_root = tmp_path_factory.mktemp("twin")
    train(tiny_run_args(qm9_root, run_root, *DDP_TWIN_ARGS, "--run_name", "twin"))
    return run_root / "twin"


def test_ddp_processes_data_once_and_only_rank_zero_writes(ddp_run: tuple[Path, str]) -> None:
    run_dir, log = ddp_run
    assert log.count("preprocessing qm9 into") == 1  # rank 0 built the cache, rank 1 waited
    assert log.count("qm9 splits: train 40, valid 5, test 5") == 2  # then both opened it
    assert log.count("metrics written to") == 1 and log.count("run directory:") == 1
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best-6.ckpt", "last.ckpt"]
    assert {p.name for p in run_dir.iterdir()} == {
        ".lock",
        "checkpoints",
        "config.yaml",
        "metrics.csv",
        "metrics.json",
        "plots",
        "run.json",
        "wandb",
    }


@pytest.mark.parametrize("split", ["valid", "test"])
def test_ddp_metric_equals_single_process_metric_of_the_same_checkpoint(ddp_run: tuple[Path, str], split: str) -> None:
    """5 graphs on 2 processes (shards of 3 and 2, in 2 and 1 batches): none repeated, none dropped, no hang."""
    run_dir, _ = ddp_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    single = evaluate.main(
        [
            "--model",
            metrics["best_checkpoint"],
            "--split",
            split,
            "--trainer.devices",
            "1",
            "--trainer.strategy",
            "auto",
            "--logger",
            "none",
        ]
    )
    name, stage = ("val/mae", "validation") if split == "valid" else ("test/mae", "test")
    # other batches, so other padding and summation orders: the predictions, of the targets' magnitude
    # (the mean and a few standard deviations after 6 steps), agree up to rounding, and so do their MAEs
    state = torch.load(metrics["best_checkpoint"], weights_only=True)["state_dict"]
    scale = state["target_mean"].abs() + 4 * state["target_std"]
    assert metrics[stage][name] == pytest.approx(single.metrics[name], abs=rounding_tolerance(scale)["atol"])


def test_global_batch_gives_the_same_steps_learning_rates_and_weights(
    ddp_run: tuple[Path, str], single_process_twin: Path
) -> None:
    run_dir, _ = ddp_run
    ddp_metrics = json.loads((run_dir / "metrics.json").read_text())
    twin_metrics = json.loads((single_process_twin / "metrics.json").read_text())
    assert ddp_metrics["global_step"] == twin_metrics["global_step"] == 6
    assert lr_per_step(run_dir) == lr_per_step(single_process_twin)  # one schedule, the same float64 operations
    assert len(lr_per_step(run_dir)) == 6
    # the same graphs in every step: the weights agree up to the order of floating-point sums
    ddp = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    twin = torch.load(single_process_twin / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert ddp.keys() == twin.keys()
    for name, weights in ddp.items():
        torch.testing.assert_close(weights, twin[name], **rounding_tolerance(weights, twin[name]), msg=name)
    assert any(not torch.equal(ddp[k], twin[k]) for k in ddp)  # it really ran on two processes


# ----------------------------------------------------------------------------- synthetic tasks


@pytest.mark.parametrize(
    "config,method",
    [("synthetic_pi", "none"), ("synthetic_pi", "rpe"), ("synthetic_etp", "urpe"), ("synthetic_graph", "rpe")],
)
def test_synthetic_configs_train_and_test(tmp_path, config, method):
    metrics, run_dir = synthetic_run(tmp_path, "run", config, "--model.encoder.attention", method)
    assert 0.0 <= metrics["test"]["test/accuracy"] <= 1.0
    assert Path(metrics["best_checkpoint"]).is_file()
    checkpoint = torch.load(metrics["best_checkpoint"], map_location="cpu", weights_only=True)
    assert checkpoint["hyper_parameters"]["encoder"]["attention"] == method
    assert json.loads((run_dir / "run.json").read_text())["dataset"]["source"].startswith("synthetic")


@pytest.mark.slow
def test_init_from_turns_an_rpe_run_into_an_identical_urpe_run(tmp_path):
    rpe_metrics, _ = synthetic_run(tmp_path, "rpe", "synthetic_graph", "--model.encoder.attention", "rpe")
    # one step at the first learning rate of the warm-up, which is 0: the URPE run keeps the loaded weights
    _, urpe_dir = synthetic_run(
        tmp_path,
        "urpe",
        "synthetic_graph",
        "--model.encoder.attention",
        "urpe",
        "--init_from",
        rpe_metrics["best_checkpoint"],
        "--trainer.max_steps",
        "1",
    )
    rpe = torch.load(rpe_metrics["best_checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    urpe = torch.load(urpe_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    scale = urpe.pop("model.relative_scale.weight")
    assert torch.equal(scale[1:], torch.ones_like(scale[1:]))
    assert urpe.keys() == rpe.keys()
    assert all(torch.equal(urpe[key], rpe[key]) for key in rpe)


@pytest.mark.parametrize("config", ["synthetic_pi", pytest.param("synthetic_graph", marks=pytest.mark.slow)])
def test_evaluate_reproduces_a_synthetic_run(tmp_path, config):
    metrics, _ = synthetic_run(tmp_path, "run", config)
    for split, stage, name in (("valid", "validation", "val/accuracy"), ("test", "test", "test/accuracy")):
        result = evaluate.main(["--model", metrics["best_checkpoint"], "--split", split, "--logger", "none"])
        assert result.metrics[name] == metrics[stage][name]


def test_a_run_that_averages_weights_tests_the_weights_its_checkpoint_holds(qm9_root: Path, tmp_path: Path) -> None:
    """With Lightning's ``EMAWeightAveraging`` the best checkpoint holds the averaged weights (validation chose it
    on them); the run's own test figure must be theirs, as ``evaluate.py``'s is. Lightning's callback, left in
    place, restored the weights before averaging in ``trainer.test``."""
    ema = '{"class_path": "pytorch_lightning.callbacks.EMAWeightAveraging", "init_args": {"decay": 0.5}}'
    metrics = train(tiny_run_args(qm9_root, tmp_path, f"--trainer.callbacks+={ema}", "--run_name", "ema"))
    checkpoint = torch.load(metrics["best_checkpoint"], map_location="cpu", weights_only=False)
    averaged, current = checkpoint["state_dict"], checkpoint["current_model_state"]
    assert any(not torch.equal(averaged[key], current[key]) for key in averaged)  # two sets of weights to tell apart
    for split, stage, name in (("valid", "validation", "val/mae"), ("test", "test", "test/mae")):
        result = evaluate.main(["--model", metrics["best_checkpoint"], "--split", split, "--logger", "none"])
        # exactly: the same weights, rows and batches on the same CPU (the averages differ in the third digit)
        assert result.metrics[name] == metrics[stage][name]


def test_a_run_without_validation_batches_reports_none_and_its_last_weights(qm9_root: Path, tmp_path: Path) -> None:
    """``--trainer.limit_val_batches 0`` (train without validating): the final validation evaluates nothing,
    which used to end in an IndexError after training."""
    metrics = train(tiny_run_args(qm9_root, tmp_path, "--trainer.limit_val_batches", "0", "--run_name", "noval"))
    assert metrics["validation"] is None and metrics["best_checkpoint"] is None and metrics["global_step"] == 6
    assert set(metrics["test"]) == {"test/mae"}
    assert json.loads((tmp_path / "noval" / "metrics.json").read_text())["validation"] is None


def test_the_command_refuses_a_start_in_one_line_and_leaves_no_run_directory(tmp_path: Path) -> None:
    """``graphormer-urpe train``'s plan refuses a resume of nothing (exit code 2, one line) and lets the run
    directory it chose go, so the same ``--run_name`` starts a run later; a bad option stops before that."""
    from graphormer_urpe.commands.__main__ import main
    from graphormer_urpe.testing.runs import TINY_SYNTHETIC_ARGS

    args = [
        "train",
        "--config",
        "synthetic_pi",
        *TINY_SYNTHETIC_ARGS["synthetic_pi"],
        "--run_root",
        str(tmp_path),
        "--run_name",
        "r",
        "--logger",
        "none",
    ]
    with pytest.raises(SystemExit) as refused:
        main([*args, "--ckpt_path", "last"])
    assert refused.value.code == 2 and str(refused.value).startswith("--ckpt_path last: there is no ")
    assert "\n" not in str(refused.value) and not (tmp_path / "r").exists()
    with pytest.raises(SystemExit) as refused:
        main([*args, "--trainer.max_stepz", "3"])
    assert refused.value.code == 2 and not (tmp_path / "r").exists()
