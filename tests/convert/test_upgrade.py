"""``graphormer-urpe convert upgrade``: checkpoints of the task layout before issue 13 (five task
classes, optimiser arguments at the top level, ``val/acc``), generated here in each old layout, convert into
today's layout and then load, evaluate and predict exactly as the checkpoints they were made from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from pytorch_lightning.callbacks import ModelCheckpoint

import evaluate
from graphormer_urpe.commands.__main__ import main
from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.convert.upgrade import OPTIM_KEYS
from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.errors import CheckpointError, InputError
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.model.sequence import SequenceConfig
from graphormer_urpe.run.checkpoints import CONFIG_KEY
from graphormer_urpe.run.cli import GraphormerCLI
from graphormer_urpe.tasks import Classification, GraphRegression, OptimConfig, SequenceTagging
from graphormer_urpe.tasks.metrics import EvaluatorMetric
from graphormer_urpe.testing.commands import refusal
from graphormer_urpe.testing.graphs import make_record
from graphormer_urpe.testing.runs import synthetic_run

TINY = dict(node_vocab=[5], edge_vocab=[3], num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2)
OPTIM = dict(lr=3e-4, warmup_steps=6000, end_lr=0.0, weight_decay=0.01, adam_eps=1e-8)


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


def best_checkpoint_state(monitor: str) -> tuple[str, dict]:
    """The state key and state of the best-checkpoint callback as ``train.py`` configures it."""
    callback = ModelCheckpoint(filename="best-{step}", monitor=monitor, mode="max", auto_insert_metric_name=False)
    return callback.state_key, callback.state_dict()


def save_old(path: Path, task: torch.nn.Module, hparams: dict, monitor: str | None = None) -> Path:
    """A checkpoint of ``task``'s weights with the old code's hyper-parameters (and best-checkpoint state)."""
    checkpoint = {"state_dict": task.state_dict(), "hyper_parameters": hparams}
    if monitor is not None:
        checkpoint["callbacks"] = dict([best_checkpoint_state(monitor)])
    torch.save(checkpoint, path)
    return path


def upgraded(source: Path) -> Path:
    """``source`` converted next to it (``<name>.new.ckpt``) by the command, which succeeds."""
    output = source.with_suffix(".new.ckpt")
    assert main(["convert", "upgrade", str(source), str(output)]) == 0
    return output


@pytest.mark.slow
def test_an_old_node_tagging_checkpoint_converts_then_evaluates_loads_and_predicts_as_before(
    tmp_path: Path, package_log: pytest.LogCaptureFixture
) -> None:
    metrics, _ = synthetic_run(tmp_path, "run", "synthetic_graph")
    new = metrics["best_checkpoint"]
    saved = torch.load(new, weights_only=True)["hyper_parameters"]
    assert saved["optim"]["lr"] == 1e-3 and "lr" not in saved  # today's layout
    assert saved["_class_path"] == "graphormer_urpe.tasks.Classification" and saved["target_kind"] == "multiclass"
    old = old_layout(
        new,
        tmp_path / "old.ckpt",
        "graphormer_urpe.tasks.tokens.NodeTagging",
        dropped=("target_kind", "target_names", "evaluator"),
    )
    # unconverted, it is refused in one line naming the command
    refusal = (
        f"{old} was written before the task family was merged (lr, warmup_steps, end_lr, weight_decay, "
        "adam_eps outside optim): convert it once with graphormer-urpe convert upgrade "
        f"{old} NEW.ckpt"
    )
    with pytest.raises(CheckpointError) as refused:
        Classification.from_checkpoint(old)
    assert str(refused.value) == refusal
    package_log.clear()
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["--ckpt", str(old), "--split", "valid", "--logger", "none"])
    assert stop.value.code == 2
    assert [r.getMessage() for r in package_log.records if r.levelname == "ERROR"] == [refusal]
    converted = upgraded(old)

    # evaluate.py rebuilds the run from the converted embedded config and gives the metric of training
    result = evaluate.main(["--ckpt", str(converted), "--split", "valid", "--logger", "none"])
    assert result.metrics["val/accuracy"] == metrics["validation"]["val/accuracy"]
    # from_checkpoint: the task and weights of the checkpoint the old one was made from
    task, original = Classification.from_checkpoint(converted).eval(), Classification.from_checkpoint(new).eval()
    assert type(task) is Classification and not task.binary and task.monitor == ("val/accuracy", "max")
    assert task.optim == original.optim == OptimConfig(lr=1e-3, warmup_steps=150)
    state, expected = task.state_dict(), original.state_dict()
    assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in expected)
    # the same predictions on every validation graph
    config = tmp_path / "converted.yaml"
    config.write_text(torch.load(converted, weights_only=True)[CONFIG_KEY])
    data = GraphormerCLI(["--config", str(config), "--run_root", str(tmp_path / "runs"), "--logger", "none"]).datamodule
    data.setup("validate")
    with torch.no_grad():
        for batch in data.val_dataloader():
            assert torch.equal(task(batch), original(batch))


def classification_cases() -> list[tuple[str, torch.nn.Module, dict, str | None]]:
    """Old checkpoints of each old task class: (class path, the trained task, its old hyper-parameters,
    the metric its best-checkpoint callback monitored)."""
    torch.manual_seed(0)
    mag = GraphormerConfig(num_outputs=4, readout="target_node", **TINY)
    graph = GraphormerConfig(num_outputs=2, **TINY)
    regression = GraphormerConfig(num_outputs=1, **TINY)
    return [
        # NodeClassification (MAG240M): multi-class by its class, accuracy from the OGB evaluator, val/acc
        (
            "graphormer_urpe.tasks.NodeClassification",
            Classification(mag, OptimConfig(**OPTIM), target_kind="multiclass", evaluator="ogb.lsc.MAG240MEvaluator"),
            {**OPTIM, "evaluator": "ogb.lsc.MAG240MEvaluator", "encoder": dataclasses.asdict(mag)},
            "val/acc",
        ),
        # GraphClassification: binary targets, named
        (
            "graphormer_urpe.tasks.graph.GraphClassification",
            Classification(graph, OptimConfig(**OPTIM), target_kind="binary", target_names=["a", "b"]),
            {**OPTIM, "target_kind": "binary", "target_names": ["a", "b"], "encoder": dataclasses.asdict(graph)},
            "val/auroc",
        ),
        # GraphRegression kept its name; its optimiser arguments moved
        (
            "graphormer_urpe.tasks.GraphRegression",
            GraphRegression(regression, OptimConfig(**OPTIM), loss="mse"),
            {
                **OPTIM,
                "normalize_targets": False,
                "loss": "mse",
                "target_kind": "regression",
                "target_names": ["y"],
                "encoder": dataclasses.asdict(regression),
            },
            None,
        ),
    ]


@pytest.mark.parametrize("case", range(3), ids=["NodeClassification", "GraphClassification", "GraphRegression"])
def test_old_graph_checkpoints_convert_and_predict_as_the_trained_task(case: int, tmp_path: Path) -> None:
    class_path, trained, hparams, monitor = classification_cases()[case]
    old = save_old(tmp_path / "old.ckpt", trained, {**hparams, "_class_path": class_path}, monitor)
    checkpoint = torch.load(upgraded(old), weights_only=True)
    cls = type(trained)
    assert checkpoint["hyper_parameters"]["_class_path"] == f"graphormer_urpe.tasks.{cls.__name__}"
    assert checkpoint["hyper_parameters"]["optim"] == OPTIM and "lr" not in checkpoint["hyper_parameters"]
    assert checkpoint["converted_from"] == {"source": str(old), "format": "graphormer-urpe before issue 13"}
    if monitor is not None:  # the state that train.py's best-checkpoint callback looks up when resuming
        assert checkpoint["callbacks"] == dict(
            [best_checkpoint_state({"val/acc": "val/accuracy"}.get(monitor, monitor))]
        )
    task = cls.from_checkpoint(tmp_path / "old.new.ckpt").eval()
    assert task.optim == OptimConfig(**OPTIM) and task.hparams["optim"] == dataclasses.asdict(OptimConfig(**OPTIM))
    assert task.hparams == trained.hparams
    if case == 0:
        assert not task.binary and isinstance(task.metrics["val"][0].metrics[0], EvaluatorMetric)
    if case == 1:  # loaded into another task, it is refused naming what does not fit
        refused = (
            r"\['target_kind', 'target_names'\] are not arguments of SequenceTagging \(a checkpoint of "
            r"graphormer_urpe.tasks.Classification\?\): load it with its own task class$"
        )
        with pytest.raises(CheckpointError, match=refused):
            SequenceTagging.from_checkpoint(tmp_path / "old.new.ckpt")
    rng = np.random.default_rng(0)
    batch = collate_graphs([make_record(rng, n, i, node_vocab=(5,), edge_vocab=(3,)) for i, n in enumerate([4, 7])])
    batch.target_node = torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        assert torch.equal(task(batch), trained.eval()(batch))


def test_an_old_sequence_checkpoint_converts(tmp_path: Path) -> None:
    encoder = SequenceConfig(vocab_size=5, num_classes=5, length=6, num_layers=1, hidden_dim=8, ffn_dim=8, num_heads=2)
    trained = SequenceTagging(encoder, OptimConfig(**OPTIM)).eval()
    old = save_old(
        tmp_path / "old.ckpt",
        trained,
        {
            **OPTIM,
            "encoder": dataclasses.asdict(encoder),
            "_class_path": "graphormer_urpe.classification.SequenceTagging",
        },
    )
    task = SequenceTagging.from_checkpoint(upgraded(old)).eval()
    tokens = torch.randint(0, 5, (3, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(task.model(tokens), trained.model(tokens))


def test_what_is_not_an_old_checkpoint_is_refused_in_one_line_writing_nothing(tmp_path: Path) -> None:
    encoder = GraphormerConfig(num_outputs=1, **TINY)
    today = tmp_path / "today.ckpt"
    torch.save(
        {
            "state_dict": GraphRegression(encoder).state_dict(),
            "hyper_parameters": {
                "encoder": dataclasses.asdict(encoder),
                "optim": OPTIM,
                "_class_path": "graphormer_urpe.tasks.GraphRegression",
            },
        },
        today,
    )
    weights = tmp_path / "weights.pt"
    torch.save({"state_dict": {}}, weights)
    (tmp_path / "taken.ckpt").write_text("an earlier conversion")
    old = save_old(
        tmp_path / "old.ckpt",
        GraphRegression(encoder),
        {**OPTIM, "encoder": dataclasses.asdict(encoder), "_class_path": "graphormer_urpe.tasks.Gone"},
    )
    for source, output, message in [
        (today, "out.ckpt", f"{today} is in today's layout already: use it as it is"),
        (tmp_path / "missing.ckpt", "out.ckpt", f"checkpoint {tmp_path / 'missing.ckpt'} does not exist"),
        (
            weights,
            "out.ckpt",
            f"{weights}: it holds no task hyper-parameters: not a checkpoint written by graphormer-urpe train",
        ),
        (today, "taken.ckpt", f"{tmp_path / 'taken.ckpt'} exists; choose another output path (nothing is overwritten)"),
        (
            old,
            "out.ckpt",
            "model.class_path='graphormer_urpe.tasks.Gone': cannot be imported (module "
            "'graphormer_urpe.tasks' has no attribute 'Gone')",
        ),
    ]:
        assert refusal(["convert", "upgrade", str(source), str(tmp_path / output)]) == message
        assert not (tmp_path / "out.ckpt").exists()
    assert (tmp_path / "taken.ckpt").read_text() == "an earlier conversion"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.ckpt", "taken.ckpt", "today.ckpt", "weights.pt"]


def test_an_old_config_is_refused_like_any_unknown_key(tmp_path: Path) -> None:
    config = yaml.safe_load((CONFIG_DIR / "qm9_gap.yaml").read_text())
    config["model"]["init_args"].update(config["model"]["init_args"].pop("optim"))
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(InputError) as stop:
        GraphormerCLI(["--config", str(path), "--run_root", str(tmp_path), "--logger", "none"])
    assert str(stop.value) == "model: Option 'lr' is not accepted"
