"""What every task shares: model, checkpoints, optimiser and schedule, fine-tuning options; see docs/tasks.md."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.spec import DataSpec, SequenceSpec
from graphormer_urpe.errors import CheckpointError, ConfigError, DataError, check_int, check_number
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.tasks.compiled import CompileMode, check_compile_mode, compiled, uses_cuda_graphs

#: Evaluation stages, each with its own metric state.
STAGES = ("val", "test")
#: Checkpoint key of the record of where a run's weights came from (``graphormer-urpe train --init_from``).
INITIALISED_FROM = "initialised_from"
T = TypeVar("T")
C = TypeVar("C")


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
    """

    lr: float = 2e-4
    warmup_steps: int = 60_000
    end_lr: float = 0.0
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    head_lr: float | None = None
    layer_lr_decay: float = 1.0
    freeze_encoder_steps: int = 0

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


def check_layout(path: str | Path, hyper_parameters: Mapping[str, Any]) -> None:
    """Refuse (CheckpointError) a checkpoint of the layout before the task family was merged."""
    outside = [field.name for field in dataclasses.fields(OptimConfig) if field.name in hyper_parameters]
    if outside:
        raise CheckpointError(
            f"{path} was written before the task family was merged ({', '.join(outside)} outside "
            f"optim): convert it once with graphormer-urpe convert upgrade {path} NEW.ckpt"
        )


def is_head(name: str) -> bool:
    """Whether a parameter or state-dict entry belongs to the head: ``model.head.*`` or the task's own tensors."""
    return name.startswith("model.head.") or not name.startswith("model.")


def parameter_groups(task: nn.Module, optim: OptimConfig) -> list[dict[str, Any]]:
    """AdamW's parameter groups of ``task``: one unnamed group (logged as ``lr-AdamW``), or with ``head_lr`` or
    ``layer_lr_decay`` the non-empty groups ``embeddings``, ``layer1`` .. ``layerL`` (the final LayerNorm in
    ``layerL``) and ``head``, each with its peak ``lr``.

    Example:
        >>> from graphormer_urpe import GraphormerConfig
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


def decided_by_data(key: str, data_value: T, given: object, default: object) -> T:
    """The data's value of a setting the data decides; a ``given`` value other than ``default`` or the data's
    raises DataError naming ``key`` (a value equal to the default cannot be told from one left out)."""
    if plain(given) not in (plain(data_value), plain(default)):
        raise DataError(
            f"{key}={plain(given)!r} but the data has {plain(data_value)!r}: the data decides this "
            "setting; remove it from the config"
        )
    return data_value


def data_targets(
    data: DataSpec | SequenceSpec, target_kind: str, target_names: list[str] | None, default_kind: str
) -> tuple[str, list[str]]:
    """The kind of target and the target names that ``data`` decides (:func:`decided_by_data`)."""
    return (
        decided_by_data("model.target_kind", data.target_kind, target_kind, default_kind),
        decided_by_data("model.target_names", list(data.target_names), target_names, None),
    )


def with_data_fields(encoder: C, data: DataSpec | SequenceSpec) -> C:
    """``encoder`` with the fields that the data decides set from ``data`` (:func:`decided_by_data`)."""
    defaults = {
        f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(encoder)
    }
    return dataclasses.replace(
        encoder,
        **{
            key: decided_by_data(f"model.encoder.{key}", value, getattr(encoder, key), defaults[key])
            for key, value in data.encoder_fields().items()
        },
    )


def plain(value: object) -> object:
    """Lists and tuples as lists, so that ``(28,)`` and ``[28]`` compare equal."""
    return list(value) if isinstance(value, tuple | list) else value


class GraphormerTask(pl.LightningModule):
    """A Graphormer with the papers' optimiser and schedule; subclasses add loss and metrics. Every constructor
    argument but ``data`` is saved (dataclasses as dicts), so a checkpoint rebuilds its task alone.

    Args:
        encoder: the network's hyper-parameters.
        optim: the optimiser and learning-rate schedule.
        data: the data's declaration (``data.spec``, linked by the CLI); it sets the encoder fields it decides.
        compile: the training step's forward and loss eager (false), compiled by Inductor (true) or compiled and
            replayed as CUDA graphs (``cuda_graphs``); :mod:`graphormer_urpe.tasks.compiled`.
    """

    #: The network, the config dataclass that ``from_checkpoint`` rebuilds, the data's declaration.
    model_class: type[nn.Module] = Graphormer
    config_class: type = GraphormerConfig
    data_class: type = DataSpec

    def __init__(
        self,
        encoder: GraphormerConfig,
        optim: OptimConfig = DEFAULT_OPTIM,
        data: DataSpec | SequenceSpec | None = None,
        compile: CompileMode = False,
    ) -> None:
        super().__init__()
        check_compile_mode(compile)
        if data is not None:
            self.check_data(data)
            encoder = with_data_fields(encoder, data)
        # collects the arguments of every ``__init__`` up the chain: keep the class's own and LightningCLI's
        # ``_...``. ``compile`` is how this machine runs the step, not part of the model: a checkpoint loads eager
        # anywhere.
        self.save_hyperparameters(ignore=["encoder", "optim", "data", "compile"])
        accepted = inspect.signature(type(self).__init__).parameters
        for name in [name for name in self.hparams if not name.startswith("_") and name not in accepted]:
            del self.hparams[name]
        self.hparams.update(encoder=dataclasses.asdict(encoder), optim=dataclasses.asdict(optim))
        self.optim = optim
        self.compile_mode = compile
        self.model = self.model_class(encoder)
        #: Where the weights came from (``graphormer-urpe train --init_from``), None for a run from its own
        #: initialisation.
        self.initialised_from: dict[str, Any] | None = None
        #: :meth:`step_losses` as the training step runs it:
        #: compiled at the start of a fit (``compile``), or itself.
        self.training_losses = self.step_losses

    @property
    def head_from_checkpoint(self) -> bool:
        """Whether the head (and a regression's target statistics) came from the ``--init_from`` checkpoint."""
        return self.initialised_from is not None and self.initialised_from["head"] == "kept"

    @property
    def molecule_features_from_checkpoint(self) -> bool:
        """Whether the molecule-feature projection and statistics came from the ``--init_from`` checkpoint."""
        return self.initialised_from is not None and self.initialised_from.get("molecule_features") == "kept"

    def on_fit_start(self) -> None:
        """Compile the training step's losses (``compile``), now that the model is on its device. Standardise the
        molecule-level features (if any) with the training split's statistics, unless the projection came with its
        own from the checkpoint (``--init_from``)."""
        self.compile_training_step()
        molecule = getattr(self.model, "molecule", None)
        datamodule = self.trainer.datamodule
        if molecule is not None and datamodule is not None and not self.molecule_features_from_checkpoint:
            mean, std = datamodule.molecule_feature_statistics()
            molecule.set_statistics(torch.as_tensor(mean), torch.as_tensor(std))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.initialised_from is not None:
            checkpoint[INITIALISED_FROM] = self.initialised_from

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.initialised_from = checkpoint.get(INITIALISED_FROM)

    @classmethod
    def check_data(cls, data: DataSpec | SequenceSpec) -> None:
        """Refuse (DataError) the declaration of another family of data than :attr:`data_class`."""
        if not isinstance(data, cls.data_class):
            raise DataError(
                f"{cls.__name__} trains on data described by a {cls.data_class.__name__}, the data "
                f"gives a {type(data).__name__}: choose the task for this data (model.class_path)"
            )

    def save_decided(self, **values: object) -> None:
        """Save the constructor arguments that ``data`` decided, so that :meth:`from_checkpoint` passes them back."""
        accepted = inspect.signature(type(self).__init__).parameters
        self.hparams.update({name: value for name, value in values.items() if name in accepted})

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str | torch.device = "cpu") -> GraphormerTask:
        """Rebuild the task from a checkpoint alone; CheckpointError for an old layout or another task's."""
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
        saved = checkpoint["hyper_parameters"]
        check_layout(path, saved)
        hparams = {k: v for k, v in saved.items() if not k.startswith("_")}  # LightningCLI adds _class_path ...
        unknown = sorted(set(hparams) - set(inspect.signature(cls.__init__).parameters))
        if unknown:
            raise CheckpointError(
                f"{path}: the hyper-parameters {unknown} are not arguments of {cls.__name__} (a "
                f"checkpoint of {saved.get('_class_path', 'another task')}?): load it with its own "
                "task class"
            )
        task = cls(
            encoder=cls.config_class(**hparams.pop("encoder")),
            optim=OptimConfig(**hparams.pop("optim", {})),
            **hparams,
        )  # no ``data``: what it decided is in the saved arguments
        task.load_state_dict(checkpoint["state_dict"])
        task.initialised_from = checkpoint.get(INITIALISED_FROM)
        return task

    def encoder_parameters(self) -> list[nn.Parameter]:
        """Every parameter but the head's (:func:`is_head`): what ``optim.freeze_encoder_steps`` freezes."""
        return [p for name, p in self.named_parameters() if not is_head(name)]

    def setup(self, stage: str) -> None:
        """An encoder frozen throughout (``optim.freeze_encoder_steps: -1``) computes no gradients."""
        if stage == "fit" and self.optim.freeze_encoder_steps == -1:
            for parameter in self.encoder_parameters():
                parameter.requires_grad_(False)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Drop the encoder's gradients while it is frozen: AdamW skips them, gradient clipping sees the head's only."""
        if self.trainer.global_step < self.optim.freeze_encoder_steps:
            for parameter in self.encoder_parameters():
                parameter.grad = None

    def optimizer(self) -> torch.optim.AdamW:
        """AdamW over :func:`parameter_groups`, fused where the device allows (:func:`fused_optimiser_supported`)."""
        optim = self.optim
        fused = fused_optimiser_supported(self.parameters())
        optimizer = torch.optim.AdamW(
            parameter_groups(self, optim),
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

    def configure_optimizers(self) -> dict[str, Any]:
        optim = self.optim
        optimizer = self.optimizer()
        total = int(self.trainer.estimated_stepping_batches)
        end_factor = optim.end_lr / optim.lr
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_linear_decay(step, optim.warmup_steps, total, end_factor)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def compile_training_step(self) -> None:
        """Make :attr:`training_losses` :meth:`step_losses` compiled as ``compile`` asks, for the model's device."""
        self.training_losses = compiled(self.step_losses, self.compile_mode, self.device, shape_of=self.batch_shape)

    def step_losses(self, batch: GraphBatch) -> dict[str, torch.Tensor]:
        """Forward and loss of one training batch: ``{"loss": the loss to minimise, name: another value to log}``,
        each a scalar tensor. What ``compile`` compiles, so it reads no value on the host (no ``item()``, no boolean
        indexing): rows without a target (NaN) enter every sum with weight 0."""
        raise NotImplementedError

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor:
        if uses_cuda_graphs(self.compile_mode, self.device):
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's graph outputs may be overwritten now
        losses = self.training_losses(batch)
        for name, value in losses.items():
            # logged values outlive the step: a copy, so that the next replay of a CUDA graph cannot overwrite
            # them. Not prog_bar: Lightning would read it from the device after every step (the run's
            # StepProgressBar shows it when it redraws)
            self.log(f"train/{name}", value.detach().clone(), batch_size=self.batch_size_of(batch))
        return losses["loss"]

    @staticmethod
    def batch_size_of(batch: GraphBatch) -> int:
        """The examples of a batch, what a logged value counts as (padding graphs included)."""
        return batch.num_graphs

    @staticmethod
    def batch_shape(batch: GraphBatch) -> str:
        """A batch's shape in words, B graphs x N nodes x E edges: what a compiled step compiles once for."""
        graphs, nodes = batch.node_mask.shape
        return f"{graphs} graphs x {nodes} nodes x {batch.edge_attr.shape[0]} edges"

    @staticmethod
    def outputs_and_targets(output: torch.Tensor, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Shapes: output (B, O), or (B, N, O) per node -> (K, O) outputs, (K, Y) targets: one row per prediction."""
        if output.dim() == 3:  # per-node predictions: padding nodes dropped
            return output[batch.node_mask], batch.y[batch.node_mask]
        return GraphormerTask.padded_outputs_and_targets(output, batch)

    @staticmethod
    def padded_outputs_and_targets(output: torch.Tensor, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`outputs_and_targets` with the rows of padding nodes kept (their targets are NaN), without boolean
        indexing. Shapes: output (B, O), or (B, N, O) per node -> (R, O) outputs, (R, Y) targets."""
        if output.dim() == 3:
            return output.flatten(0, 1), batch.y.flatten(0, 1)
        if batch.y.dim() == 3:
            raise ValueError(
                "the data has one target per node but the model reads one prediction per graph: "
                "set model.encoder.readout=nodes (the data's spec sets it when trained with graphormer-urpe train)"
            )
        return output, batch.y


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


class PerTargetTask(GraphormerTask):
    """A task whose ``val``/``test`` metrics are :class:`PerTargetMetrics` in ``self.metrics[stage]`` (one set per
    stage from :meth:`new_metrics`), updated with :meth:`predictions` and logged at the end of each epoch;
    subclasses set ``monitor`` and define :meth:`new_metrics`, :meth:`score_names` and ``prediction_columns``."""

    metrics: nn.ModuleDict
    monitor: tuple[str, str]

    def new_metrics(self) -> nn.ModuleList:
        """A fresh set of this task's metrics (:class:`PerTargetMetrics`), as every stage logs them."""
        raise NotImplementedError

    def score_names(self) -> list[str]:
        """The name of each column of :meth:`predictions` (S): the targets' values, or the classes' probabilities."""
        raise NotImplementedError

    def score(self, prediction: np.ndarray, target: np.ndarray, prefix: str) -> dict[str, float]:
        """This task's metrics (:meth:`new_metrics`, as training logs them) of any predictions, e.g. an ensemble's:
        ``{prefix/key: value}``. Shapes: prediction (R, S) as :meth:`predictions` gives them, target (R, Y), NaN where
        unknown; rows whose prediction is NaN (not featurised) are left out."""
        scored = ~np.isnan(prediction).any(axis=1)
        metrics = self.new_metrics()
        values: dict[str, float] = {}
        for metric in metrics:
            metric.update(
                torch.as_tensor(prediction[scored], dtype=torch.float32),
                torch.as_tensor(target[scored], dtype=torch.float32),
            )
            values |= {name: float(value) for name, value in metric.compute(prefix).items()}
        return values

    def predictions(self, batch: GraphBatch) -> torch.Tensor:
        """What the metrics and ``predict`` see: the task's output in float32. (B, O), or (B, N, O) per node"""
        return self(batch).float()

    def evaluation_step(self, batch: GraphBatch, stage: str) -> None:
        prediction, target = self.outputs_and_targets(self.predictions(batch), batch)
        for metric in self.metrics[stage]:
            metric.update(prediction, target)

    def predict_step(self, batch: GraphBatch, batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch.index, "prediction": self.predictions(batch)}

    def validation_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self.evaluation_step(batch, "val")

    def test_step(self, batch: GraphBatch, batch_idx: int) -> None:
        self.evaluation_step(batch, "test")

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val")

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")

    def _log_metrics(self, stage: str) -> None:
        """Log the split's metrics (gathered across processes by torchmetrics) and reset them."""
        for metric in self.metrics[stage]:
            for name, value in metric.compute(stage).items():
                self.log(name, value, prog_bar=name == self.monitor[0])
            metric.reset()
