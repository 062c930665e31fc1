"""Exact resume after a signal, RNG states, the non-finite-loss guard."""

from __future__ import annotations

import io
import os
import random
import signal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from graphormer_urpe.commands.exits import NON_FINITE_LOSS
from graphormer_urpe.run.callbacks import Preempted, RNGState, rng_state, set_rng_state
from graphormer_urpe.testing.device import exactness_device
from graphormer_urpe.testing.distributed import run_on_processes
from graphormer_urpe.testing.runs import FinalState, SignalDuringStep, tiny_run_args, train_in_process

#: Every source of randomness switched on, gradient accumulation and clipping: the hardest case. On the
#: device of the exactness tests (dropout masks then come from the CUDA generator on a GPU), with
#: deterministic kernels (a GPU's atomic-add backward passes otherwise differ from run to run).
RANDOM_RUN = (
    "--model.encoder.dropout", "0.1", "--model.encoder.attention_dropout", "0.1",
    "--model.encoder.input_dropout", "0.1", "--model.encoder.activation_dropout", "0.1",
    "--model.encoder.drop_path", "0.3", "--trainer.accumulate_grad_batches", "2",
    "--trainer.gradient_clip_val", "1.0", "--trainer.max_steps", "9", "--checkpoint.every_n_steps", "4",
    "--trainer.accelerator", exactness_device().type, "--trainer.deterministic", "true",
)


@pytest.fixture(scope="module")
def uninterrupted(qm9_root: Path, tmp_path_factory: pytest.TempPathFactory) -> FinalState:
    final = FinalState()
    args = tiny_run_args(qm9_root, tmp_path_factory.mktemp("runs"), *RANDOM_RUN, "--run_name", "full")
    assert train_in_process(args, final) == 0
    return final


# 40 training graphs in batches of 8, two batches per step: steps 3, 6 and 9 end an epoch (5 batches)
@pytest.mark.device
@pytest.mark.parametrize(("stop_step", "signum"), [(4, signal.SIGTERM), (3, signal.SIGUSR1)])
def test_resume_after_a_signal_reaches_bitwise_the_same_weights(
        uninterrupted: FinalState, qm9_root: Path, tmp_path: Path, stop_step: int, signum: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a SLURM job whose scontrol records what it is asked to do
    bin_dir, requests = tmp_path / "bin", tmp_path / "scontrol.txt"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {requests}\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    args = tiny_run_args(qm9_root, tmp_path, *RANDOM_RUN, "--run_name", "cut")
    assert train_in_process(args, SignalDuringStep(stop_step, signum)) == 128 + signum
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # nothing left behind in the process
    # SIGUSR1 (time limit ahead) requeues the job after saving; SIGTERM leaves it to SLURM
    expected = "requeue 4242\n" if signum == signal.SIGUSR1 else None
    assert (requests.read_text() if requests.exists() else None) == expected
    last = torch.load(tmp_path / "cut" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == stop_step
    assert not (tmp_path / "cut" / "metrics.json").exists()

    resumed = FinalState()
    assert train_in_process(args + ["--ckpt_path", "last"], resumed) == 0
    assert resumed.step == uninterrupted.step == 9
    assert resumed.device.type == uninterrupted.device.type == exactness_device().type
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # also after a run that finished
    # last.ckpt is written every 4 steps and at the end: it holds the final state
    assert torch.load(tmp_path / "cut" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 9
    different = [k for k, v in uninterrupted.weights.items() if not torch.equal(v, resumed.weights[k])]
    assert different == []


def test_resume_with_size_aware_batching_reaches_bitwise_the_same_weights(qm9_root: Path, tmp_path: Path) -> None:
    bucketed = (*RANDOM_RUN, "--data.bucket_window", "2")
    uninterrupted = FinalState()
    assert train_in_process(tiny_run_args(qm9_root, tmp_path, *bucketed, "--run_name", "full"), uninterrupted) == 0
    args = tiny_run_args(qm9_root, tmp_path, *bucketed, "--run_name", "cut")
    assert train_in_process(args, SignalDuringStep(4)) == 128 + signal.SIGTERM
    resumed = FinalState()
    assert train_in_process(args + ["--ckpt_path", "last"], resumed) == 0
    assert resumed.step == uninterrupted.step == 9
    different = [k for k, v in uninterrupted.weights.items() if not torch.equal(v, resumed.weights[k])]
    assert different == []


def test_preempted_names_the_checkpoint_and_the_exit_code() -> None:
    stop = Preempted("SIGUSR1", 12, Path("runs/x/checkpoints/last.ckpt"), requeued=True)
    assert stop.exit_code == 128 + signal.SIGUSR1
    assert "stopped after step 12 and saved runs/x/checkpoints/last.ckpt; SLURM job requeued" in str(stop)


@pytest.mark.device
def test_rng_state_round_trips_through_a_weights_only_checkpoint(device: torch.device) -> None:
    """The CUDA generator's state is part of it on a GPU (dropout masks are drawn there)."""
    torch.manual_seed(1), np.random.seed(2), random.seed(3)  # manual_seed seeds (and on a GPU starts) CUDA too
    torch.rand(1, device=device)
    state = rng_state()
    assert ("cuda" in state) == (device.type == "cuda")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    expected = (torch.rand(3), torch.rand(3, device=device), np.random.rand(3), random.random())
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    buffer.seek(0)
    set_rng_state(torch.load(buffer, weights_only=True))
    again = (torch.rand(3), torch.rand(3, device=device), np.random.rand(3), random.random())
    assert torch.equal(expected[0], again[0]) and torch.equal(expected[1], again[1])
    assert np.array_equal(expected[2], again[2]) and expected[3] == again[3]


def rng_states_of_two_processes(rank: int, world: int) -> None:
    torch.manual_seed(rank)
    trainer = SimpleNamespace(world_size=world, global_rank=rank)
    callback = RNGState()
    callback.setup(trainer, None, "fit")
    state = callback.state_dict()  # a collective: every process's state, in rank order
    assert state["world_size"] == world
    assert torch.equal(state["states"][rank]["torch"], torch.get_rng_state())
    assert not torch.equal(state["states"][0]["torch"], state["states"][1]["torch"])
    torch.manual_seed(99)
    callback.load_state_dict(state)
    callback.on_train_start(trainer, None)
    assert torch.equal(torch.get_rng_state(), state["states"][rank]["torch"])  # each process gets its own back


def test_every_process_saves_and_restores_its_own_rng_state() -> None:
    run_on_processes(rng_states_of_two_processes, 2)


class PoisonAtStep(pl.Callback):
    """Makes the loss of optimiser step ``step`` NaN (an infinite head bias) and records that batch."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.indices: list[int] | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object,
                             batch_idx: int) -> None:
        if trainer.global_step == self.step - 1 and self.indices is None:
            self.indices = batch.index.tolist()
            with torch.no_grad():
                pl_module.model.head.bias.fill_(float("inf"))


def test_non_finite_loss_names_step_graphs_and_last_good_checkpoint(
        qm9_root: Path, tmp_path: Path, package_log: pytest.LogCaptureFixture) -> None:
    poison = PoisonAtStep(4)
    args = tiny_run_args(qm9_root, tmp_path, "--checkpoint.every_n_steps", "2", "--run_name", "nan")
    assert train_in_process(args, poison) == NON_FINITE_LOSS
    message = package_log.text
    assert "non-finite training loss at optimiser step 4 (epoch 0, batch 3)" in message
    assert f"graphs {poison.indices}" in message
    # last.ckpt is from step 2, the best checkpoint from the validation after step 3: the newest is named
    assert f"Last good checkpoint: {tmp_path / 'nan' / 'checkpoints' / 'best-3.ckpt'}" in message
    assert torch.load(tmp_path / "nan" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2


def test_early_stopping_follows_the_tasks_own_monitor() -> None:
    from graphormer_urpe import GraphormerConfig
    from graphormer_urpe.run.callbacks import TaskEarlyStopping
    from graphormer_urpe.tasks import Classification, GraphRegression

    config = GraphormerConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2)
    for task, monitor, best, delta in ((GraphRegression(config), "val/mae", torch.inf, -0.01),
                                       (Classification(config), "val/auroc", -torch.inf, 0.01)):
        stopping = TaskEarlyStopping(patience=5, min_delta=0.01)
        stopping.setup(SimpleNamespace(val_check_interval=1.0, check_val_every_n_epoch=1), task, "fit")
        assert (stopping.monitor, stopping.best_score.item(), stopping.min_delta) == (monitor, best, delta)
        assert stopping.state_key == f"TaskEarlyStopping{{'monitor': '{monitor}', 'mode': '{task.monitor[1]}'}}"


@pytest.mark.slow
def test_the_recipe_trains_binary_labels_to_the_end(small_table: Path, tmp_path: Path) -> None:
    """Issue 37: the recipe on a binary table stopped after one epoch, its early stopping watching val/mae."""
    from graphormer_urpe.testing.runs import train

    metrics = train(["--config", "small_molecules_classification", "--data.source.path", str(small_table),
                     "--data.root", str(tmp_path / "data"), "--run_root", str(tmp_path / "runs"),
                     "--trainer.max_epochs", "3", "--trainer.enable_progress_bar", "false"])
    assert metrics["global_step"] == 3 * 2  # 48 training molecules in batches of 32, every epoch
    assert {"val/auroc", "val/auprc", "val/accuracy"} <= set(metrics["validation"])
