"""train.py / evaluate.py end to end, config resolution, and every YAML in configs/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import evaluate
import train
from graphormer_urpe.cli import CONFIG_DIR, CONFIG_KEY, REPO_DIR, GraphormerCLI, resolve_config_paths

TINY = [
    "--config", "qm9_gap", "--data.source.max_molecules", "400", "--data.num_workers", "0",
    "--data.preprocess_workers", "0", "--data.batch_size", "32", "--model.encoder.num_layers", "2",
    "--model.encoder.hidden_dim", "16", "--model.encoder.ffn_dim", "16", "--model.encoder.num_heads", "4",
    "--trainer.max_steps", "8", "--trainer.val_check_interval", "4", "--model.warmup_steps", "2",
    "--trainer.enable_progress_bar", "false",
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    tmp = tmp_path_factory.mktemp("run")
    data_root = tmp / "data"
    metrics = train.main([*TINY, "--data.root", str(data_root), "--run_root", str(tmp / "runs"), "--run_name", "tiny"])
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
    result = evaluate.main(["--ckpt", metrics["best_checkpoint"], "--split", "valid", "--out", str(out),
                            "--data.root", str(data_root)])
    assert result["metrics"]["val/mae"] == metrics["validation"]["val/mae"]  # exactly, on CPU
    assert json.loads(out.read_text())["metrics"] == result["metrics"]
    test = evaluate.main(["--ckpt", metrics["best_checkpoint"], "--split", "test", "--data.root", str(data_root)])
    assert test["metrics"]["test/mae"] == metrics["test"]["test/mae"]


def test_checkpoint_rebuilds_the_model_alone(trained_run) -> None:
    from graphormer_urpe.tasks import GraphRegression

    _, metrics, _ = trained_run
    task = GraphRegression.from_checkpoint(metrics["best_checkpoint"])
    assert task.model.config.num_layers == 2 and list(task.model.config.node_vocab)[0] == 119


def test_unknown_key_fails_naming_it(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        GraphormerCLI(["--config", "qm9_gap", "--model.encoder.num_layerz", "3"])
    assert "num_layerz" in capsys.readouterr().err


def test_bare_config_names_resolve_to_configs_dir(tmp_path: Path) -> None:
    assert resolve_config_paths(["--config", "zinc_subset.yaml"]) == ["--config", str(CONFIG_DIR / "zinc_subset.yaml")]
    assert resolve_config_paths(["--config=zinc_full"]) == [f"--config={CONFIG_DIR / 'zinc_full.yaml'}"]
    own = tmp_path / "mine.yaml"
    own.write_text("{}")
    assert resolve_config_paths(["--config", str(own)]) == ["--config", str(own)]
    with pytest.raises(SystemExit, match="available: .*qm9_gap"):
        resolve_config_paths(["--config", "zinc_subsett"])


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
def test_every_config_instantiates(config: str, tmp_path: Path) -> None:
    cli = GraphormerCLI(["--config", config, "--run_root", str(tmp_path), "--logger", "none"])
    encoder = cli.model.model.config
    assert encoder.hidden_dim % encoder.num_heads == 0
    if config.startswith("zinc"):
        assert sum(p.numel() for p in cli.model.parameters()) < 500_000  # the papers' budget
        assert encoder.num_heads == 8 and encoder.num_layers == 12 and encoder.hidden_dim == 80


def test_training_needs_no_compiled_pyg_extension(tmp_path: Path) -> None:
    """torch_scatter, torch_sparse, pyg_lib and torch_cluster are made unimportable, then we train."""
    script = f"""
import sys
for name in ("torch_scatter", "torch_sparse", "pyg_lib", "torch_cluster"):
    sys.modules[name] = None  # import raises ImportError, find_spec returns None: as if absent
sys.path.insert(0, {str(REPO_DIR)!r})
import train
train.main({TINY!r} + ["--data.root", {str(tmp_path / 'data')!r}, "--run_root", {str(tmp_path / 'runs')!r}])
import torch_geometric.typing as t
assert not (t.WITH_TORCH_SCATTER or t.WITH_TORCH_SPARSE or t.WITH_PYG_LIB)
blocked = ("torch_scatter", "torch_sparse", "pyg_lib", "torch_cluster")
assert all(sys.modules.get(name) is None for name in blocked)
print("TRAINED")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "TRAINED" in done.stdout, done.stderr[-3000:]
