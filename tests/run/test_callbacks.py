"""Exact resume after a signal (step and epoch mode, early stopping, a stop where a validation follows), RNG states,
the non-finite-loss guard."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphormer_urpe.commands.exits import NON_FINITE_LOSS
from graphormer_urpe.run.callbacks import (
    NonFiniteLossGuard,
    Preempted,
    PreemptionCheckpoint,
    RNGState,
    StepProgressBar,
    rng_state,
    set_rng_state,
)
from graphormer_urpe.testing.device import exactness_device
from graphormer_urpe.testing.distributed import run_on_processes
from graphormer_urpe.testing.runs import (
    FailAtStep,
    FinalState,
    SignalDuringStep,
    same_run,
    small_run_args,
    tiny_run_args,
    train_in_process,
)

#: Every source of randomness switched on, gradient accumulation and clipping: the hardest case. On the
#: device of the exactness tests (dropout masks then come from the CUDA generator on a GPU), with
#: deterministic kernels (a GPU's atomic-add backward passes otherwise differ from run to run).
RANDOM_RUN = (
    "--model.encoder.dropout",
    "0.1",
    "--model.encoder.attention_dropout",
    "0.1",
    "--model.encoder.input_dropout",
    "0.1",
    "--model.encoder.activation_dropout",
    "0.1",
    "--model.encoder.drop_path",
    "0.3",
    "--trainer.accumulate_grad_batches",
    "2",
    "--trainer.gradient_clip_val",
    "1.0",
    "--trainer.max_steps",
    "9",
    "--checkpoint.every_n_steps",
    "4",
    "--trainer.accelerator",
    exactness_device().type,
    "--trainer.deterministic",
    "true",
)


@pytest.fixture(scope="module")
def uninterrupted(qm9_root: Path, tmp_path_factory: pytest.TempPathFactory) -> FinalState:
    final = FinalState()
    args = tiny_run_args(qm9_root, tmp_path_factory.mktemp("runs"), *RANDOM_RUN, "--run_name", "full")
    assert train_in_process(args, final) == 0
    return final


@pytest.fixture(scope="module")
def uninterrupted_with_a_worker(qm9_root: Path, tmp_path_factory: pytest.TempPathFactory) -> FinalState:
    """The uninterrupted run with one DataLoader worker: a worker's collation may round a float feature differently
    from the main process's (seen on an AMD EPYC: weights 7e-8 apart after 9 steps), so a resumed run with a worker is
    compared with an uninterrupted one with a worker."""
    final = FinalState()
    args = tiny_run_args(qm9_root, tmp_path_factory.mktemp("runs"), *RANDOM_RUN, "--data.num_workers", "1")
    assert train_in_process([*args, "--run_name", "full-worker"], final) == 0
    return final


# 40 training graphs in batches of 8, two batches per step: steps 3, 6 and 9 end an epoch (5 batches)
@pytest.mark.device
@pytest.mark.parametrize(("stop_step", "signum"), [(4, signal.SIGTERM), (3, signal.SIGUSR1)])
def test_resume_after_a_signal_reaches_bitwise_the_same_weights(
    uninterrupted: FinalState,
    qm9_root: Path,
    tmp_path: Path,
    stop_step: int,
    signum: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a SLURM job whose scontrol records what it is asked to do
    bin_dir, requests = tmp_path / "bin", tmp_path / "scontrol.txt"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {requests}\n')
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


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGUSR1, 138), (signal.SIGINT, 130)])
def test_a_signal_to_every_process_of_the_job_stops_as_one_to_the_main_process_does(
    uninterrupted_with_a_worker: FinalState, qm9_root: Path, tmp_path: Path, signum: int, code: int
) -> None:
    """SLURM's time limit, ``scancel`` or Ctrl-C signal the DataLoader workers too. A worker killed by a SIGTERM not
    from its parent made the main process fail ("DataLoader worker (pid N) is killed by signal: Terminated") wherever
    it was, here while it wrote last.ckpt; the workers now leave the stop to the main process."""
    args = tiny_run_args(qm9_root, tmp_path, *RANDOM_RUN, "--data.num_workers", "1", "--run_name", "cut")
    signalled = SignalDuringStep(4, signum, with_workers=True)
    assert train_in_process(args, signalled) == code
    assert signalled.workers_signalled  # the training loader's worker and the evaluation loader's
    assert torch.load(tmp_path / "cut" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    resumed = FinalState()
    assert train_in_process(args + ["--ckpt_path", "last"], resumed) == 0
    uninterrupted = uninterrupted_with_a_worker
    assert resumed.step == uninterrupted.step == 9
    different = [k for k, v in uninterrupted.weights.items() if not torch.equal(v, resumed.weights[k])]
    assert different == []  # the same batches, in the same order, as the uninterrupted run with a worker


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


#: Epoch mode, the small-data recipe's (``configs/small_molecules.yaml``): validation at every epoch's end, early
#: stopping, dropout. The 48 training molecules of the small table in batches of 8 give 6 steps an epoch. With
#: ``min_delta`` 10 no validation after the first improves, so early stopping decides at the end of epoch 2 (step 18)
#: on any machine, before ``max_epochs``.
EPOCH_MODE = (
    "--trainer.max_steps",
    "-1",
    "--trainer.max_epochs",
    "5",
    "--trainer.val_check_interval",
    "1.0",
    "--trainer.check_val_every_n_epoch",
    "1",
    "--model.encoder.dropout",
    "0.1",
    "--model.encoder.attention_dropout",
    "0.1",
    "--trainer.callbacks+="
    + json.dumps(
        {
            "class_path": "pytorch_lightning.callbacks.EarlyStopping",
            "init_args": {"monitor": "val/mae", "patience": 2, "min_delta": 10.0},
        }
    ),
)
STEPS_PER_EPOCH, EARLY_STOP_STEP = 6, 18


@pytest.fixture(scope="module")
def epoch_mode(small_table: Path, tmp_path_factory: pytest.TempPathFactory):
    """``epoch_mode.args(descriptors, name, *extra)``: the arguments of the epoch-mode run on the small table
    (``descriptors`` null or rdkit2d, ``extra`` options added; the run's name last); ``epoch_mode.uninterrupted(
    descriptors, *extra)``: that run uninterrupted (trained once), its final state and run directory."""
    root = tmp_path_factory.mktemp("epoch_mode")
    finished: dict[tuple[str, ...], tuple[FinalState, Path]] = {}

    def args(descriptors: str, name: str, *extra: str) -> list[str]:
        return small_run_args(
            small_table,
            root / "data",
            root / "runs",
            *EPOCH_MODE,
            "--data.source.descriptors",
            descriptors,
            *extra,
            "--run_name",
            name,
        )

    def uninterrupted(descriptors: str, *extra: str) -> tuple[FinalState, Path]:
        key = (descriptors, *extra)
        if key not in finished:
            final = FinalState()
            name = "-".join(["full", descriptors, *(option.strip("-") for option in extra)])
            assert train_in_process(args(descriptors, name, *extra), final) == 0
            finished[key] = (final, root / "runs" / name)
        return finished[key]

    return SimpleNamespace(args=args, uninterrupted=uninterrupted)


# 3: within epoch 0; 12: epoch 1's last step (its validation and early stopping's check follow); 18: the last step of
# epoch 2, whose end decides to stop; 9: within epoch 1
@pytest.mark.parametrize(
    ("descriptors", "stop_step"),
    [
        ("null", 3),
        pytest.param("null", 12, marks=pytest.mark.slow),
        pytest.param("null", EARLY_STOP_STEP, marks=pytest.mark.slow),
        pytest.param("rdkit2d", 9, marks=pytest.mark.slow),
        pytest.param("rdkit2d", EARLY_STOP_STEP, marks=pytest.mark.slow),
    ],
)
def test_an_epoch_mode_run_resumed_after_a_signal_ends_where_the_uninterrupted_one_does(
    epoch_mode: SimpleNamespace, descriptors: str, stop_step: int, package_log: pytest.LogCaptureFixture
) -> None:
    """Issue 38: resumed in epoch mode, a run trained again on the first batches of its epoch and skipped as many (its
    loader's position was never loaded), and a stop at an epoch's last step lost that epoch's validation and early
    stopping's check. Now weights, every logged value, the best checkpoint and the final metrics are the
    uninterrupted run's."""
    full = epoch_mode.uninterrupted(descriptors)
    assert full[0].step == EARLY_STOP_STEP  # early stopping decided, before max_epochs
    args = epoch_mode.args(descriptors, f"cut-{descriptors}-{stop_step}")
    assert train_in_process(args, SignalDuringStep(stop_step)) == 128 + signal.SIGTERM
    last = Path(args[args.index("--run_root") + 1]) / args[-1] / "checkpoints" / "last.ckpt"
    if stop_step % STEPS_PER_EPOCH == 0:  # the checkpoint waits for the end of the epoch
        assert (
            f"SIGTERM: finishing the end of its epoch (validation included) after step {stop_step}, then writing {last}"
        ) in package_log.text
    resumed = FinalState()
    assert train_in_process(args + ["--ckpt_path", "last"], resumed) == 0
    assert same_run((resumed, last.parent.parent), full) == []


# 3: within epoch 0, before any validation; 12: epoch 1's last step, a checkpoint written after its validation (the
# average in the weights); 9: within epoch 1, after a validation swapped the average in and the next step out
@pytest.mark.parametrize(
    "stop_step", [3, pytest.param(12, marks=pytest.mark.slow), pytest.param(9, marks=pytest.mark.slow)]
)
def test_a_run_with_a_weight_average_resumed_after_a_signal_ends_where_the_uninterrupted_one_does(
    epoch_mode: SimpleNamespace, stop_step: int
) -> None:
    """``model.optim.weight_average``: the training weights and the average are both in every checkpoint, whichever
    of them the network held when it was written, so the resumed run's weights, validations (which judge the
    average), best checkpoint and final metrics are the uninterrupted run's."""
    averaged = ("--model.optim.weight_average", "0.5")
    full = epoch_mode.uninterrupted("null", *averaged)
    args = epoch_mode.args("null", f"cut-averaged-{stop_step}", *averaged)
    assert train_in_process(args, SignalDuringStep(stop_step)) == 128 + signal.SIGTERM
    resumed = FinalState()
    assert train_in_process(args + ["--ckpt_path", "last"], resumed) == 0
    run_dir = Path(args[args.index("--run_root") + 1]) / args[-1]
    assert same_run((resumed, run_dir), full) == []
    assert same_run((resumed, run_dir), epoch_mode.uninterrupted("null")) != []  # the average changes the run


@pytest.mark.slow
def test_a_step_mode_run_stopped_where_a_validation_follows_validates_before_it_saves(
    small_table: Path, tmp_path: Path
) -> None:
    """A checkpoint written before the validation due after its step was resumed without that validation (Lightning
    counts it done): no validation logged at that step, best checkpoint and early stopping blind to it. Stopped by a
    signal (step 8) or killed after a periodic ``last.ckpt`` (step 4), both with a validation every 4 steps, the run
    resumes where the uninterrupted one went on."""
    every_4 = ("--trainer.max_steps", "12", "--trainer.val_check_interval", "4", "--checkpoint.every_n_steps", "4")

    def args(name: str) -> list[str]:
        return small_run_args(small_table, tmp_path / "data", tmp_path / "runs", *every_4, "--run_name", name)

    full = FinalState()
    assert train_in_process(args("full"), full) == 0
    uninterrupted = (full, tmp_path / "runs" / "full")
    assert train_in_process(args("signal"), SignalDuringStep(8)) == 128 + signal.SIGTERM
    resumed = FinalState()
    assert train_in_process(args("signal") + ["--ckpt_path", "last"], resumed) == 0
    assert same_run((resumed, tmp_path / "runs" / "signal"), uninterrupted) == []

    with pytest.raises(RuntimeError, match="failed in step 6"):
        train_in_process(args("killed"), FailAtStep(6))
    last = torch.load(tmp_path / "runs" / "killed" / "checkpoints" / "last.ckpt", weights_only=True)
    best = next(state for key, state in last["callbacks"].items() if key.startswith("ModelCheckpoint{'monitor': 'val"))
    assert (last["global_step"], Path(best["best_model_path"]).name) == (4, "best-4.ckpt")  # after step 4's validation
    resumed = FinalState()
    assert train_in_process(args("killed") + ["--ckpt_path", "last"], resumed) == 0
    assert same_run((resumed, tmp_path / "runs" / "killed"), uninterrupted) == []


@pytest.mark.slow
def test_a_step_mode_run_with_a_weight_average_resumed_after_a_signal_ends_where_the_uninterrupted_one_does(
    small_table: Path, tmp_path: Path
) -> None:
    """Step mode, a validation every 4 steps, ``model.optim.weight_average``: stopped at step 8 (the checkpoint
    written after its validation, the average in the weights), the run resumes with the training weights."""
    averaged = ("--trainer.max_steps", "12", "--trainer.val_check_interval", "4", "--model.optim.weight_average", "0.5")

    def args(name: str) -> list[str]:
        return small_run_args(small_table, tmp_path / "data", tmp_path / "runs", *averaged, "--run_name", name)

    full = FinalState()
    assert train_in_process(args("full"), full) == 0
    assert train_in_process(args("signal"), SignalDuringStep(8)) == 128 + signal.SIGTERM
    resumed = FinalState()
    assert train_in_process(args("signal") + ["--ckpt_path", "last"], resumed) == 0
    assert same_run((resumed, tmp_path / "runs" / "signal"), (full, tmp_path / "runs" / "full")) == []


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

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step == self.step - 1 and self.indices is None:
            self.indices = batch.index.tolist()
            with torch.no_grad():
                pl_module.model.head.bias.fill_(float("inf"))


def test_non_finite_loss_names_step_graphs_and_last_good_checkpoint(
    qm9_root: Path, tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    poison = PoisonAtStep(4)
    args = tiny_run_args(qm9_root, tmp_path, "--checkpoint.every_n_steps", "2", "--run_name", "nan")
    assert train_in_process(args, poison) == NON_FINITE_LOSS
    message = package_log.text
    assert "non-finite training loss at optimiser step 4 (epoch 0, batch 3)" in message
    assert f"graphs {poison.indices}" in message
    # last.ckpt is from step 2, the best checkpoint from the validation after step 3: the newest is named
    assert f"Last good checkpoint: {tmp_path / 'nan' / 'checkpoints' / 'best-3.ckpt'}" in message
    assert torch.load(tmp_path / "nan" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2


@pytest.fixture
def losses_read_as_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss guard on the CPU as on a GPU: losses read together every log interval, not every step."""
    monkeypatch.setattr(NonFiniteLossGuard, "EVERY_STEP_DEVICES", ())


@pytest.mark.usefixtures("losses_read_as_on_a_gpu")
def test_losses_read_later_still_name_the_first_bad_step_and_keep_it_out_of_every_checkpoint(
    qm9_root: Path, tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    """Losses read every 5 steps: the NaN of step 2 is found when the validation after step 3 would write
    best-3.ckpt, which is then not written."""
    poison = PoisonAtStep(2)
    args = tiny_run_args(
        qm9_root, tmp_path, "--checkpoint.every_n_steps", "0", "--run_name", "nan", "--trainer.log_every_n_steps", "5"
    )
    assert train_in_process(args, poison) == NON_FINITE_LOSS
    message = package_log.text
    assert "non-finite training loss at optimiser step 2 (epoch 0, batch 1)" in message
    assert f"graphs {poison.indices}" in message and "found 1 step(s) later, losses being read every 5 steps" in message
    assert "Last good checkpoint: none written yet" in message
    assert not list((tmp_path / "nan" / "checkpoints").glob("*.ckpt"))


class HostReads(TorchDispatchMode):
    """Counts the reads of a tensor's value by the host (``item()``, ``float()``, ``bool()``) in its block."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's signature)
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


class HostReadsPerStep(pl.Callback):
    """The host reads of each optimiser step: from the start of its batch to the start of the next (the training
    loop's logging comes after the batch's end), and the steps whose batch began an epoch."""

    def __init__(self, reads: HostReads) -> None:
        self.reads = reads
        self.per_step: dict[int, int] = {}
        self.epoch_starts: set[int] = set()  # steps after which the loader began an epoch
        self._at_start = 0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step:
            self.per_step[trainer.global_step] = self.reads.count - self._at_start
        if batch_idx == 0:
            self.epoch_starts.add(trainer.global_step)  # the loader began the epoch after this step
        self._at_start = self.reads.count


@pytest.mark.usefixtures("losses_read_as_on_a_gpu")
def test_a_training_step_reads_no_value_from_the_device_between_log_steps(qm9_root: Path, tmp_path: Path) -> None:
    """A step of a run as train.py makes it (the task's logging, the guards, fused AdamW, clipping, the schedule)
    reads nothing back from the device, so the host never waits for it; only the steps that log read their values
    (every 4th here). Eager: a dispatch mode cannot watch a compiled step, whose graph holds no read either (it
    compiles whole, tests/tasks/test_compiled.py). On a GPU the check counts every synchronisation (docs/gpu.md)."""
    reads = HostReads()
    per_step = HostReadsPerStep(reads)
    args = tiny_run_args(
        qm9_root,
        tmp_path,
        "--trainer.max_steps",
        "12",
        "--trainer.log_every_n_steps",
        "4",
        "--trainer.val_check_interval",
        "12",
        "--checkpoint.every_n_steps",
        "0",
        "--trainer.gradient_clip_val",
        "1.0",
        "--data.pad_nodes_to",
        "8",
    )
    with reads:
        assert train_in_process(args, per_step) == 0
    # after the last step of an epoch (every 5th: 40 graphs in batches of 8) the loader starts the next and draws
    # its base seed from a CPU generator with item(), a read of host memory that keeps no GPU waiting
    quiet = {step: count for step, count in per_step.per_step.items() if step % 4 and step not in per_step.epoch_starts}
    assert set(quiet.values()) == {0}, str(per_step.per_step)
    assert len(quiet) == 7 and per_step.per_step[4] and per_step.per_step[8]  # the log steps do read


def signal_agreement_of_two_processes(rank: int, world: int, tmp: str) -> None:
    """Process 1 received SIGUSR1, process 0 nothing: both stop, both requeue, agreeing through the host."""
    callback = PreemptionCheckpoint(Path(tmp))
    trainer = SimpleNamespace(world_size=world, global_rank=rank)
    callback.on_train_start(trainer, None)
    try:
        assert callback._agreed(trainer) == (False, False)
        callback.received = "SIGUSR1" if rank == 1 else None
        assert callback._agreed(trainer) == (True, True)
    finally:
        callback.on_train_end(trainer, None)


def test_processes_agree_on_a_signal_through_the_host(tmp_path: Path) -> None:
    run_on_processes(signal_agreement_of_two_processes, 2, str(tmp_path))


def test_the_progress_bar_redraws_at_most_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each redraw reads the logged values from the device: a bounded number of waits, whatever the step rate."""
    clock = iter([0.0, 0.2, 0.9, 1.1, 1.5, 2.3])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    bar = StepProgressBar(refresh_seconds=1.0)
    drawn = [bar._should_update(current, total=100) for current in range(1, 6)]
    assert drawn == [True, False, False, True, False]
    assert bar._should_update(100, total=100)  # the last batch of an epoch always


class TrainBarAtFirstBatch(pl.Callback):
    """Keeps the training bar's description, total and first count when the first batch of this process ends."""

    seen: tuple[str, int | None, int, int] | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, *_: object) -> None:
        if self.seen is None:
            bar = trainer.progress_bar_callback.train_progress_bar
            self.seen = (bar.desc, bar.total, bar.initial, bar.n)


def test_a_run_resumed_mid_epoch_shows_its_epoch_total_and_position(qm9_root: Path, tmp_path: Path) -> None:
    """Lightning skips on_train_epoch_start for an epoch resumed midway: without StepProgressBar's own start the bar
    read ``Training: 3/?`` with a rate counting the batches before the resume."""
    args = tiny_run_args(qm9_root, tmp_path, *RANDOM_RUN, "--run_name", "cut")
    assert train_in_process(args, SignalDuringStep(4)) == 128 + signal.SIGTERM  # epoch 1's first two batches done
    shown = TrainBarAtFirstBatch()
    with_bar = [*args, "--trainer.enable_progress_bar", "true", "--ckpt_path", "last"]  # the last flag wins
    assert train_in_process(with_bar, shown) == 0
    # 5 batches an epoch, two a step (the third step of an epoch has one): step 4 trained epoch 1's first two
    # batches; the bar starts at 2 of 5 (its rate counts from there) and this process's first batch is the 3rd
    assert shown.seen == ("Epoch 1: ", 5, 2, 3)


def test_early_stopping_follows_the_tasks_own_monitor() -> None:
    from graphormer_urpe import GraphormerConfig
    from graphormer_urpe.run.callbacks import TaskEarlyStopping
    from graphormer_urpe.tasks import Classification, GraphRegression

    config = GraphormerConfig(num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2)
    for task, monitor, best, delta in (
        (GraphRegression(config), "val/mae", torch.inf, -0.01),
        (Classification(config), "val/auroc", -torch.inf, 0.01),
    ):
        stopping = TaskEarlyStopping(patience=5, min_delta=0.01)
        stopping.setup(SimpleNamespace(val_check_interval=1.0, check_val_every_n_epoch=1), task, "fit")
        assert (stopping.monitor, stopping.best_score.item(), stopping.min_delta) == (monitor, best, delta)
        assert stopping.state_key == f"TaskEarlyStopping{{'monitor': '{monitor}', 'mode': '{task.monitor[1]}'}}"


@pytest.mark.slow
def test_the_recipe_trains_binary_labels_to_the_end(small_table: Path, tmp_path: Path) -> None:
    """Issue 37: the recipe on a binary table stopped after one epoch, its early stopping watching val/mae."""
    from graphormer_urpe.testing.runs import train

    metrics = train(
        [
            "--config",
            "small_molecules_classification",
            "--data.source.path",
            str(small_table),
            "--data.root",
            str(tmp_path / "data"),
            "--run_root",
            str(tmp_path / "runs"),
            "--trainer.max_epochs",
            "3",
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert metrics["global_step"] == 3 * 2  # 48 training molecules in batches of 32, every epoch
    assert {"val/auroc", "val/auprc", "val/accuracy"} <= set(metrics["validation"])
