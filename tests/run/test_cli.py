"""train.py / evaluate.py end to end, config resolution, every YAML in configs/, run directories shared by
all processes, and the run-operation options."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from lightning_fabric.plugins.environments import SLURMEnvironment
from pytorch_lightning.callbacks import ModelCheckpoint

import evaluate
from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.errors import ConfigError, InputError
from graphormer_urpe.run import cli
from graphormer_urpe.run.callbacks import PreemptionCheckpoint
from graphormer_urpe.run.checkpoints import CONFIG_KEY
from graphormer_urpe.run.cli import RUN_DIR_ENV, GraphormerCLI, TrainingCLI, resolve_config_paths, resolve_run_dir
from graphormer_urpe.run.tracking import WandbOptions
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.runs import tiny_run_args, train

TINY = [
    "--config",
    "qm9_gap",
    "--data.source.max_molecules",
    "400",
    "--data.num_workers",
    "0",
    "--data.preprocess_workers",
    "0",
    "--data.batch_size",
    "32",
    "--model.encoder.num_layers",
    "2",
    "--model.encoder.hidden_dim",
    "16",
    "--model.encoder.ffn_dim",
    "16",
    "--model.encoder.num_heads",
    "4",
    "--trainer.max_steps",
    "8",
    "--trainer.val_check_interval",
    "4",
    "--model.optim.warmup_steps",
    "2",
    "--trainer.enable_progress_bar",
    "false",
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    tmp = tmp_path_factory.mktemp("run")
    data_root = tmp / "data"
    metrics = train([*TINY, "--data.root", str(data_root), "--run_root", str(tmp / "runs"), "--run_name", "tiny"])
    return tmp / "runs" / "tiny", metrics, data_root


def test_train_writes_a_complete_run_directory(trained_run) -> None:
    run_dir, metrics, _ = trained_run
    assert json.loads((run_dir / "metrics.json").read_text()) == json.loads(json.dumps(metrics))
    assert set(metrics["validation"]) == {"val/mae"} and set(metrics["test"]) == {"test/mae"}
    assert metrics["global_step"] == 8 and Path(metrics["best_checkpoint"]).is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "metrics.csv").is_file()
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["model"]["init_args"]["encoder"]["num_layers"] == 2
    checkpoint = torch.load(metrics["best_checkpoint"], weights_only=True)
    assert checkpoint["hyper_parameters"]["encoder"]["node_vocab"] == [119, 5, 12, 12, 10, 6, 6, 2, 2]  # linked
    embedded = yaml.safe_load(checkpoint[CONFIG_KEY])
    assert embedded["model"] == config["model"] and embedded["data"] == config["data"]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["seed"] == 0 and record["parameters"] > 0 and record["versions"]["torch"].startswith("2.")
    assert record["dataset"]["splits"] == {"train": 320, "valid": 40, "test": 40} and record["git_commit"]


def test_evaluate_reproduces_the_logged_validation_metric(trained_run, tmp_path: Path) -> None:
    run_dir, metrics, data_root = trained_run
    out = tmp_path / "eval.json"
    result = evaluate.main(
        ["--ckpt", metrics["best_checkpoint"], "--split", "valid", "--out", str(out), "--data.root", str(data_root)]
    )
    assert result.metrics["val/mae"] == metrics["validation"]["val/mae"]  # exactly, on CPU
    assert json.loads(out.read_text())["metrics"] == result.metrics
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        test = evaluate.main(["--ckpt", metrics["best_checkpoint"], "--split", "test", "--data.root", str(data_root)])
    assert test.metrics["test/mae"] == metrics["test"]["test/mae"]
    # the checkpoint was written in another directory: nothing to say about it
    assert caught and not [w for w in caught if "dirpath" in str(w.message)], [str(w.message) for w in caught]


def test_checkpoint_rebuilds_the_model_alone(trained_run) -> None:
    from graphormer_urpe.tasks import GraphRegression

    _, metrics, _ = trained_run
    task = GraphRegression.from_checkpoint(metrics["best_checkpoint"])
    assert task.model.config.num_layers == 2 and list(task.model.config.node_vocab)[0] == 119


def test_unknown_key_fails_naming_it() -> None:
    with pytest.raises(InputError) as stop:
        GraphormerCLI(["--config", "qm9_gap", "--model.encoder.num_layerz", "3"])
    assert str(stop.value) == "model.encoder.num_layerz: no such option"


@pytest.mark.slow
def test_a_trainer_setting_lightning_refuses_is_one_error_line_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO_DIR / "train.py"),
            "--config",
            "qm9_gap.yaml",
            "--trainer.max_steps",
            "-5",
            "--logger",
            "none",
            "--run_root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and errors[0].endswith(
        "ERROR] trainer.max_steps=-5: must be an integer >= -1 (-1: no limit)"
    ), done.stderr
    assert not any(tmp_path.iterdir())  # stopped before the run directory was made


def test_bare_config_names_resolve_to_configs_dir(tmp_path: Path) -> None:
    assert resolve_config_paths(["--config", "zinc_subset.yaml"]) == ["--config", str(CONFIG_DIR / "zinc_subset.yaml")]
    assert resolve_config_paths(["--config=zinc_full"]) == [f"--config={CONFIG_DIR / 'zinc_full.yaml'}"]
    own = tmp_path / "mine.yaml"
    own.write_text("{}")
    assert resolve_config_paths(["--config", str(own)]) == ["--config", str(own)]
    with pytest.raises(
        ConfigError,
        match=r"^config='zinc_subsett': is neither a file nor a shipped config "
        r"\(available: .*qm9_gap",
    ):
        resolve_config_paths(["--config", "zinc_subsett"])
    with pytest.raises(ConfigError, match=r"^config='zinc_subsett': is neither"):  # bad input, as every refusal
        GraphormerCLI(["--config", "zinc_subsett"])


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
def test_every_config_instantiates(config: str, tmp_path: Path) -> None:
    cli = GraphormerCLI(["--config", config, "--run_root", str(tmp_path), "--logger", "none"])
    encoder = cli.model.model.config
    assert encoder.hidden_dim % encoder.num_heads == 0
    if config.startswith("zinc"):
        assert sum(p.numel() for p in cli.model.parameters()) < 500_000  # the papers' budget
        assert encoder.num_heads == 8 and encoder.num_layers == 12 and encoder.hidden_dim == 80


@pytest.mark.slow
def test_training_needs_no_compiled_pyg_extension(tmp_path: Path) -> None:
    """torch_scatter, torch_sparse, pyg_lib and torch_cluster are made unimportable, then we train."""
    script = f"""
import sys
for name in ("torch_scatter", "torch_sparse", "pyg_lib", "torch_cluster"):
    sys.modules[name] = None  # import raises ImportError, find_spec returns None: as if absent
sys.path.insert(0, {str(REPO_DIR)!r})
from graphormer_urpe.testing.runs import train
train({TINY!r} + ["--data.root", {str(tmp_path / "data")!r}, "--run_root", {str(tmp_path / "runs")!r}])
import torch_geometric.typing as t
assert not (t.WITH_TORCH_SCATTER or t.WITH_TORCH_SPARSE or t.WITH_PYG_LIB)
blocked = ("torch_scatter", "torch_sparse", "pyg_lib", "torch_cluster")
assert all(sys.modules.get(name) is None for name in blocked)
print("TRAINED")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0 and "TRAINED" in done.stdout, done.stderr[-3000:]


@pytest.mark.slow
def test_a_gloo_process_group_is_destroyed_before_the_interpreter_exits(tmp_path: Path) -> None:
    """Lightning destroys only NCCL groups at exit; a gloo group left to finalisation aborted a finished
    two-process ``evaluate.py`` (SIGABRT). The probe, registered before the CLI's handler, runs after it."""
    script = f"""
import atexit
import sys
import torch.distributed as dist
atexit.register(lambda: print("initialised at exit:", dist.is_initialized()))
sys.path.insert(0, {str(REPO_DIR)!r})
import graphormer_urpe.run.cli
dist.init_process_group("gloo", init_method={(tmp_path / "store").as_uri()!r}, rank=0, world_size=1)
print("initialised:", dist.is_initialized())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["initialised: True", "initialised at exit: False"]


LAUNCHER_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_STEP_ID",
    "SLURM_NTASKS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_JOB_NAME",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "TORCHELASTIC_RUN_ID",
    "WORLD_SIZE",
    "NODE_RANK",
    "LOCAL_RANK",
    RUN_DIR_ENV,
)


@pytest.fixture
def plain_process(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No launcher variables; run directories chosen by earlier tests forgotten."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "_CHOSEN_HERE", set())
    return monkeypatch


def test_run_name_wins(plain_process: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain_process.setenv("SLURM_JOB_ID", "77")
    assert resolve_run_dir(tmp_path, "mine", "cfg").path == tmp_path / "mine"
    assert not (tmp_path / "mine").exists()  # created when the run starts, after every check


def test_processes_launched_by_this_one_inherit_its_directory(
    plain_process: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    chosen = resolve_run_dir(tmp_path, None, "cfg").path
    assert chosen.name.startswith("cfg-") and chosen.parent == tmp_path and chosen.is_dir()
    # a later run in the same process gets a new directory, not the one it exported ...
    second = resolve_run_dir(tmp_path, None, "cfg").path
    assert second != chosen
    # ... while a child process (Lightning's DDP launcher copies the environment) uses the parent's
    plain_process.setattr(cli, "_CHOSEN_HERE", set())
    plain_process.setenv(RUN_DIR_ENV, str(chosen))
    assert resolve_run_dir(tmp_path, None, "cfg").path == chosen


def test_slurm_and_torchrun_give_every_process_the_same_directory(
    plain_process: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plain_process.setenv("TORCHELASTIC_RUN_ID", "3f2a9c1e-aaaa-bbbb")
    assert resolve_run_dir(tmp_path, None, "cfg").path == tmp_path / "cfg-torchrun-3f2a9c1e-aaa"
    plain_process.setattr(cli, "_CHOSEN_HERE", set())
    plain_process.delenv(RUN_DIR_ENV)
    plain_process.setenv("SLURM_JOB_ID", "12345")
    plain_process.setenv("SLURM_STEP_ID", "0")
    assert resolve_run_dir(tmp_path, None, "cfg").path == tmp_path / "cfg-slurm12345.0"  # the same after a requeue


def test_a_run_root_or_data_root_under_home_is_the_homes(plain_process: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``~/runs`` (quoted on the command line, or in a YAML file) never makes a directory named ``~``."""
    plain_process.setenv("HOME", str(tmp_path))
    cli = TrainingCLI(
        [
            "--config",
            "smiles_csv_example",
            "--run_root",
            "~/runs",
            "--run_name",
            "r",
            "--data.root",
            "~/data",
            "--logger",
            "none",
        ]
    )
    assert cli.run_dir == tmp_path / "runs" / "r" and cli.datamodule.root == tmp_path / "data"


def test_several_processes_without_a_common_id_must_be_named(plain_process: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain_process.setenv("TORCHELASTIC_RUN_ID", "none")
    plain_process.setenv("WORLD_SIZE", "8")
    with pytest.raises(InputError, match="pass --run_name"):
        resolve_run_dir(tmp_path, None, "cfg")


def test_run_operation_options_reach_callbacks_and_loggers(
    plain_process: pytest.MonkeyPatch, qm9_root: Path, tmp_path: Path
) -> None:
    parsed = TrainingCLI(
        tiny_run_args(
            qm9_root,
            tmp_path,
            "--run_name",
            "opts",
            "--checkpoint.every_n_steps",
            "7",
            "--checkpoint.signals",
            "[SIGUSR1]",
            "--checkpoint.requeue",
            "false",
            "--logger",
            "wandb",
            "--wandb.project",
            "proj",
            "--wandb.tags",
            "[a, b]",
            "--wandb.mode",
            "disabled",
            "--ckpt_path",
            "last",
        )
    )
    assert parsed.config["ckpt_path"] == "last"
    assert isinstance(parsed.config_init["wandb"], WandbOptions) and parsed.config_init["wandb"].tags == ["a", "b"]
    last = [c for c in parsed.trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.save_last]
    assert (
        len(last) == 1
        and last[0]._every_n_train_steps == 7
        and last[0].dirpath == str(tmp_path / "opts" / "checkpoints")
    )
    # called after every other callback (the best checkpoint's and last.ckpt's included): what it saves holds theirs
    preemption = parsed.trainer.callbacks[-1]
    assert isinstance(preemption, PreemptionCheckpoint)
    assert preemption.signals == ("SIGUSR1",) and preemption.requeue_signals == ()
    assert [type(logger).__name__ for logger in parsed.trainer.loggers] == ["MetricsLog", "WandbLogger"]
    assert parsed.trainer.loggers[1]._wandb_init["project"] == "proj"


def test_under_slurm_lightning_auto_requeue_is_replaced_by_ours(
    plain_process: pytest.MonkeyPatch, qm9_root: Path, tmp_path: Path
) -> None:
    for name, value in {
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_JOB_ID": "99",
        "SLURM_JOB_NAME": "train",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "node1",
    }.items():
        plain_process.setenv(name, value)
    parsed = TrainingCLI(tiny_run_args(qm9_root, tmp_path))
    environment = parsed.trainer._accelerator_connector.cluster_environment
    assert isinstance(environment, SLURMEnvironment) and not environment.auto_requeue
    assert parsed.run_dir == tmp_path / "qm9_gap-slurm99"


def test_torch_threads_leave_a_core_to_each_loader_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the training process takes the cores left by its loader workers (at least one thread), so that no
    thread waits for a core another process holds; --threads decides, and OMP_NUM_THREADS keeps torch's own."""
    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setattr(cli, "available_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for workers in (0, 3, 8, 12):
        cli.set_threads({"threads": None, "data": {"init_args": {"num_workers": workers}}})
    cli.set_threads({"threads": 5, "data": {"init_args": {"num_workers": 3}}})
    assert threads == [8, 5, 1, 1, 5]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    cli.set_threads({"threads": None, "data": {"init_args": {"num_workers": 3}}})
    assert threads == [8, 5, 1, 1, 5]  # the environment decides
