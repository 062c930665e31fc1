"""bench/gpu/gpu_pretrain.py without a GPU: the plan's arithmetic (molecules and steps from the probed rates and the
budget, the corpus cap, the reserve and slack), the chunks, the schedule taken from the config, the checkpoint kept
under OUT while a run trains, and the summary on disk when a phase fails or raises."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from bench.common import TRAIN
from bench.gpu import gpu_pretrain
from bench.gpu.gpu_pretrain import Optimisation, Rates, Schedule
from graphormer_urpe.pretrained import CHECKPOINT, provenance
from graphormer_urpe.run.cli import GraphormerCLI

RATES = Rates(featurise_per_second=100.0, featurise_fixed=10.0, steps_per_second=5.0, train_fixed=20.0)
SCHEDULE = Schedule(batch_size=32, passes=2.0, validations=10, valid_fraction=0.02)


def test_the_molecules_fill_the_time_left_at_the_probed_rates() -> None:
    # 300 s less 10 + 20 fixed and 20 reserved: 250 s; a molecule costs 1/100 s to featurise, 2 x 0.96 / 32 / 5 s to
    # train on twice, and 12 validations' share 12 x 0.02 / (3 x 32 x 5) s to evaluate: 0.0225 s, times the slack 1.1
    assert gpu_pretrain.plan_molecules(300, RATES, SCHEDULE, corpus=10**6, reserve=20) == math.floor(250 / 0.02475)
    molecules = gpu_pretrain.plan_molecules(300, RATES, SCHEDULE, corpus=10**6, reserve=20)
    # the planned featurisation and the steps that see each training molecule twice fit the 300 s with the reserve
    featurised = gpu_pretrain.featurise_seconds(molecules, RATES)
    steps = gpu_pretrain.plan_steps(300 - featurised, molecules, RATES, SCHEDULE, reserve=20)
    assert steps % 10 == 0 and steps * 32 >= 2 * 0.96 * molecules - 10 * 32  # whole validation intervals
    assert featurised + 20 + 1.1 * (steps / 5 + SCHEDULE.eval_seconds(molecules, RATES)) + 20 <= 300


def test_the_molecules_are_at_most_the_corpus_and_the_steps_then_take_the_time_left() -> None:
    molecules = gpu_pretrain.plan_molecules(10**5, RATES, SCHEDULE, corpus=5000, reserve=20)
    assert molecules == 5000
    steps = gpu_pretrain.plan_steps(10**5 - gpu_pretrain.featurise_seconds(5000, RATES), 5000, RATES, SCHEDULE, 20)
    assert steps * 32 / (0.96 * 5000) > 100  # far more than the two passes planned


def test_too_little_time_for_the_fewest_molecules_is_refused() -> None:
    with pytest.raises(ValueError, match="60 s left leave time for 0 molecules, fewer than 100: raise --budget"):
        gpu_pretrain.plan_molecules(60, RATES, SCHEDULE, corpus=10**6, reserve=40)
    with pytest.raises(ValueError, match="32 s left leave time for 90 molecules"):  # 2.25 s beyond the 30 fixed
        gpu_pretrain.plan_molecules(32.25, RATES, SCHEDULE, corpus=10**6, reserve=0)


def test_the_steps_fit_the_time_left_less_the_fixed_seconds_the_evaluations_and_the_reserve() -> None:
    # 200 - 20 fixed - 20 reserve - 1.1 x 5 s of evaluation (12 x 0.02 x 10,000 graphs at 3 x 32 x 5 per second):
    # 702 steps, 700 in 10 validation intervals of 70
    assert math.floor(154.5 * 5 / 1.1) == 702
    assert gpu_pretrain.plan_steps(200, 10_000, RATES, SCHEDULE, reserve=20) == 700
    assert gpu_pretrain.plan_steps(47.5, 10_000, RATES, SCHEDULE, reserve=20) == 9  # 2 s: fewer than 10, as they are
    assert gpu_pretrain.plan_steps(45, 10_000, RATES, SCHEDULE, reserve=20) == 0


def test_chunks_give_every_core_eight_at_most_ten_thousand_molecules() -> None:
    assert gpu_pretrain.chunk_size(6400, cores=16) == 50
    assert gpu_pretrain.chunk_size(6401, cores=16) == 51
    assert gpu_pretrain.chunk_size(1_584_663, cores=16) == 10_000
    assert gpu_pretrain.chunk_size(10, cores=16) == 1


def test_the_schedule_is_the_configs_scaled_to_the_batch_and_the_steps() -> None:
    config = gpu_pretrain.shipped_run_config()
    # at the config's own batch and steps: the config's learning rate, warm-up and validations
    assert Optimisation.of(config, 10_000, 64, 10) == Optimisation(lr=5e-4, warmup_steps=500, val_check_interval=1000)
    scaled = Optimisation.of(config, 3001, 512, 10)
    assert scaled.lr == pytest.approx(5e-4 * math.sqrt(8))
    assert (scaled.warmup_steps, scaled.val_check_interval) == (150, 301)
    assert Optimisation.of(config, 7, 512, 10) == Optimisation(lr=scaled.lr, warmup_steps=1, val_check_interval=1)


def test_the_commands_are_options_the_training_reads_and_keep_the_shipped_architecture(tmp_path: Path) -> None:
    args = argparse.Namespace(batch_size=512, device="cpu", precision="bf16-mixed", probe_steps=(10, 30), work=tmp_path)
    setting = gpu_pretrain.Setting(args, SCHEDULE, gpu_pretrain.shipped_run_config(), 8, reserve=25.0, started=0.0)
    data = gpu_pretrain.data_overrides(tmp_path / "data", 690_000, 5391, 16)
    command = gpu_pretrain.train_command(
        setting, data, tmp_path / "runs" / "pretrain", 3000, Optimisation(1.4e-3, 150, 300)
    )
    assert command[: len(TRAIN)] == list(TRAIN)
    cli = GraphormerCLI(command[len(TRAIN) :])
    config, data_module = cli.config, cli.datamodule
    assert (data_module.source.molecules, data_module.chunk_size, data_module.preprocess_workers) == (690_000, 5391, 16)
    assert (data_module.batch_size, data_module.num_workers, data_module.root) == (512, 8, tmp_path / "data")
    assert config["model"]["init_args"]["optim"]["lr"] == 1.4e-3
    assert config["model"]["init_args"]["optim"]["warmup_steps"] == 150
    trainer = config["trainer"]
    assert (trainer["max_steps"], trainer["val_check_interval"], trainer["precision"]) == (3000, 300, "bf16-mixed")
    assert (config["run_root"], config["run_name"]) == (str(tmp_path / "runs"), "pretrain")
    shipped = yaml.safe_load(provenance()["config"])["model"]["init_args"]["encoder"]
    for key in ("num_layers", "hidden_dim", "ffn_dim", "num_heads", "attention"):  # a drop-in for the shipped one
        assert config["model"]["init_args"]["encoder"][key] == shipped[key]
    probe = GraphormerCLI(
        gpu_pretrain.probe_command(args, [*data, *setting.train_overrides()], tmp_path / "c.json")[2:]
    )
    assert (probe.config["trainer"]["max_steps"], probe.config["trainer"]["limit_val_batches"]) == (40, 0)
    clock = next(callback for callback in probe.trainer.callbacks if type(callback).__name__ == "StepClock")
    assert (clock.first, clock.last, clock.out) == (10, 40, tmp_path / "c.json")


def fake_run(tmp_path: Path, step: int) -> Path:
    """A run directory holding the shipped checkpoint as ``best-<step>.ckpt``, a record and a validation logged."""
    run = tmp_path / "work" / "runs" / "pretrain"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    for old in (run / "checkpoints").glob("best-*.ckpt"):
        old.unlink()
    torch.save(torch.load(CHECKPOINT, weights_only=True), run / "checkpoints" / f"best-{step}.ckpt")
    (run / "run.json").write_text(json.dumps({"command": "graphormer-urpe train --config pretrain_moses"}))
    rows = "".join(f"0,{s - 1},0,{0.3 - s / 1000}\n" for s in range(4, step + 1, 4))
    (run / "metrics.csv").write_text("segment,step,epoch,val/mae\n" + rows)
    return run


def test_each_new_best_checkpoint_is_kept_under_out_with_its_validation(tmp_path: Path) -> None:
    check = gpu_pretrain.Pretraining(tmp_path / "out", tmp_path / "work", time_scale=1.0)
    check.report = {"machine": "m", "host": "h", "date": "d", "command": "c", "phases": {}}
    check.keep(tmp_path / "work" / "runs" / "pretrain", 100)  # nothing written yet
    assert "kept" not in check.report and not (tmp_path / "out" / "pretrained").exists()
    run = fake_run(tmp_path, 8)
    check.keep(run, 100)
    kept = json.loads((tmp_path / "out" / "summary.json").read_text())["kept"]
    assert (kept["step"], kept["val/mae"]) == (8, pytest.approx(0.292))
    assert kept["checkpoint"] == "pretrain/checkpoints/best-8.ckpt"
    written = sorted(path.name for path in (tmp_path / "out" / "pretrained").iterdir())
    assert written == ["moses_rdkit2d.ckpt", "moses_rdkit2d.json"]  # the shipped names, no partial file left
    assert json.loads((tmp_path / "out" / "pretrained" / "moses_rdkit2d.json").read_text())["sha256"] == kept["sha256"]
    before = (tmp_path / "out" / "pretrained" / "moses_rdkit2d.ckpt").stat().st_mtime_ns
    check.keep(run, 100)  # the same best: not written again
    assert (tmp_path / "out" / "pretrained" / "moses_rdkit2d.ckpt").stat().st_mtime_ns == before
    check.keep(fake_run(tmp_path, 12), 12)
    report = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert report["kept"]["step"] == 12
    # the validations of the run's 12 steps: the last one's row (logged under step 11) is a validation of training
    assert [row["step"] for row in report["validations"]] == [4, 8, 12]
    assert "| 12 | 0.2880 |" in (tmp_path / "out" / "summary.md").read_text()


def test_a_phase_that_fails_is_on_disk_and_those_after_it_are_not_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failed_probe(check: gpu_pretrain.Pretraining, result: Path, overrides: list[str], seconds: float) -> dict:
        assert overrides[overrides.index("--data.preprocess_workers") + 1] == "3"  # every core given
        assert overrides[overrides.index("--data.chunk_size") + 1] == "40"  # one chunk each
        return {"status": "failed", "seconds": 1.5, "error": "exit code 1"}

    def steps(*args: object) -> dict:
        raise AssertionError("the step probe runs only after the featurisation's")

    monkeypatch.setattr(gpu_pretrain, "featurise", failed_probe)
    monkeypatch.setattr(gpu_pretrain, "probe_steps", steps)
    argv = ["--device", "cpu", "--cores", "3", "--probe-per-core", "40", "--out", str(tmp_path / "out")]
    assert gpu_pretrain.main([*argv, "--work", str(tmp_path / "work")]) == 1
    report = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert report["phases"] == {"probe featurisation": {"status": "failed", "seconds": 1.5, "error": "exit code 1"}}
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| probe featurisation | failed | 2 | exit code 1 |" in summary
    assert "| train | not reached | | |" in summary
    (tmp_path / "work" / "probe").mkdir()
    with pytest.raises(SystemExit):  # a work folder that is not empty: the probes might find their caches built
        gpu_pretrain.main([*argv, "--work", str(tmp_path / "work")])
    (tmp_path / "bundle").mkdir()
    with pytest.raises(SystemExit):  # a bundle without the corpus, refused before anything runs
        gpu_pretrain.main([*argv, "--work", str(tmp_path / "work2"), "--bundle", str(tmp_path / "bundle")])
    assert not (tmp_path / "work2").exists()


def test_a_phase_that_raises_is_recorded_with_what_finished_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def probe(check: gpu_pretrain.Pretraining, result: Path, overrides: list[str], seconds: float) -> dict:
        return {"status": "ok", "seconds": 2.0, "molecules": 140, "graphs": 140, "per_second": 9.0, "fixed_seconds": 1}

    def steps(*args: object) -> dict:
        raise RuntimeError("a bug in the step probe")

    monkeypatch.setattr(gpu_pretrain, "featurise", probe)
    monkeypatch.setattr(gpu_pretrain, "probe_steps", steps)
    argv = ["--device", "cpu", "--cores", "2", "--probe-per-core", "70", "--out", str(tmp_path / "out")]
    assert gpu_pretrain.main([*argv, "--work", str(tmp_path / "work")]) == 1
    report = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert report["error"] == "RuntimeError('a bug in the step probe')"
    assert report["phases"]["probe featurisation"]["per_second"] == 9.0
    assert (
        "| probe featurisation | ok | 2 | 140 molecules, 9.0 molecules/s |"
        in (tmp_path / "out" / "summary.md").read_text()
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--cores", "1", "--probe-per-core", "50"], "probes 50 molecules; MosesDescriptors draws at least 100"),
        (["--batch-size", "0"], "--batch-size 0: at least 1"),
        (["--probe-steps", "3", "0"], "--probe-steps TIMED 0: at least 1"),
        (["--passes", "0"], "--passes 0.0: must be positive"),
    ],
)
def test_options_that_cannot_plan_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    with pytest.raises(SystemExit):
        gpu_pretrain.main(["--device", "cpu", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w"), *options])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
