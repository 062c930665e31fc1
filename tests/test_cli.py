"""Run directories shared by all processes, and the run-operation options of the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny_run_args
from lightning_fabric.plugins.environments import SLURMEnvironment

from graphormer_urpe import cli
from graphormer_urpe.callbacks import PreemptionCheckpoint
from graphormer_urpe.cli import RUN_DIR_ENV, GraphormerCLI, resolve_run_dir
from graphormer_urpe.tracking import WandbOptions

LAUNCHER_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEP_ID", "SLURM_NTASKS",
                      "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                      "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", RUN_DIR_ENV)


@pytest.fixture
def plain_process(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No launcher variables; run directories chosen by earlier tests forgotten."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "_CHOSEN_HERE", set())
    return monkeypatch


def test_run_name_wins(plain_process: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain_process.setenv("SLURM_JOB_ID", "77")
    assert resolve_run_dir(tmp_path, "mine", "cfg") == tmp_path / "mine"


def test_processes_launched_by_this_one_inherit_its_directory(plain_process: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    chosen = resolve_run_dir(tmp_path, None, "cfg")
    assert chosen.name.startswith("cfg-") and chosen.parent == tmp_path
    # a later run in the same process gets a new directory, not the one it exported ...
    second = resolve_run_dir(tmp_path, None, "cfg")
    assert second != chosen
    # ... while a child process (Lightning's DDP launcher copies the environment) uses the parent's
    plain_process.setattr(cli, "_CHOSEN_HERE", set())
    plain_process.setenv(RUN_DIR_ENV, str(chosen))
    assert resolve_run_dir(tmp_path, None, "cfg") == chosen


def test_slurm_and_torchrun_give_every_process_the_same_directory(plain_process: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    plain_process.setenv("TORCHELASTIC_RUN_ID", "3f2a9c1e-aaaa-bbbb")
    assert resolve_run_dir(tmp_path, None, "cfg") == tmp_path / "cfg-torchrun-3f2a9c1e-aaa"
    plain_process.setattr(cli, "_CHOSEN_HERE", set())
    plain_process.delenv(RUN_DIR_ENV)
    plain_process.setenv("SLURM_JOB_ID", "12345")
    plain_process.setenv("SLURM_STEP_ID", "0")
    assert resolve_run_dir(tmp_path, None, "cfg") == tmp_path / "cfg-slurm12345.0"  # the same after a requeue


def test_several_processes_without_a_common_id_must_be_named(plain_process: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    plain_process.setenv("TORCHELASTIC_RUN_ID", "none")
    plain_process.setenv("WORLD_SIZE", "8")
    with pytest.raises(SystemExit, match="pass --run_name"):
        resolve_run_dir(tmp_path, None, "cfg")


def test_run_operation_options_reach_callbacks_and_loggers(plain_process: pytest.MonkeyPatch, qm9_root: Path,
                                                           tmp_path: Path) -> None:
    parsed = GraphormerCLI(tiny_run_args(
        qm9_root, tmp_path, "--run_name", "opts", "--checkpoint.every_n_steps", "7", "--checkpoint.signals",
        "[SIGUSR1]", "--checkpoint.requeue", "false", "--logger", "wandb", "--wandb.project", "proj",
        "--wandb.tags", "[a, b]", "--wandb.mode", "disabled", "--ckpt_path", "last"))
    assert parsed.config["ckpt_path"] == "last"
    assert isinstance(parsed.config_init["wandb"], WandbOptions) and parsed.config_init["wandb"].tags == ["a", "b"]
    last = [c for c in parsed.trainer.checkpoint_callbacks if c.save_last]
    assert len(last) == 1 and last[0]._every_n_train_steps == 7 and last[0].dirpath == str(tmp_path / "opts" /
                                                                                             "checkpoints")
    preemption = next(c for c in parsed.trainer.callbacks if isinstance(c, PreemptionCheckpoint))
    assert preemption.signals == ("SIGUSR1",) and preemption.requeue_signals == ()
    assert [type(logger).__name__ for logger in parsed.trainer.loggers] == ["CSVLogger", "WandbLogger"]
    assert parsed.trainer.loggers[1]._wandb_init["project"] == "proj"


def test_under_slurm_lightning_auto_requeue_is_replaced_by_ours(plain_process: pytest.MonkeyPatch, qm9_root: Path,
                                                                tmp_path: Path) -> None:
    for name, value in {"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_JOB_ID": "99",
                        "SLURM_JOB_NAME": "train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                        "SLURM_NODELIST": "node1"}.items():
        plain_process.setenv(name, value)
    parsed = GraphormerCLI(tiny_run_args(qm9_root, tmp_path))
    environment = parsed.trainer._accelerator_connector.cluster_environment
    assert isinstance(environment, SLURMEnvironment) and not environment.auto_requeue
    assert parsed.run_dir == tmp_path / "qm9_gap-slurm99"
