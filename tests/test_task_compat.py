"""Configs and checkpoints of the task layout before issue 13 (five task classes, flat optimiser arguments)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

import evaluate
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.run.cli import CONFIG_DIR, CONFIG_KEY, GraphormerCLI
from graphormer_urpe.tasks import Classification, GraphRegression, NodeClassification, OptimConfig, SequenceTagging
from graphormer_urpe.tasks.compat import OPTIM_KEYS, migrate_config
from graphormer_urpe.tasks.metrics import EvaluatorMetric
from graphormer_urpe.tasks.tokens import NodeTagging
from tests.test_train import synthetic_run

TINY = dict(node_vocab=[5], edge_vocab=[3], num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2)


def old_layout(path: str | Path, out: Path, class_path: str, dropped: tuple[str, ...] = ()) -> Path:
    """``path`` rewritten as the code before issue 13 wrote it: optimiser arguments at the top level of
    the hyper-parameters and of ``model.init_args``, the old class name, and without ``dropped``
    (arguments the old class did not take)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    optim = hparams.pop("optim")
    hparams.update({key: optim[key] for key in OPTIM_KEYS})  # the optimiser options of that time
    hparams["_class_path"] = class_path
    config = yaml.safe_load(checkpoint[CONFIG_KEY])
    config["model"]["class_path"] = class_path
    init_args = config["model"]["init_args"]
    optim = init_args.pop("optim")
    init_args.update({key: optim[key] for key in OPTIM_KEYS})
    for key in dropped:
        hparams.pop(key, None)
        init_args.pop(key, None)
    assert set(OPTIM_KEYS) <= set(hparams) and set(OPTIM_KEYS) <= set(init_args)
    checkpoint[CONFIG_KEY] = yaml.safe_dump(config, sort_keys=False)
    torch.save(checkpoint, out)
    return out


def test_an_old_node_tagging_checkpoint_evaluates_loads_and_initialises(tmp_path: Path) -> None:
    metrics, _ = synthetic_run(tmp_path, "run", "synthetic_graph")
    new = metrics["best_checkpoint"]
    saved = torch.load(new, weights_only=True)["hyper_parameters"]
    assert saved["optim"]["lr"] == 1e-3 and "lr" not in saved  # today's layout
    assert saved["_class_path"] == "graphormer_urpe.tasks.Classification" and saved["target_kind"] == "multiclass"
    old = old_layout(new, tmp_path / "old.ckpt", "graphormer_urpe.tasks.tokens.NodeTagging",
                     dropped=("target_kind", "target_names", "evaluator"))
    # evaluate.py: the embedded config is read in today's layout, and gives the metric of training
    result = evaluate.main(["--ckpt", str(old), "--split", "valid", "--logger", "none"])
    assert result["metrics"]["val/accuracy"] == metrics["validation"]["val/accuracy"]
    # from_checkpoint, through the new class and the old name
    for cls in (Classification, NodeTagging):
        task, again = cls.from_checkpoint(old), Classification.from_checkpoint(new)
        assert type(task) is Classification and not task.binary and task.monitor == ("val/accuracy", "max")
        assert task.optim == again.optim == OptimConfig(lr=1e-3, warmup_steps=150)
        state, expected = task.state_dict(), again.state_dict()
        assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in expected)
    # --init_from: one step at the first learning rate of the warm-up (0) keeps the loaded weights
    _, run_dir = synthetic_run(tmp_path, "init", "synthetic_graph", "--init_from", str(old),
                               "--trainer.max_steps", "1")
    loaded = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    source = torch.load(old, weights_only=True)["state_dict"]
    assert loaded.keys() == source.keys() and all(torch.equal(loaded[k], source[k]) for k in source)


def _save_old(tmp_path: Path, task: torch.nn.Module, hparams: dict) -> Path:
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": hparams}, path)
    return path


def test_old_classification_checkpoints_rebuild_as_classification(tmp_path: Path) -> None:
    optim = dict(lr=3e-4, warmup_steps=6000, end_lr=0.0, weight_decay=0.01, adam_eps=1e-8)
    # NodeClassification (MAG240M): multi-class by its class, accuracy from the OGB evaluator
    encoder = GraphormerConfig(num_outputs=4, readout="target_node", **TINY)
    trained = Classification(encoder, OptimConfig(**optim), target_kind="multiclass",
                             evaluator="ogb.lsc.MAG240MEvaluator")
    path = _save_old(tmp_path, trained, {**optim, "evaluator": "ogb.lsc.MAG240MEvaluator",
                                         "encoder": dataclasses.asdict(encoder),
                                         "_class_path": "graphormer_urpe.tasks.NodeClassification"})
    task = NodeClassification.from_checkpoint(path)
    assert task.optim == OptimConfig(**optim) and not task.binary
    assert isinstance(task.metrics["val"][0].metrics[0], EvaluatorMetric)
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in task.state_dict().items())
    # GraphClassification: binary targets as before
    encoder = GraphormerConfig(num_outputs=2, **TINY)
    path = _save_old(tmp_path, Classification(encoder, target_kind="binary"),
                     {**optim, "target_kind": "binary", "target_names": ["a", "b"],
                      "encoder": dataclasses.asdict(encoder),
                      "_class_path": "graphormer_urpe.tasks.GraphClassification"})
    task = Classification.from_checkpoint(path)
    assert task.binary and task.target_names == ["a", "b"] and task.optim == OptimConfig(**optim)
    assert task.hparams["optim"] == dataclasses.asdict(OptimConfig(**optim)) and "lr" not in task.hparams
    # a checkpoint of another task is refused, naming what does not fit
    refused = (r"\['target_kind', 'target_names'\] are not arguments of SequenceTagging \(a checkpoint of "
               r"graphormer_urpe.tasks.GraphClassification\?\)")
    with pytest.raises(ValueError, match=refused):
        SequenceTagging.from_checkpoint(path)


def test_migrate_config_rewrites_the_old_layout_only() -> None:
    today = (CONFIG_DIR / "mag240m.yaml").read_text()
    assert migrate_config(today) == today
    config = yaml.safe_load(today)
    config["model"]["class_path"] = "graphormer_urpe.tasks.NodeClassification"
    config["model"]["init_args"].update(config["model"]["init_args"].pop("optim"))
    migrated = yaml.safe_load(migrate_config(yaml.safe_dump(config)))
    assert migrated["model"] == yaml.safe_load(today)["model"]


def test_old_class_paths_still_work(tmp_path: Path) -> None:
    config = yaml.safe_load((CONFIG_DIR / "mag240m.yaml").read_text())
    config["model"]["class_path"] = "graphormer_urpe.tasks.NodeClassification"
    path = tmp_path / "old_names.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = GraphormerCLI(["--config", str(path), "--run_root", str(tmp_path), "--logger", "none"])
    assert type(cli.model) is Classification and not cli.model.binary  # target_kind linked from MAG240M
    assert cli.model.optim == OptimConfig(lr=3e-4, warmup_steps=6000, weight_decay=0.01)
    assert GraphRegression is not Classification


@pytest.mark.parametrize("flag,new", [("--model.lr", "--model.optim.lr"),
                                      ("--model.init_args.warmup_steps", "--model.init_args.optim.warmup_steps")])
def test_old_optimiser_flags_are_refused_with_the_new_name(tmp_path: Path, flag: str, new: str) -> None:
    with pytest.raises(SystemExit) as stop:
        GraphormerCLI(["--config", "qm9_gap", flag, "1", "--run_root", str(tmp_path), "--logger", "none"])
    assert f"{flag} is now {new}" in str(stop.value.code)


def test_an_old_config_file_is_refused_with_the_lines_to_change(tmp_path: Path) -> None:
    config = yaml.safe_load((CONFIG_DIR / "qm9_gap.yaml").read_text())
    config["model"]["init_args"].update(config["model"]["init_args"].pop("optim"))
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as stop:
        GraphormerCLI(["--config", str(path), "--run_root", str(tmp_path), "--logger", "none"])
    message = str(stop.value.code)
    assert message.startswith("error: ")
    for key in ("lr", "warmup_steps", "weight_decay"):
        assert f"{path}: model.init_args.{key} is now model.init_args.optim.{key}" in message
