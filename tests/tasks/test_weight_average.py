"""``model.optim.weight_average``: the average's arithmetic, its swap in and out of the parameters, its state; in a
run, the average of the weights' own trajectory, the weights every validation judges and the best checkpoint holds;
a refused decay. (Resumed runs: tests/run/test_callbacks.py.)"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from graphormer_urpe.commands import evaluate
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.run.cli import RUN_DIR_ENV
from graphormer_urpe.tasks.base import WEIGHT_AVERAGE
from graphormer_urpe.tasks.graph import GraphRegression
from graphormer_urpe.tasks.optimiser import OptimConfig
from graphormer_urpe.tasks.weight_average import WeightAverage
from graphormer_urpe.testing.runs import small_run_args, train
from graphormer_urpe.testing.tolerance import rounding_tolerance


def test_the_average_is_the_exponentially_weighted_sum_of_the_weights_after_each_step() -> None:
    """a_t = d^t a_0 + sum_s (1 - d) d^(t - s) w_s, summed here in float64 from the float64 weights."""
    torch.manual_seed(0)
    network = nn.Linear(3, 2).double()
    decay = 0.75
    average = WeightAverage(decay, network)
    start = [parameter.detach().clone() for parameter in network.parameters()]
    trajectory = []
    for _ in range(5):
        with torch.no_grad():
            for parameter in network.parameters():
                parameter.add_(torch.randn_like(parameter))
        trajectory.append([parameter.detach().clone() for parameter in network.parameters()])
        average.update()
    steps = len(trajectory)
    for k, found in enumerate(average.average):
        expected = decay**steps * start[k]
        for s, weights in enumerate(trajectory, start=1):
            expected = expected + (1 - decay) * decay ** (steps - s) * weights[k]
        torch.testing.assert_close(found, expected, **rounding_tolerance(found, expected, ulps=16))


def test_swapping_in_and_out_keeps_the_parameters_tensors_and_gives_the_training_weights_back() -> None:
    """In place: the optimiser's references (the parameters and their storage) stay valid."""
    network = nn.Linear(3, 2)
    average = WeightAverage(0.5, network)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(1.0)
    trained = [parameter.detach().clone() for parameter in network.parameters()]
    average.update()  # a = (w_0 + w_1) / 2 = w_1 - 0.5
    storage = [parameter.data_ptr() for parameter in network.parameters()]
    average.swap_in()
    average.swap_in()  # a second swap in keeps the training weights, not the average
    assert average.swapped_in
    for parameter, weights in zip(network.parameters(), trained):
        torch.testing.assert_close(parameter.detach(), weights - 0.5, rtol=0, atol=1e-6)
    average.swap_out()
    assert not average.swapped_in
    assert [parameter.data_ptr() for parameter in network.parameters()] == storage
    for parameter, weights in zip(network.parameters(), trained):
        assert torch.equal(parameter.detach(), weights)


def test_the_state_round_trips_swapped_in_or_not_and_a_state_of_another_network_is_refused() -> None:
    network = nn.Linear(3, 2)
    average = WeightAverage(0.5, network)
    with torch.no_grad():
        network.weight.add_(1.0)
    average.update()
    average.swap_in()
    state = average.state_dict()
    restored = WeightAverage(0.5, network)
    restored.load_state_dict(state)
    assert restored.swapped_in
    for found, expected in zip(
        restored.average + restored.training_weights, average.average + state["training_weights"]
    ):
        assert torch.equal(found, expected)
    restored.swap_out()
    assert torch.equal(network.weight.detach(), average.training_weights[0])
    with pytest.raises(ValueError, match="holds 2 tensors, the network 4 parameters"):
        WeightAverage(0.5, nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))).load_state_dict(state)


def test_bfloat16_weights_are_averaged_in_float32() -> None:
    """A step's (1 - d)(w - a) of 0.001 x 2^-7 is below bfloat16's resolution at 1: the float32 average keeps it,
    and swapping in rounds it to the parameters' dtype."""
    network = nn.Linear(1, 1, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        network.weight.fill_(1.0)
    average = WeightAverage(0.999, network)
    with torch.no_grad():
        network.weight.fill_(1.0 + 2**-7)
    average.update()
    assert average.average[0].dtype == torch.float32
    assert average.average[0].item() == pytest.approx(1.0 + 0.001 * 2**-7, rel=1e-7)
    average.swap_in()
    assert network.weight.dtype == torch.bfloat16 and network.weight.item() == 1.0
    average.swap_out()
    assert network.weight.item() == 1.0 + 2**-7


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_the_device_the_average_follows_its_formula_and_a_saved_state_loads_onto_it(
    device: torch.device, dtype: torch.dtype
) -> None:
    """On the GPU when there is one: three steps averaged on the device against float64 on the CPU; the state saved
    (as a checkpoint is, then read onto the CPU) loads back onto the parameters' device."""
    torch.manual_seed(0)
    network = nn.Linear(4, 3).to(device=device, dtype=dtype)
    average = WeightAverage(0.9, network)
    expected = [parameter.detach().double().cpu() for parameter in network.parameters()]
    for _ in range(3):
        with torch.no_grad():
            for parameter in network.parameters():
                parameter.add_(torch.randn_like(parameter))
        average.update()
        expected = [0.9 * a + 0.1 * p.detach().double().cpu() for a, p in zip(expected, network.parameters())]
    for found, wanted in zip(average.average, expected):
        assert found.device == device and found.dtype == torch.float32
        torch.testing.assert_close(found.double().cpu(), wanted, **rounding_tolerance(found, ulps=16))
    average.swap_in()
    buffer = io.BytesIO()
    torch.save(average.state_dict(), buffer)
    buffer.seek(0)
    restored = WeightAverage(0.9, network)
    restored.load_state_dict(torch.load(buffer, map_location="cpu", weights_only=True))
    assert all(tensor.device == device for tensor in restored.average + restored.training_weights)
    restored.swap_out()
    for parameter, kept in zip(network.parameters(), average.training_weights):
        assert torch.equal(parameter.detach(), kept)


@pytest.mark.parametrize("decay", [0.0, 1.0, 1.5, math.nan])
def test_a_decay_outside_zero_to_one_is_refused_naming_the_option(decay: float) -> None:
    with pytest.raises(ConfigError, match=r"model.optim.weight_average.*must be a number in \(0, 1\)"):
        OptimConfig(weight_average=decay)


class Trajectory(pl.Callback):
    """The network's parameters where training starts and after each optimiser step (before any validation)."""

    def __init__(self) -> None:
        self.weights: list[list[torch.Tensor]] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.weights.append([parameter.detach().clone().double() for parameter in pl_module.model.parameters()])

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
        self.weights.append([parameter.detach().clone().double() for parameter in pl_module.model.parameters()])


@pytest.mark.device
def test_a_run_validates_and_saves_the_average_of_its_own_weights(
    small_table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 steps, a validation every 4, decay 0.5: the last checkpoint's average is the exponentially weighted sum of
    the weights after each step; the best checkpoint holds the average as its weights (its training weights beside,
    for a resume); ``evaluate`` of it scores the validation rows as training did when it chose it."""
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    trajectory = Trajectory()
    args = small_run_args(
        small_table,
        tmp_path / "data",
        tmp_path / "runs",
        "--trainer.max_steps",
        "12",
        "--trainer.val_check_interval",
        "4",
        "--model.optim.weight_average",
        "0.5",
        "--run_name",
        "averaged",
    )
    metrics = train(args, trajectory)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    run_dir = tmp_path / "runs" / "averaged"
    assert len(trajectory.weights) == 13  # the start and 12 steps

    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    for k, found in enumerate(last[WEIGHT_AVERAGE]["average"]):
        expected = 0.5**12 * trajectory.weights[0][k]
        for step in range(1, 13):
            expected = expected + 0.5 * 0.5 ** (12 - step) * trajectory.weights[step][k]
        torch.testing.assert_close(found.double(), expected, **rounding_tolerance(found, ulps=64))

    best_path = metrics["best_checkpoint"]
    best = torch.load(best_path, weights_only=True)
    kept = best[WEIGHT_AVERAGE]
    assert kept["training_weights"] is not None  # written after its validation: the average in the weights
    names = [f"model.{name}" for name, _ in GraphRegression.from_checkpoint(best_path).model.named_parameters()]
    assert len(names) == len(kept["average"]) == len(kept["training_weights"])
    for name, average in zip(names, kept["average"]):
        assert torch.equal(best["state_dict"][name], average)
    assert any(not torch.equal(a, w) for a, w in zip(kept["average"], kept["training_weights"]))

    logged = next(
        float(state["best_model_score"])
        for key, state in last["callbacks"].items()
        if key.startswith("ModelCheckpoint{'monitor': 'val")
    )
    result = evaluate.main(["--model", best_path, "--split", "valid", "--trainer.enable_progress_bar", "false"])
    assert result.metrics["val/mae"] == pytest.approx(logged, rel=1e-6)
