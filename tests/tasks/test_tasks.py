"""The training step: what is logged, which parameters learn, dropout and precision settings; several
targets with missing values, classification losses, normalisation undone, per-node rows, task/data agreement."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import train
from graphormer_urpe.data.batch import BatchShape, GraphBatch, collate_graphs
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources import SmilesTable
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.errors import DataError
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.run.cli import GraphormerCLI
from graphormer_urpe.tasks import Classification, GraphormerTask, GraphRegression, OptimConfig
from graphormer_urpe.tasks.optimiser import warmup_linear_decay
from graphormer_urpe.testing import REPO_DIR
from graphormer_urpe.testing.distributed import run_on_processes
from graphormer_urpe.testing.graphs import make_record
from graphormer_urpe.testing.runs import tiny_run_args, train_in_process
from graphormer_urpe.testing.tolerance import rounding_tolerance

SMALL = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)


def small_and_large(rng: np.random.Generator) -> GraphBatch:
    """A 1-node graph padded to 40 nodes next to a 40-node graph: almost every row is padding."""
    return collate_graphs([make_record(rng, 1, index=0), make_record(rng, 40, index=1)])


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_every_parameter_gets_a_gradient(rng: np.random.Generator, attention: str) -> None:
    """DDP with find_unused_parameters=False needs every parameter in every backward pass."""
    task = GraphRegression(dataclasses.replace(SMALL, attention=attention))
    for batch in (small_and_large(rng), collate_graphs([make_record(rng, 1), make_record(rng, 1)])):  # no edges
        task.zero_grad(set_to_none=True)
        task.log = lambda *args, **kwargs: None
        task.training_step(batch, 0).backward()
        unused = [name for name, p in task.named_parameters() if p.grad is None]
        assert unused == []
        assert all(torch.isfinite(p.grad).all() for p in task.parameters())


def ddp_training_steps(rank: int, world: int, attention: str) -> None:
    """Three optimiser steps of a DDP-wrapped task, each process on different graphs."""
    torch.manual_seed(0)
    task = GraphRegression(dataclasses.replace(SMALL, attention=attention))
    task.log = lambda *args, **kwargs: None
    model = DistributedDataParallel(task, find_unused_parameters=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(rank)
    for step in range(3):
        sizes = [1, 40] if step == 0 else rng.integers(1, 12, 3)
        batch = collate_graphs([make_record(rng, int(n)) for n in sizes])
        model(batch).sum().backward()  # raises at the next step if a parameter got no gradient
        optimizer.step()
        optimizer.zero_grad()
    reference = [p.detach().clone() for p in task.parameters()]
    gathered = [[torch.empty_like(p) for p in reference] for _ in range(world)]
    for i, p in enumerate(reference):
        torch.distributed.all_gather([g[i] for g in gathered], p)
    assert all(torch.equal(a, b) for a, b in zip(gathered[0], gathered[1]))  # replicas stayed in sync


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_both_attention_kinds_train_under_ddp_without_unused_parameters(attention: str) -> None:
    run_on_processes(ddp_training_steps, 2, attention)


def test_metrics_are_logged_per_graph_not_per_node(rng: np.random.Generator) -> None:
    task = GraphRegression(SMALL)
    logged = {}
    task.log = lambda name, value, **kwargs: logged.update({name: (value, kwargs.get("batch_size"))})
    batch = small_and_large(rng)  # 2 graphs, 41 nodes
    task.training_step(batch, 0)
    task.validation_step(batch, 0)  # accumulated over the split by torchmetrics, logged at the epoch's end
    assert logged.keys() == {"train/loss"} and logged["train/loss"][1] == 2
    task.on_validation_epoch_end()
    expected = (task(batch).detach() - batch.y).abs().mean()  # the mean over the 2 graphs
    # the same 2 float32 errors summed by torchmetrics: within one ulp per term
    torch.testing.assert_close(logged["val/mae"][0], expected, rtol=2 * float(torch.finfo(torch.float32).eps), atol=0)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_keeps_loss_and_gradients_finite(
    rng: np.random.Generator, dtype: torch.dtype, device: torch.device
) -> None:
    """Float32 tables, softmax, head and loss under autocast; the loss within 5 % of float32's."""
    task = GraphRegression(dataclasses.replace(SMALL, num_layers=4)).to(device)
    batch = small_and_large(rng).to(device)
    task.log = lambda *args, **kwargs: None
    full = task.training_step(batch, 0)
    with torch.autocast(device.type, dtype=dtype):
        attn_bias, attn_scale = task.model.attention_inputs(batch)
        prediction = task.model(batch)
        loss = task.training_step(batch, 0)
    loss.backward()
    assert attn_bias.dtype == attn_scale.dtype == prediction.dtype == loss.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(prediction).all()
    assert all(torch.isfinite(p.grad).all() for p in task.parameters())
    assert loss.item() == pytest.approx(full.item(), rel=0.05)


DROPOUT_PLACES = {
    "input_dropout": lambda m: [m.input_dropout.p],
    "attention_dropout": lambda m: [layer.attention.attention_dropout.p for layer in m.layers],
    "dropout": lambda m: [layer.dropout.p for layer in m.layers],
    "activation_dropout": lambda m: [layer.ffn[2].p for layer in m.layers],
    "drop_path": lambda m: [layer.drop_path for layer in m.layers],
}


@pytest.mark.parametrize("place", sorted(DROPOUT_PLACES))
def test_each_dropout_place_is_configurable_and_acts_in_training_only(
    qm9_root: Path, tmp_path: Path, rng: np.random.Generator, place: str
) -> None:
    cli = GraphormerCLI(
        tiny_run_args(
            qm9_root,
            tmp_path,
            "--model.encoder.dropout",
            "0",
            "--model.encoder.attention_dropout",
            "0",
            f"--model.encoder.{place}",
            "0.4",
        )
    )
    model = cli.model.model
    expected = [0.0, 0.4] if place == "drop_path" else [0.4] * len(DROPOUT_PLACES[place](model))  # 0 -> rate
    assert DROPOUT_PLACES[place](model) == pytest.approx(expected)
    for other in set(DROPOUT_PLACES) - {place}:
        assert not any(DROPOUT_PLACES[other](model)), other
    batch = collate_graphs(
        [make_record(rng, n, index=n, node_vocab=ATOM_VOCAB, edge_vocab=BOND_VOCAB) for n in (3, 7, 12, 5)]
    )
    model.eval()
    reference = model(batch)
    assert torch.equal(model(batch), reference)
    model.train()
    torch.manual_seed(0)
    assert not torch.equal(model(batch), reference)


def test_accumulation_and_clipping_reach_the_trainer(qm9_root: Path, tmp_path: Path) -> None:
    cli = GraphormerCLI(
        tiny_run_args(
            qm9_root, tmp_path, "--trainer.accumulate_grad_batches", "4", "--trainer.gradient_clip_val", "0.5"
        )
    )
    assert cli.trainer.accumulate_grad_batches == 4
    assert cli.trainer.gradient_clip_val == 0.5


def test_bf16_mixed_training_runs_on_cpu(qm9_root: Path, tmp_path: Path) -> None:
    metrics = train.main(
        tiny_run_args(
            qm9_root,
            tmp_path,
            "--trainer.precision",
            "bf16-mixed",
            "--trainer.accelerator",
            "cpu",
            "--run_name",
            "bf16",
        )
    )
    assert metrics["global_step"] == 6
    assert np.isfinite(metrics["validation"]["val/mae"]) and np.isfinite(metrics["test"]["test/mae"])
    assert json.loads((tmp_path / "bf16" / "run.json").read_text())["precision"] == "bf16-mixed"


# ----------------------------------------------------------------------------- your own data: several targets,
# classification, normalisation, per-node rows

TINY = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4, dropout=0.0, attention_dropout=0.0)
EXAMPLE = REPO_DIR / "examples" / "qm9_sample.csv"


def batch_with_labels(labels: np.ndarray):
    rng = np.random.default_rng(2)
    records = [
        make_record(rng, int(rng.integers(2, 8)), index=i)._replace(y=row.astype(np.float32))
        for i, row in enumerate(labels)
    ]
    return collate_graphs(records)


def quiet_training_step(task: GraphormerTask, batch) -> torch.Tensor:
    with warnings.catch_warnings():  # self.log outside a Trainer
        warnings.simplefilter("ignore")
        return task.training_step(batch, 0)


def test_binary_cross_entropy_over_known_labels_only() -> None:
    labels = np.array([[1, 0], [np.nan, 1], [0, np.nan], [1, 1]])
    batch = batch_with_labels(labels)
    torch.manual_seed(0)
    task = Classification(GraphormerConfig(num_outputs=2, **TINY), target_kind="binary")
    logits = task(batch)
    known = ~torch.isnan(batch.y)
    expected = F.binary_cross_entropy_with_logits(logits[known], batch.y[known])
    torch.testing.assert_close(quiet_training_step(task, batch), expected)
    assert task.monitor == ("val/auroc", "max") and task.target_names == ["y0", "y1"]


def test_cross_entropy_over_known_classes_only() -> None:
    labels = np.array([[2], [np.nan], [0], [1]])
    batch = batch_with_labels(labels)
    torch.manual_seed(0)
    task = Classification(GraphormerConfig(num_outputs=3, **TINY), target_kind="multiclass")
    logits = task(batch)
    expected = F.cross_entropy(logits[[0, 2, 3]], torch.tensor([2, 0, 1]))
    torch.testing.assert_close(quiet_training_step(task, batch), expected)
    assert task.monitor == ("val/accuracy", "max")


def test_prediction_columns_hold_labels_and_probabilities_with_empty_failed_rows() -> None:
    binary = Classification(GraphormerConfig(num_outputs=1, **TINY), target_kind="binary", target_names=["polar"])
    columns = binary.prediction_columns(np.array([[0.7], [np.nan], [0.2]]))
    assert columns["polar"].tolist() == [1, pd.NA, 0]
    np.testing.assert_array_equal(columns["polar_probability"], [0.7, np.nan, 0.2])
    multi = Classification(GraphormerConfig(num_outputs=3, **TINY), target_kind="multiclass", target_names=["rings"])
    columns = multi.prediction_columns(np.array([[0.1, 0.6, 0.3], [np.nan] * 3]))
    assert columns["rings"].tolist() == [1, pd.NA] and list(columns)[1:] == [f"rings_probability_{k}" for k in range(3)]


def test_node_level_rows_leave_padding_out() -> None:
    batch = collate_graphs(
        [make_record(np.random.default_rng(0), n)._replace(y=np.full((n, 1), float(n), np.float32)) for n in (3, 5)]
    )
    output = torch.arange(2 * 5 * 2, dtype=torch.float32).reshape(2, 5, 2)
    rows, targets = GraphormerTask.outputs_and_targets(output, batch)
    assert rows.shape == (8, 2) and targets.flatten().tolist() == [3.0] * 3 + [5.0] * 5
    torch.testing.assert_close(rows, torch.cat([output[0, :3], output[1]]))


def test_normalisation_uses_training_targets_and_is_undone_in_metrics(tmp_path: Path) -> None:
    """Two targets in very different units, one with missing values: the model learns standardised
    targets, and predictions and the logged MAE are in the data's units."""
    data = GraphDataModule(
        SmilesTable(str(EXAMPLE), targets=["gap_ev", "mu_debye"]),
        root=str(tmp_path),
        batch_size=32,
        num_workers=0,
        preprocess_workers=0,
    )
    torch.manual_seed(0)
    task = GraphRegression(
        GraphormerConfig(**TINY), OptimConfig(lr=1e-3, warmup_steps=1), normalize_targets=True, data=data.spec
    )
    trainer = pl.Trainer(
        max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(task, data)
    mean, std = data.target_statistics()
    # the float64 statistics rounded once into the task's float32 buffers
    np.testing.assert_allclose(task.target_mean.numpy(), mean, rtol=float(np.finfo(np.float32).eps))
    np.testing.assert_allclose(task.target_std.numpy(), std, rtol=float(np.finfo(np.float32).eps))
    logged = trainer.validate(task, data, verbose=False)[0]
    task.eval()
    with torch.no_grad():
        batches = list(data.val_dataloader())
        prediction = torch.cat([task(b) for b in batches])
        raw = torch.cat([task.model(b) for b in batches])
    target = torch.cat([b.y for b in batches])
    assert torch.equal(prediction, raw * task.target_std + task.target_mean)  # GraphormerTask.forward's operations
    for k, name in enumerate(["gap_ev", "mu_debye"]):
        known = ~torch.isnan(target[:, k])
        # two float32 means of the same terms in other orders: within one ulp per term
        rel = int(known.sum()) * float(torch.finfo(torch.float32).eps)
        assert logged[f"val/mae/{name}"] == pytest.approx(
            (prediction[known, k] - target[known, k]).abs().mean().item(), rel=rel
        )
    assert int(torch.isnan(target[:, 1]).sum()) > 0  # the masked case is exercised


def test_kinds_of_task_and_data_must_agree() -> None:
    with pytest.raises(DataError, match="binary class labels .*graphormer_urpe.tasks.Classification"):
        GraphRegression(GraphormerConfig(**TINY), target_kind="binary")
    with pytest.raises(DataError, match="regression ones: .*graphormer_urpe.tasks.GraphRegression"):
        Classification(GraphormerConfig(**TINY), target_kind="regression")


def test_a_mismatch_in_the_config_stops_with_the_message_not_a_traceback(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="model.class_path: graphormer_urpe.tasks.Classification") as stop:
        GraphormerCLI(
            [
                "--config",
                "smiles_csv_example",
                "--data.source.targets",
                "[polar]",
                "--data.source.task",
                "binary",
                "--run_root",
                str(tmp_path),
                "--logger",
                "none",
            ]
        )
    assert "\n" not in str(stop.value)  # one line: the commands' exit_codes print it, exit code 2


class UpdateLearningRates(pl.Callback):
    """The learning rate each optimiser update uses, read from the optimiser just before it steps."""

    def __init__(self) -> None:
        self.rates: list[float] = []

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        self.rates.append(optimizer.param_groups[0]["lr"])


def test_update_k_uses_the_schedule_multiplier_of_step_k_minus_1(rng: np.random.Generator) -> None:
    """Warm-up over 3 steps, then linear decay to end_lr = lr / 10 at step 7 of 7: update k uses the
    multiplier of step k - 1, so the first update uses 0 and none uses the end value (as fairseq's
    trainer places the schedule; v1.0's Lightning PolynomialDecayLR would use 1/3, 2/3, 1, ... one step earlier)."""
    batch = collate_graphs([make_record(rng, 5, index=0), make_record(rng, 7, index=1)])
    task = GraphRegression(GraphormerConfig(**TINY), OptimConfig(lr=2.0, warmup_steps=3, end_lr=0.2))
    rates = UpdateLearningRates()
    trainer = pl.Trainer(
        max_steps=7,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[rates],
    )
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader([batch] * 7, batch_size=None))
    expected = [0.0, 2 / 3, 4 / 3, 2.0, 2 - 1.8 / 4, 2 - 1.8 * 2 / 4, 2 - 1.8 * 3 / 4]
    assert rates.rates == pytest.approx(expected, rel=1e-15, abs=0.0)  # float64 arithmetic, a few roundings


# ----------------------------------------------------------------------------- fine-tuning options of the optimiser
class StepLog(pl.Callback):
    """Every parameter group's learning rate before each optimiser step, the weights before the first
    step and after each, and the optimiser at the end."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.lrs: list[dict[str, float]] = []
        self.weights = [{k: v.detach().clone() for k, v in pl_module.named_parameters()}]
        self.requires_grad = {k: v.requires_grad for k, v in pl_module.named_parameters()}

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self.lrs.append({group.get("name", "all"): group["lr"] for group in trainer.optimizers[0].param_groups})

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        self.weights.append({k: v.detach().clone() for k, v in pl_module.named_parameters()})

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.optimizer = trainer.optimizers[0]
        self.names = {id(p): name for name, p in pl_module.named_parameters()}


def logged_run(qm9_root: Path, tmp_path: Path, *options: str) -> StepLog:
    """A 6-step tiny QM9 run with ``options``, logged step by step."""
    log = StepLog()
    assert (
        train_in_process(
            tiny_run_args(qm9_root, tmp_path, "--run_name", "run", "--trainer.val_check_interval", "6", *options), log
        )
        == 0
    )
    return log


def test_each_parameter_group_trains_at_its_learning_rate_under_one_schedule(qm9_root: Path, tmp_path: Path) -> None:
    """lr of layer l = lr * d ** (L - l), embeddings at lr * d ** L, the head at head_lr, each times the warm-up
    and decay factor of the step, read from the optimiser before every step."""
    log = logged_run(
        qm9_root,
        tmp_path,
        "--model.optim.lr",
        "1e-3",
        "--model.optim.warmup_steps",
        "3",
        "--model.optim.end_lr",
        "1e-4",
        "--model.optim.layer_lr_decay",
        "0.5",
        "--model.optim.head_lr",
        "3e-3",
    )
    peaks = {"embeddings": 1e-3 * 0.5**2, "layer1": 1e-3 * 0.5**1, "layer2": 1e-3 * 0.5**0, "head": 3e-3}
    assert log.lrs == [
        {name: peak * warmup_linear_decay(step, 3, 6, 1e-4 / 1e-3) for name, peak in peaks.items()} for step in range(6)
    ]
    groups = {group["name"]: {log.names[id(p)] for p in group["params"]} for group in log.optimizer.param_groups}
    assert groups["head"] == {"model.head.weight", "model.head.bias"}
    assert groups["layer1"] == {name for name in log.weights[0] if name.startswith("model.layers.0.")}
    assert groups["layer2"] == {
        name for name in log.weights[0] if name.startswith(("model.layers.1.", "model.final_norm."))
    }
    assert groups["embeddings"] == set(log.weights[0]) - groups["head"] - groups["layer1"] - groups["layer2"]
    assert (
        "model.relative_scale.weight" in groups["embeddings"] and "model.nodes.features.weight" in groups["embeddings"]
    )


def test_without_fine_tuning_options_one_group_follows_the_schedule(qm9_root: Path, tmp_path: Path) -> None:
    log = logged_run(qm9_root, tmp_path, "--model.optim.lr", "1e-3", "--model.optim.warmup_steps", "3")
    assert log.lrs == [{"all": 1e-3 * warmup_linear_decay(step, 3, 6)} for step in range(6)]
    assert len(log.optimizer.param_groups) == 1


def test_a_frozen_encoder_is_unchanged_bit_for_bit_then_trains(qm9_root: Path, tmp_path: Path) -> None:
    """The MSE loss: under L1 a shared bias can get an exactly zero gradient (as many residuals above as below)."""
    log = logged_run(
        qm9_root,
        tmp_path,
        "--model.optim.warmup_steps",
        "0",
        "--model.optim.freeze_encoder_steps",
        "3",
        "--model.loss",
        "mse",
    )
    initial = log.weights[0]
    encoder = [name for name in initial if not name.startswith("model.head.")]
    for step in (1, 2, 3):  # the weights after the first three steps
        assert all(torch.equal(log.weights[step][name], initial[name]) for name in encoder)
        assert not torch.equal(log.weights[step]["model.head.weight"], log.weights[step - 1]["model.head.weight"])
    assert all(not torch.equal(log.weights[4][name], initial[name]) for name in encoder)  # every tensor moved
    steps = {log.names[id(p)]: int(state["step"]) for p, state in log.optimizer.state.items()}
    assert {steps[name] for name in encoder} == {3} and steps["model.head.weight"] == 6  # Adam's moments start late


def test_an_encoder_frozen_throughout_computes_no_gradients(qm9_root: Path, tmp_path: Path) -> None:
    log = logged_run(qm9_root, tmp_path, "--model.optim.warmup_steps", "0", "--model.optim.freeze_encoder_steps", "-1")
    initial, final = log.weights[0], log.weights[-1]
    assert {name for name, grad in log.requires_grad.items() if grad} == {"model.head.weight", "model.head.bias"}
    assert all(torch.equal(final[name], initial[name]) for name in initial if not name.startswith("model.head."))
    assert not torch.equal(final["model.head.weight"], initial["model.head.weight"])
    assert {log.names[id(p)] for p in log.optimizer.state} == {"model.head.weight", "model.head.bias"}
    head = initial["model.head.weight"].numel() + initial["model.head.bias"].numel()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["parameters"] == head  # the trainable ones


@pytest.mark.parametrize("kind", ["regression", "binary", "multiclass", "per-node"])
def test_padding_to_a_batch_shape_changes_no_loss_and_no_gradient(rng: np.random.Generator, kind: str) -> None:
    """Padding nodes, empty padding graphs and padding edges (``--data.pad_nodes_to``) add nothing to a loss."""
    labels = {
        "regression": np.array([[0.3], [np.nan], [-1.2]]),
        "binary": np.array([[1, 0], [np.nan, 1], [0, 1]]),
        "multiclass": np.array([[2], [np.nan], [0]]),
    }.get(kind)
    records = [make_record(rng, n, index=i) for i, n in enumerate((4, 7, 2))]
    if kind == "per-node":
        records = [r._replace(y=rng.normal(size=(len(r.x), 1)).astype(np.float32)) for r in records]
    else:
        records = [r._replace(y=row.astype(np.float32)) for r, row in zip(records, labels)]
    config = dataclasses.replace(
        SMALL,
        num_outputs=labels.shape[1] if kind == "binary" else 3 if kind == "multiclass" else 1,
        readout="nodes" if kind == "per-node" else "graph_token",
    )
    torch.manual_seed(0)
    task = (
        Classification(config, target_kind=kind) if kind in ("binary", "multiclass") else GraphRegression(config)
    ).eval()  # eval: no dropout, so both batches see the same network
    shape = BatchShape(node_multiple=8, graphs=5, edges_per_node=3)
    results = []
    for batch in (collate_graphs(records), collate_graphs(records, shape)):
        task.zero_grad(set_to_none=True)
        losses = task.step_losses(batch)
        losses["loss"].backward()
        results.append((losses, [p.grad.clone() for p in task.parameters()]))
    (plain, plain_grads), (padded, padded_grads) = results
    for name, value in plain.items():
        torch.testing.assert_close(padded[name], value, **rounding_tolerance(value))
    for plain_grad, padded_grad in zip(plain_grads, padded_grads):
        torch.testing.assert_close(padded_grad, plain_grad, **rounding_tolerance(plain_grad))
