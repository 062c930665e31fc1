"""The compiled training step: forward and loss compile as one graph (no graph break, backward one graph too) for
every kind of task, the optimiser is one fused op per parameter group, and the compiled step computes what the eager
one does (losses and gradients to float32 rounding, every dropout on)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np
import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.utils._python_dispatch import TorchDispatchMode

from graphormer_urpe.data.batch import BatchShape, GraphBatch, collate_graphs
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.model.attention import use_attention_kernel
from graphormer_urpe.model.dropout import Dropout
from graphormer_urpe.model.graphormer import GraphormerConfig
from graphormer_urpe.tasks import Classification, GraphormerTask, GraphRegression, OptimConfig
from graphormer_urpe.tasks.compiled import MAX_SHAPES, compiled, uses_cuda_graphs
from graphormer_urpe.tasks.optimiser import fused_optimiser_supported, parameter_groups
from graphormer_urpe.testing.device import exactness_device
from graphormer_urpe.testing.graphs import make_record
from graphormer_urpe.testing.tolerance import rounding_tolerance

#: Every dropout on, so that the compiled graph holds the random ops of training.
TINY = GraphormerConfig(
    num_layers=2,
    hidden_dim=16,
    ffn_dim=16,
    num_heads=4,
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.1,
    input_dropout=0.1,
    drop_path=0.1,
)


def graph_batch(rng: np.random.Generator, targets: np.ndarray | None = None, node_targets: bool = False) -> GraphBatch:
    """Five graphs of 1-9 nodes (one without edges), with ``targets`` per graph (NaN: unknown) or per node."""
    records = []
    for index, n in enumerate((3, 9, 1, 6, 4)):
        record = make_record(rng, n, index=index)
        if node_targets:
            y = rng.normal(size=(n, 1)).astype(np.float32)
            y[0] = np.nan
            record = record._replace(y=y)
        elif targets is not None:
            record = record._replace(y=targets[index].astype(np.float32))
        records.append(record)
    return collate_graphs(records)


TASKS: dict[str, Callable[[np.random.Generator], tuple[GraphormerTask, GraphBatch]]] = {
    "regression-urpe": lambda rng: (GraphRegression(TINY), graph_batch(rng)),
    "regression-rpe-mse": lambda rng: (
        GraphRegression(dataclasses.replace(TINY, attention="rpe"), loss="mse"),
        graph_batch(rng),
    ),
    "regression-per-node": lambda rng: (
        GraphRegression(dataclasses.replace(TINY, readout="nodes")),
        graph_batch(rng, node_targets=True),
    ),
    "binary-with-missing-labels": lambda rng: (
        Classification(dataclasses.replace(TINY, num_outputs=2), target_kind="binary"),
        graph_batch(rng, np.array([[1, 0], [np.nan, 1], [0, np.nan], [1, 1], [0, 0]])),
    ),
    "multiclass-with-missing-labels": lambda rng: (
        Classification(dataclasses.replace(TINY, num_outputs=3), target_kind="multiclass"),
        graph_batch(rng, np.array([[2], [np.nan], [0], [1], [1]])),
    ),
}


class CountingBackend:
    """A ``torch.compile`` backend that runs the graphs AOTAutograd hands it as they are, counting them."""

    def __init__(self) -> None:
        self.forward_graphs = 0
        self.backward_graphs = 0

        def forward(graph: torch.fx.GraphModule, inputs: list) -> Callable:
            self.forward_graphs += 1
            return make_boxed_func(graph.forward)

        def backward(graph: torch.fx.GraphModule, inputs: list) -> Callable:
            self.backward_graphs += 1
            return make_boxed_func(graph.forward)

        self.backend = aot_autograd(fw_compiler=forward, bw_compiler=backward)


@pytest.mark.slow
@pytest.mark.parametrize("kind", TASKS)
def test_forward_and_loss_compile_as_one_graph_and_backward_as_one(rng: np.random.Generator, kind: str) -> None:
    """``fullgraph=True`` raises at any graph break; one forward graph (the whole of ``step_losses``) and one
    backward graph mean nothing of the step runs outside them."""
    torch._dynamo.reset()
    task, batch = TASKS[kind](rng)
    counter = CountingBackend()
    losses = compiled(task.step_losses, True, torch.device("cpu"), backend=counter.backend)(batch)
    losses["loss"].backward()
    assert (counter.forward_graphs, counter.backward_graphs) == (1, 1)
    assert torch.isfinite(losses["loss"]) and all(p.grad is not None for p in task.parameters())


@pytest.mark.slow
def test_each_new_batch_shape_is_compiled_with_one_log_line(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, package_log: pytest.LogCaptureFixture
) -> None:
    """A compiled step compiles once per batch shape (46 s for the first on a CPU, about 20 s for each later one),
    which passed without a word: the run's step logs one line per shape it compiles, naming the shape and the count
    so far, and none for a shape it has met. Counted against the graphs the backend really compiles."""
    torch._dynamo.reset()
    counter = CountingBackend()
    compile_ = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, **options: compile_(fn, fullgraph=True, dynamic=False, backend=counter.backend)
    )
    task = GraphRegression(TINY, compile=True)
    task.compile_training_step()
    shape = BatchShape(node_multiple=4, graphs=5, edges_per_node=3)
    batches = [
        collate_graphs([make_record(rng, n, index=i) for i, n in enumerate(sizes)], shape)
        for sizes in ((3, 2, 1, 4), (1, 2, 2, 3, 1), (5, 7, 1, 2, 6), (3, 1))
    ]  # N: 4, 4, 8, 4
    package_log.set_level(logging.INFO, logger="graphormer_urpe")
    for batch in batches:
        task.training_losses(batch)
    lines = [r.getMessage() for r in package_log.records if "compil" in r.getMessage()]
    assert counter.forward_graphs == 2 and lines == [
        "model.compile: compiling the training step for a new batch shape, 5 graphs x 4 nodes x 60 edges "
        f"(1 shape compiled so far; torch keeps at most {MAX_SHAPES})",
        "model.compile: compiling the training step for a new batch shape, 5 graphs x 8 nodes x 120 edges "
        f"(2 shapes compiled so far; torch keeps at most {MAX_SHAPES})",
    ]


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops called in its block, by name (``aten._fused_adamw_.default``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's signature)
        self.calls[str(func)] = self.calls.get(str(func), 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "optim", [OptimConfig(), OptimConfig(layer_lr_decay=0.5, head_lr=1e-3)], ids=["one-group", "per-layer-groups"]
)
def test_the_optimiser_is_one_fused_op_per_parameter_group(rng: np.random.Generator, optim: OptimConfig) -> None:
    """AdamW's update of every parameter in one op per group, with no read of a value on the host."""
    task, batch = TASKS["regression-urpe"](rng)
    task.optim = optim
    optimizer = torch.optim.AdamW(parameter_groups(task, optim), fused=fused_optimiser_supported(task.parameters()))
    task.step_losses(batch)["loss"].backward()
    with OpCounter() as counter:
        optimizer.step()
    groups = len(optimizer.param_groups)
    assert counter.calls.get("aten._fused_adamw_.default") == groups
    assert "aten._local_scalar_dense.default" not in counter.calls  # no item(): nothing waits for the device


def test_fused_optimiser_is_declined_for_parameters_it_cannot_take() -> None:
    assert fused_optimiser_supported([torch.nn.Parameter(torch.zeros(2))])
    assert not fused_optimiser_supported([torch.nn.Parameter(torch.zeros(2, dtype=torch.int64), requires_grad=False)])


def test_a_compile_mode_it_does_not_know_is_refused_naming_the_option() -> None:
    with pytest.raises(ConfigError, match=r"model.compile='fast': expected one of false, true, 'cuda_graphs'"):
        GraphRegression(TINY, compile="fast")


#: The tiny model without dropout: the compiled step's random numbers are Inductor's own (their order and stream differ
#: from eager's, and between torch releases), so exactness is checked without them and dropout by its statistics.
NO_DROPOUT = dataclasses.replace(
    TINY, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, input_dropout=0.0, drop_path=0.0
)


def step_results(task: GraphormerTask, losses: Callable, batch: GraphBatch) -> tuple[dict, list]:
    """Losses and gradients of one training step, copied out (a CUDA graph's next replay overwrites its outputs)."""
    task.zero_grad(set_to_none=True)
    result = losses(batch)
    result["loss"].backward()
    return (
        {name: value.detach().clone() for name, value in result.items()},
        [p.grad.clone() for p in task.parameters()],
    )


def assert_same_step(eager_losses: dict, eager_grads: list, other_losses: dict, other_grads: list) -> None:
    """Losses and gradients equal to float32 rounding in another summation order."""
    for name, value in eager_losses.items():
        torch.testing.assert_close(other_losses[name], value, **rounding_tolerance(value))
    for eager, other in zip(eager_grads, other_grads):
        torch.testing.assert_close(other, eager, **rounding_tolerance(eager))


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["regression-urpe", "multiclass-with-missing-labels"])
def test_compiled_step_computes_what_the_eager_step_does(rng: np.random.Generator, kind: str) -> None:
    """The compiled step (Inductor) gives the eager step's losses and gradients, to float32 rounding in another
    summation order, in training mode."""
    torch._dynamo.reset()
    device = exactness_device()
    task, batch = TASKS[kind](rng)
    task = type(task)(
        dataclasses.replace(NO_DROPOUT, num_outputs=task.model.config.num_outputs),
        **({"target_kind": "multiclass"} if kind.startswith("multiclass") else {}),
    )
    task, batch = task.to(device).train(), batch.to(device)
    eager = step_results(task, task.step_losses, batch)
    assert_same_step(*eager, *step_results(task, compiled(task.step_losses, True, device), batch))


@pytest.mark.device
@pytest.mark.slow
def test_cuda_graph_replays_compute_what_the_eager_step_does(rng: np.random.Generator) -> None:
    """Replayed CUDA graphs (``--model.compile cuda_graphs``; on a CPU the compiled step without them) compute the
    eager step's losses and gradients, replay after replay, on batches of one shape with other values."""
    torch._dynamo.reset()
    device = exactness_device()
    task = GraphRegression(NO_DROPOUT).to(device).train()
    shape = BatchShape(node_multiple=12, graphs=5, edges_per_node=3)
    batches = [
        collate_graphs([make_record(rng, n, index=i) for i, n in enumerate(sizes)], shape).to(device)
        for sizes in ((3, 9, 1, 6, 4), (7, 2, 5, 11, 8), (4, 4, 10, 1, 6))
    ]
    replayed = compiled(task.step_losses, "cuda_graphs", device)
    for batch in batches:
        eager = step_results(task, task.step_losses, batch)
        if uses_cuda_graphs("cuda_graphs", device):
            torch.compiler.cudagraph_mark_step_begin()
        assert_same_step(*eager, *step_results(task, replayed, batch))


@pytest.mark.device
@pytest.mark.slow
def test_compiled_dropout_drops_at_the_rate_with_the_eager_scale() -> None:
    """Compiled, both dropout paths (a module's own, and the mask URPE folds into ``A * C``) drop a fraction ``p``
    and scale the rest exactly as eagerly."""
    torch._dynamo.reset()
    device = exactness_device()
    dropout = Dropout(0.2).train()
    x = torch.ones(1000, 1000, device=device)
    eager_scale = float(dropout(x).max())
    out = compiled(dropout.forward, True, device)(x)
    keep = compiled(dropout.keep_mask, True, device)(x)
    for values in (out, keep):
        assert abs(float((values == 0).float().mean()) - 0.2) < 3e-3  # 1e6 draws: std 4e-4
        assert set(values.unique().tolist()) == {0.0, eager_scale}


@pytest.mark.device
@pytest.mark.flex
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")
def test_compiled_step_with_the_flex_kernel_is_one_graph_and_computes_the_eager_step(rng: np.random.Generator) -> None:
    """With ``flex`` attention (:mod:`graphormer_urpe.model.flex`) the step still compiles whole (FlexAttention is an
    operator Dynamo captures, its score_mod included) and gives the eager kernel's eager step. On CUDA: Inductor, the
    whole step, gradients included. On a CPU: the forward and loss, captured by the counting backend as one graph;
    not the backward, which torch computes for a captured score_mod tensor (our bias) only in its GPU lowering and
    in eager mode (tests/model/test_flex.py), not in the CPU graph's fallback (it returns no gradient for it)."""
    torch._dynamo.reset()
    device = exactness_device()
    task = GraphRegression(dataclasses.replace(NO_DROPOUT, attention="urpe")).to(device).train()
    with torch.no_grad():  # C of both signs: the two passes and the shift
        task.model.relative_scale.weight[1:] = torch.rand_like(task.model.relative_scale.weight[1:]) * 2.0 - 0.5
    batch = graph_batch(rng).to(device)
    eager = step_results(task, task.step_losses, batch)
    use_attention_kernel(task, "flex")
    if device.type == "cuda":
        assert_same_step(*eager, *step_results(task, compiled(task.step_losses, True, device), batch))
        return
    counter = CountingBackend()
    with torch.no_grad():
        losses = compiled(task.step_losses, True, device, backend=counter.backend)(batch)
    assert counter.forward_graphs == 1
    for name, value in eager[0].items():
        torch.testing.assert_close(losses[name], value, **rounding_tolerance(value))
