"""The ``flex`` attention kernel (FlexAttention, two passes for URPE's multiplier) computes what the eager kernel and
the formula written out do, in value and gradient: signed C, dropout's mask, masks, head sizes below 16."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from graphormer_urpe.constants import PAD_RELATION
from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.errors import ConfigError
from graphormer_urpe.model.attention import MultiHeadAttention, RelativeBias, RelativeScale, use_attention_kernel
from graphormer_urpe.model.flex import flex_relative_attention
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.testing.device import flex_attention_gradients
from graphormer_urpe.testing.graphs import make_record
from graphormer_urpe.testing.tolerance import rounding_tolerance

pytestmark = [pytest.mark.flex, pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")]

B, H, T = 3, 4, 7
#: The multipliers compared: none (RPE), URPE's C >= 0 with zeros (padding pairs, dropped keys), C of both signs.
MULTIPLIERS = ("none", "urpe", "urpe-dropout", "signed")


def exact_dtype(device: torch.device) -> torch.dtype:
    """float64 where torch's reference runs (the CPU), float32 for the fused CUDA kernels."""
    return torch.float64 if device.type == "cpu" else torch.float32


def attention_case(
    multiplier_kind: str, head_dim: int, device: torch.device
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Q, K, V (B, H, T, D), a bias (B, H, T, T) with -inf masks (graph 1 has 4 real tokens; its padding queries see
    the real keys, with multiplier 0 as URPE gives them), and a multiplier (B, H, T, T) or None; all leaves."""
    g = torch.Generator().manual_seed(0)
    dtype = exact_dtype(device)
    q, k, v = (torch.randn(B, H, T, head_dim, generator=g, dtype=dtype) for _ in range(3))
    bias = torch.randn(B, H, T, T, generator=g, dtype=dtype)
    bias[1, :, :, 4:] = float("-inf")
    multiplier = None
    if multiplier_kind != "none":
        multiplier = torch.rand(B, H, T, T, generator=g, dtype=dtype) + 0.5
        if multiplier_kind == "signed":
            multiplier -= 1.0
        else:
            multiplier[1, :, 4:, :] = 0.0
        if multiplier_kind == "urpe-dropout":
            multiplier *= (torch.rand(B, H, T, T, generator=g, dtype=dtype) > 0.3) / 0.7
    leaves = [t.to(device).requires_grad_() for t in (q, k, v, bias)]
    return leaves, None if multiplier is None else multiplier.to(device).requires_grad_()


def formula(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, multiplier: torch.Tensor | None
) -> torch.Tensor:
    """``softmax(Q K^T / sqrt(D) + bias) [* multiplier] V`` written out."""
    weights = torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias, dim=-1)
    return (weights if multiplier is None else weights * multiplier) @ v


@pytest.mark.device
@pytest.mark.parametrize("head_dim", [10, 16], ids=["padded-head", "head-16"])
@pytest.mark.parametrize("multiplier_kind", MULTIPLIERS)
def test_flex_attention_equals_the_formula_in_value_and_gradient(
    device: torch.device, multiplier_kind: str, head_dim: int
) -> None:
    """Value and every gradient to rounding. Where the multiplier is 0 and none is negative (a padding pair, a dropped
    key), log 0 = -inf takes the entry out: its gradient is 0 (the formula's is A (dO . V), which URPE's C never
    receives there: the padding row of C is frozen, and dropout's multiplier is not learned)."""
    (q, k, v, bias), multiplier = attention_case(multiplier_kind, head_dim, device)
    leaves = [q, k, v, bias] + ([] if multiplier is None else [multiplier])
    out_grad = torch.randn(B, H, T, head_dim, generator=torch.Generator().manual_seed(1), dtype=q.dtype).to(device)
    expected = formula(q, k, v, bias, multiplier)
    expected_grads = torch.autograd.grad(expected, leaves, out_grad)
    with flex_attention_gradients(device):
        out = flex_relative_attention(q, k, v, bias, multiplier)
        grads = torch.autograd.grad(out, leaves, out_grad)
    torch.testing.assert_close(out, expected, **rounding_tolerance(expected))
    for name, grad, expected_grad in zip("q k v bias multiplier".split(), grads, expected_grads):
        if name == "multiplier" and multiplier_kind != "signed":
            dropped = multiplier == 0
            assert dropped.any() and torch.equal(grad[dropped], torch.zeros_like(grad[dropped]))
            grad, expected_grad = grad[~dropped], expected_grad[~dropped]
        torch.testing.assert_close(grad, expected_grad, **rounding_tolerance(expected_grad), msg=name)


@pytest.mark.device
def test_flex_attention_of_a_negative_multiplier_uses_the_shift_and_stays_exact(device: torch.device) -> None:
    """One entry far below the others (the shift is then large against most of W) still gives the formula."""
    (q, k, v, bias), multiplier = attention_case("urpe", 16, device)
    with torch.no_grad():
        multiplier[0, 0, 0, 0] = -50.0
        expected = formula(q, k, v, bias, multiplier)
        with flex_attention_gradients(device):
            out = flex_relative_attention(q, k, v, bias, multiplier)
    torch.testing.assert_close(out, expected, **rounding_tolerance(expected, 50.0 * expected))


def two_kernels(
    module: torch.nn.Module, run: Callable[[], torch.Tensor]
) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """``run()``'s output and the gradients of ``module``'s parameters with the eager kernel, then with flex; the
    global generator reseeded before each, so that dropout draws the same masks."""
    results = []
    for kernel in ("eager", "flex"):
        use_attention_kernel(module, kernel)
        module.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        with flex_attention_gradients(next(module.parameters()).device):
            out = run()
            out.square().sum().backward()
        results.append((out.detach(), [p.grad for p in module.parameters()]))
    return results


def assert_same(results: list[tuple[torch.Tensor, list[torch.Tensor]]]) -> None:
    (eager, eager_grads), (flex, flex_grads) = results
    torch.testing.assert_close(flex, eager, **rounding_tolerance(eager))
    for eager_grad, flex_grad in zip(eager_grads, flex_grads, strict=True):
        if eager_grad is None:  # a parameter the step does not use (C under RPE) is not used by flex either
            assert flex_grad is None
            continue
        torch.testing.assert_close(flex_grad, eager_grad, **rounding_tolerance(eager_grad))


@pytest.mark.device
@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_attention_module_with_flex_equals_eager(device: torch.device, attention: str) -> None:
    """The module's output and its weights' gradients, C trained away from ones, padding keys masked."""
    torch.manual_seed(0)
    module = torch.nn.ModuleDict(
        {"attention": MultiHeadAttention(H * 8, H), "bias": RelativeBias(6, H), "scale": RelativeScale(6, H)}
    ).to(device)
    with torch.no_grad():
        module["scale"].weight[1:] = torch.rand(5, H) * 2.0 - 0.5  # signed
    x = torch.randn(B, T, H * 8, device=device)
    relation = torch.randint(1, 6, (B, T, T), device=device)
    relation[1, 4:, :] = relation[1, :, 4:] = PAD_RELATION  # graph 1 has 4 real tokens
    key_mask = torch.ones(B, 1, T, T, dtype=torch.bool, device=device)
    key_mask[1, :, :, 4:] = False  # its padding queries see the real keys, with C = 0 as URPE gives them

    def run() -> torch.Tensor:
        bias = module["bias"](relation).masked_fill(~key_mask, float("-inf"))
        scale = module["scale"](relation) if attention == "urpe" else None
        return module["attention"](x, bias, scale)

    assert_same(two_kernels(module, run))


@pytest.mark.parametrize("attention", ["urpe", "rpe"])
def test_graphormer_training_step_with_flex_equals_eager_every_dropout_on(attention: str) -> None:
    """A whole model in training, on the CPU (where both kernels draw dropout's mask from the same generator):
    predictions and every parameter's gradient to float32 rounding."""
    rng = np.random.default_rng(0)
    batch = collate_graphs([make_record(rng, n, index=i) for i, n in enumerate((5, 17, 9, 1))])
    config = GraphormerConfig(
        num_layers=2,
        hidden_dim=40,
        ffn_dim=32,
        num_heads=4,
        attention=attention,
        dropout=0.1,
        attention_dropout=0.2,
        activation_dropout=0.1,
    )
    torch.manual_seed(0)
    model = Graphormer(config).train()
    if attention == "urpe":
        with torch.no_grad():
            model.relative_scale.weight[1:] = torch.rand_like(model.relative_scale.weight[1:]) * 2.0 - 0.5
    assert_same(two_kernels(model, lambda: model(batch)))


def test_an_unknown_kernel_is_refused_naming_the_choices() -> None:
    model = Graphormer(GraphormerConfig(num_layers=1))
    with pytest.raises(ConfigError, match=r"attention kernel='fused': expected one of 'eager', 'flex'"):
        use_attention_kernel(model, "fused")
    assert all(layer.attention.kernel == "eager" for layer in model.layers)
