"""The optimiser and learning-rate schedule every task trains with: AdamW over parameter groups (layer-wise rates, the
head's own rate), fused where the device allows, under a linear warm-up and decay (docs/tasks.md, docs/finetuning.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from graphormer_urpe.errors import ConfigError, check_int, check_number


def warmup_linear_decay(step: int, warmup_steps: int, total_steps: int, end_factor: float = 0.0) -> float:
    """LR multiplier after ``step`` optimiser updates: linear from 0 to 1 over ``warmup_steps``, then linear to
    ``end_factor`` at ``total_steps``; update k (from 1) uses the multiplier of step k - 1 (docs/tasks.md)."""
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - (1.0 - end_factor) * progress


#: The largest float32, what every learning rate times a weight's update must stay below.
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
#: The largest learning rate AdamW can apply to float32 weights: its first step moves a weight by lr / (1 - 0.9)
#: (the bias correction of betas[0]), a number PyTorch refuses beyond the largest float32.
MAX_LEARNING_RATE = FLOAT32_MAX * (1 - 0.9)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW (betas 0.9, 0.999), linear warm-up and decay, fine-tuning options; defaults are the Graphormer papers'.
    Each field is checked at construction (ConfigError); see docs/tasks.md and docs/finetuning.md.

    Args:
        lr: peak learning rate (> 0).
        warmup_steps: linear warm-up length in optimiser steps (>= 0).
        end_lr: learning rate reached at ``trainer.max_steps`` (>= 0), as the fraction ``end_lr / lr`` of each peak.
        weight_decay: decoupled (AdamW) weight decay on every parameter, as the official code (>= 0).
        adam_eps: Adam epsilon (> 0).
        head_lr: peak learning rate of the head (> 0); null: ``lr``.
        layer_lr_decay: d in (0, 1]: layer l of L trains at ``lr * d ** (L - l)``, the embeddings at ``lr * d ** L``.
        freeze_encoder_steps: no update of the encoder (all but the head) in the first N optimiser steps; -1: never
            (no gradients computed for it); 0: nothing frozen.
        weight_average: d in (0, 1): validations and the checkpoints they write use the exponential moving average
            of the weights, d per optimiser step (:mod:`~graphormer_urpe.tasks.weight_average`); null: the weights
            training updates.
    """

    lr: float = 2e-4
    warmup_steps: int = 60_000
    end_lr: float = 0.0
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    head_lr: float | None = None
    layer_lr_decay: float = 1.0
    freeze_encoder_steps: int = 0
    weight_average: float | None = None

    def __post_init__(self) -> None:
        """Check every field; raise :class:`~graphormer_urpe.errors.ConfigError` naming the first that cannot work."""
        check_number("model.optim.lr", self.lr, 0.0, include_minimum=False)
        check_int("model.optim.warmup_steps", self.warmup_steps, 0)
        check_number("model.optim.end_lr", self.end_lr, 0.0)
        check_number("model.optim.weight_decay", self.weight_decay, 0.0)
        check_number("model.optim.adam_eps", self.adam_eps, 0.0, include_minimum=False)
        if self.head_lr is not None:
            check_number("model.optim.head_lr", self.head_lr, 0.0, include_minimum=False, hint=", or null (lr)")
        check_number(
            "model.optim.layer_lr_decay",
            self.layer_lr_decay,
            0.0,
            1.0,
            include_minimum=False,
            hint=" (1: every layer at lr)",
        )
        check_int(
            "model.optim.freeze_encoder_steps",
            self.freeze_encoder_steps,
            -1,
            hint=" (optimiser steps; -1: the encoder never trains)",
        )
        if self.weight_average is not None:
            check_number(
                "model.optim.weight_average",
                self.weight_average,
                0.0,
                1.0,
                include_minimum=False,
                include_maximum=False,
                hint=" (the average's decay per optimiser step, e.g. 0.99), or null (no average)",
            )
        self._check_float32_steps()

    def _check_float32_steps(self) -> None:
        """Refuse learning rates whose AdamW steps a float32 cannot hold (PyTorch would stop in the first step)."""
        for key, rate in (
            ("model.optim.lr", self.lr),
            ("model.optim.head_lr", self.head_lr),
            ("model.optim.end_lr", self.end_lr),
        ):
            if rate is not None and rate > MAX_LEARNING_RATE:
                raise ConfigError(
                    key,
                    rate,
                    f"is above {MAX_LEARNING_RATE:.4g}, the largest learning rate AdamW can "
                    "apply to float32 weights (its first step moves them by the rate / (1 - 0.9))",
                )
        # the schedule's end_lr / lr
        highest = max(self.lr, self.head_lr or self.lr) * max(1.0, self.end_lr / self.lr)
        if highest > MAX_LEARNING_RATE:
            raise ConfigError(
                "model.optim.end_lr",
                self.end_lr,
                f"takes the head's rate to {highest:.4g} (head_lr x "
                f"end_lr / lr), above {MAX_LEARNING_RATE:.4g}, the largest AdamW can apply to float32 "
                "weights",
            )
        if highest * self.weight_decay > FLOAT32_MAX:
            raise ConfigError(
                "model.optim.weight_decay",
                self.weight_decay,
                f"times the highest learning rate "
                f"({highest:.4g}) is above {FLOAT32_MAX:.4g}, the largest float32: AdamW's decay step "
                "cannot be computed",
            )


#: The papers' settings, the default of every task (frozen, so one instance serves all).
DEFAULT_OPTIM = OptimConfig()


def is_head(name: str) -> bool:
    """Whether a parameter or state-dict entry belongs to the head: ``model.head.*`` or the task's own tensors."""
    return name.startswith("model.head.") or not name.startswith("model.")


def parameter_groups(task: nn.Module, optim: OptimConfig) -> list[dict[str, Any]]:
    """AdamW's parameter groups of ``task``: one unnamed group (logged as ``lr-AdamW``), or with ``head_lr`` or
    ``layer_lr_decay`` the non-empty groups ``embeddings``, ``layer1`` .. ``layerL`` (the final LayerNorm in
    ``layerL``) and ``head``, each with its peak ``lr``.

    Example:
        >>> from graphormer_urpe import GraphormerConfig
        >>> from graphormer_urpe.tasks import GraphormerTask
        >>> task = GraphormerTask(GraphormerConfig(num_layers=2, hidden_dim=8, ffn_dim=8, num_heads=2))
        >>> optim = OptimConfig(lr=1e-3, layer_lr_decay=0.5, head_lr=4e-3)
        >>> {group["name"]: group["lr"] for group in parameter_groups(task, optim)}
        {'embeddings': 0.00025, 'layer1': 0.0005, 'layer2': 0.001, 'head': 0.004}
    """
    if optim.head_lr is None and optim.layer_lr_decay == 1.0:
        return [{"params": list(task.parameters()), "lr": optim.lr}]
    layers = len(task.model.layers)
    peaks = {
        "embeddings": optim.lr * optim.layer_lr_decay**layers,
        **{f"layer{depth}": optim.lr * optim.layer_lr_decay ** (layers - depth) for depth in range(1, layers + 1)},
        "head": optim.lr if optim.head_lr is None else optim.head_lr,
    }
    members: dict[str, list[nn.Parameter]] = {name: [] for name in peaks}
    # features joined at the readout are a new part of the head, not an input embedding: the head's rate
    readout_features = getattr(task.model.config, "molecule_features_into", None) == "readout"  # sequences: none
    for name, parameter in task.named_parameters():
        group = "head" if readout_features and name.startswith("model.molecule.") else _group_of(name, layers)
        members[group].append(parameter)
    return [{"name": name, "params": members[name], "lr": peak} for name, peak in peaks.items() if members[name]]


def _group_of(name: str, layers: int) -> str:
    """The :func:`parameter_groups` group of the parameter ``name`` (``model.layers.3.ffn.0.weight``)."""
    if is_head(name):
        return "head"
    part = name.split(".")
    if part[1] == "layers":
        return f"layer{int(part[2]) + 1}"
    return f"layer{layers}" if part[1] == "final_norm" else "embeddings"


def fused_optimiser_supported(parameters: Iterable[nn.Parameter]) -> bool:
    """Whether AdamW's fused implementation (one kernel for every tensor, no host synchronisation) takes these
    parameters: floating point, all on one device of a kind it supports (CUDA, and the CPU since torch 2.4)."""
    parameters = list(parameters)
    devices = {p.device for p in parameters}
    return (
        len(devices) == 1
        and next(iter(devices)).type in _get_fused_kernels_supported_devices()
        and all(torch.is_floating_point(p) for p in parameters)
    )


def adamw(task: nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW over ``task``'s :func:`parameter_groups`, fused where the device allows
    (:func:`fused_optimiser_supported`)."""
    fused = fused_optimiser_supported(task.parameters())
    optimizer = torch.optim.AdamW(
        parameter_groups(task, optim),
        lr=optim.lr,
        betas=(0.9, 0.999),
        eps=optim.adam_eps,
        weight_decay=optim.weight_decay,
        fused=fused,
    )
    if fused:
        # Lightning refuses to clip the gradients of an optimiser that unscales 16-bit gradients itself, which
        # fused AdamW declares (_step_supports_amp_scaling). Declared a plain one, its gradients are unscaled
        # before clipping like any other's, and GradScaler checks them before it calls the step, as for any
        # other.
        optimizer._step_supports_amp_scaling = False
    return optimizer


def warmup_decay_schedule(
    optimizer: torch.optim.Optimizer, optim: OptimConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Every group's rate times :func:`warmup_linear_decay` over ``total_steps`` optimiser steps, ending at
    ``optim.end_lr / optim.lr`` of its peak."""
    end_factor = optim.end_lr / optim.lr
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_linear_decay(step, optim.warmup_steps, total_steps, end_factor)
    )
