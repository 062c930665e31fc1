"""What every task shares: model, checkpoints, fine-tuning options, the training step (its optimiser and schedule:
:mod:`graphormer_urpe.tasks.optimiser`); see docs/tasks.md."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytorch_lightning as pl
import torch
from torch import nn

from graphormer_urpe.data.batch import GraphBatch
from graphormer_urpe.data.spec import DataSpec, SequenceSpec
from graphormer_urpe.errors import CheckpointError, DataError
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.tasks.compiled import CompileMode, check_compile_mode, compiled, uses_cuda_graphs
from graphormer_urpe.tasks.optimiser import DEFAULT_OPTIM, OptimConfig, adamw, is_head, warmup_decay_schedule
from graphormer_urpe.tasks.weight_average import WeightAverage

#: Evaluation stages, each with its own metric state.
STAGES = ("val", "test")
#: Checkpoint key of the record of where a run's weights came from (``graphormer-urpe train --init_from``).
INITIALISED_FROM = "initialised_from"
#: Checkpoint key of the weight average's state (``model.optim.weight_average``), what a resumed run continues.
WEIGHT_AVERAGE = "weight_average"
T = TypeVar("T")
C = TypeVar("C")


def check_layout(path: str | Path, hyper_parameters: Mapping[str, Any]) -> None:
    """Refuse (CheckpointError) a checkpoint of the layout before the task family was merged."""
    outside = [field.name for field in dataclasses.fields(OptimConfig) if field.name in hyper_parameters]
    if outside:
        raise CheckpointError(
            f"{path} was written before the task family was merged ({', '.join(outside)} outside "
            f"optim): convert it once with graphormer-urpe convert upgrade {path} NEW.ckpt"
        )


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
        #: The moving average of the weights (``optim.weight_average``), from the start of training; None without.
        self.weight_average: WeightAverage | None = None
        #: A resumed run's weight-average state, read with its checkpoint before the model is on its device.
        self.restored_weight_average: dict[str, Any] | None = None

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
        if self.weight_average is not None:
            checkpoint[WEIGHT_AVERAGE] = self.weight_average.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A resumed run's records; its weight average is taken at the start of training, on the model's device."""
        self.initialised_from = checkpoint.get(INITIALISED_FROM)
        self.restored_weight_average = checkpoint.get(WEIGHT_AVERAGE)

    def on_train_start(self) -> None:
        """Start the weight average (``optim.weight_average``) at the weights training starts from, or take a resumed
        run's."""
        if self.optim.weight_average is None:
            return
        self.weight_average = WeightAverage(self.optim.weight_average, self.model)
        if self.restored_weight_average is not None:
            self.weight_average.load_state_dict(self.restored_weight_average)
            self.restored_weight_average = None

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        """The optimiser's step, then the weight average's (before any callback may save a checkpoint of it)."""
        super().optimizer_step(*args, **kwargs)
        if self.weight_average is not None:
            self.weight_average.update()

    def on_train_batch_start(self, batch: GraphBatch, batch_idx: int) -> None:
        """Training updates its own weights: give them back if a validation left the average in."""
        if self.weight_average is not None:
            self.weight_average.swap_out()

    def on_validation_start(self) -> None:
        """A validation judges the averaged weights, and the checkpoints written after it hold them."""
        if self.weight_average is not None:
            self.weight_average.swap_in()

    def on_train_end(self) -> None:
        """The network after training holds the average, as a validation would judge it."""
        if self.weight_average is not None:
            self.weight_average.swap_in()

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

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW (:func:`~graphormer_urpe.tasks.optimiser.adamw`) under the warm-up and decay schedule, per step."""
        optimizer = adamw(self, self.optim)
        schedule = warmup_decay_schedule(optimizer, self.optim, int(self.trainer.estimated_stepping_batches))
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
