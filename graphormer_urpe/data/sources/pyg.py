"""Your own graphs: any ``torch_geometric`` ``InMemoryDataset``, by import path and arguments (:class:`PygDataset`).
See docs/own-data.md."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch_geometric.data import Dataset, InMemoryDataset
from torch_geometric.data.dataset import overrides_method

from graphormer_urpe.data.batch import RawGraph
from graphormer_urpe.data.pyg_interop import is_categorical
from graphormer_urpe.data.sources.base import GraphSource, seeded_split, split_shares
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.errors import DataError, DatasetMissing, check_int, import_object

log = logging.getLogger(__name__)

#: Node masks of ``split: node_masks``, per split.
MASKS = {"train": "train_mask", "valid": "val_mask", "test": "test_mask"}
#: Largest categorical vocabulary (the cache stores categorical features as int16).
MAX_VOCAB = np.iinfo(np.int16).max


@dataclass(frozen=True)
class FeatureLayout:
    """(attribute, columns) of every integer (``categorical``) and float (``continuous``) node or edge attribute, and
    the ``vocab`` of each categorical column (largest value + 1; ``(1,)``, one constant column, when there is none)."""

    categorical: tuple[tuple[str, int], ...]
    continuous: tuple[tuple[str, int], ...]
    vocab: tuple[int, ...]

    @property
    def continuous_dim(self) -> int:
        return sum(width for _, width in self.continuous)

    def arrays(self, data: Any, rows: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(rows, F) int64 categorical and (rows, Fc) float32 continuous features (None if none) of one graph."""
        categorical = [_columns(data[name]) for name, _ in self.categorical]
        x = np.concatenate(categorical, axis=1).astype(np.int64) if categorical else np.zeros((rows, 1), np.int64)
        continuous = [_columns(data[name]) for name, _ in self.continuous]
        return x, np.concatenate(continuous, axis=1).astype(np.float32) if continuous else None


def _columns(tensor: torch.Tensor) -> np.ndarray:
    """A (rows,) or (rows, k) tensor as a (rows, k) array (also with 0 rows: a graph without edges)."""
    array = tensor.detach().cpu().numpy()
    return array.reshape(len(array), int(np.prod(array.shape[1:])))


def offline(cls: type) -> type:
    """``cls`` whose ``download`` stops with :class:`DatasetMissing` naming the raw files it lacks."""
    if not overrides_method(cls, "download"):
        return cls

    def download(self: Dataset) -> None:
        missing = [path for path in self.raw_paths if not Path(path).exists()]
        raise DatasetMissing(
            f"{cls.__module__}.{cls.__name__} has no raw files in {self.raw_dir} (missing: "
            f"{', '.join(missing)}); put them there, or set data.source.download: true to let the "
            "dataset download them"
        )

    return type(cls.__name__, (cls,), {"download": download, "__module__": cls.__module__, "__doc__": cls.__doc__})


@dataclass(frozen=True)
class PygDescription:
    """What one read of a dataset's collated tensors gives: the feature layouts and the :class:`DataSpec`."""

    nodes: FeatureLayout
    edges: FeatureLayout
    spec: DataSpec


class PygReader:
    """Rows of the dataset instances (in split order), one row per graph; with ``masks`` (node-mask attributes),
    one block of rows over all graphs per mask."""

    def __init__(
        self,
        datasets: Sequence[InMemoryDataset],
        nodes: FeatureLayout,
        edges: FeatureLayout,
        target: str,
        node_targets: bool,
        masks: Sequence[str] = (),
    ) -> None:
        self.datasets = list(datasets)
        self.masks = list(masks)
        self.nodes = nodes
        self.edges = edges
        self.target = target
        self.node_targets = node_targets
        self.start = np.cumsum([0] + [len(d) for d in self.datasets])
        self.num_rows = int(self.start[-1]) * max(len(self.masks), 1)  # one block of rows per mask

    def worker_init(self) -> None:
        """Nothing to prepare: the collated tensors are read as they are."""

    def graphs(self, start: int, stop: int, max_nodes: int | None = None) -> Iterator[tuple[int, RawGraph | str]]:
        graphs = int(self.start[-1])  # max_nodes: every graph is read whole, at no cost worth saving
        for row in range(start, stop):
            graph = row % graphs if self.masks else row
            instance = int(np.searchsorted(self.start, graph, side="right")) - 1
            data = self.datasets[instance][graph - int(self.start[instance])]
            edge_index = data.edge_index.numpy() if data.edge_index is not None else np.zeros((2, 0), np.int64)
            x, x_continuous = self.nodes.arrays(data, int(data.num_nodes))
            edge_attr, edge_continuous = self.edges.arrays(data, edge_index.shape[1])
            y = _columns(data[self.target]).astype(np.float32)
            if self.masks:
                y[~data[self.masks[row // graphs]].numpy().astype(bool)] = np.nan
            yield (
                row,
                RawGraph(
                    x=x,
                    edge_index=edge_index,
                    edge_attr=edge_attr,
                    y=y if self.node_targets else y.reshape(-1),
                    x_continuous=x_continuous,
                    edge_continuous=edge_continuous,
                ),
            )


class PygDataset(GraphSource):
    """Any ``torch_geometric`` ``InMemoryDataset`` already on disk, by import path and arguments.

    Args:
        dataset: import path of the dataset class, e.g. ``torch_geometric.datasets.TUDataset``.
        args: its constructor arguments, e.g. ``{root: data/TU, name: MUTAG}`` (a relative root: from where you run).
        node_attributes: node feature attributes (integer: categorical, float: continuous); default ``x`` if present.
        edge_attributes: edge feature attributes; default ``edge_attr`` if present.
        target: the target attribute (NaN = missing).
        target_level: ``graph`` (one target row per graph) or ``node`` (one per node).
        task: ``regression``, ``binary`` (every target 0 or 1) or ``multiclass`` (one target of class ids).
        num_classes: classes of a multi-class target; None takes the largest label + 1.
        target_names: names of the target columns (metrics, predictions); default ``y``, ``y0`` ...
        split: ``random`` (seeded, over graphs), ``instances`` (``split_args``) or ``node_masks`` (``train_mask`` ...).
        split_args: for ``instances``: extra constructor arguments per split, e.g. ``{train: {split: train}, ...}``.
        split_fractions: train, valid and test shares of ``random``.
        seed: seed of ``random``.
        download: let the dataset download missing raw files; otherwise a missing file stops the run, naming it.
        name: directory of the cache under the data root; default ``pyg_<class>[_<args.name>]``.
    """

    def __init__(
        self,
        dataset: str,
        args: dict[str, Any] | None = None,
        node_attributes: list[str] | None = None,
        edge_attributes: list[str] | None = None,
        target: str = "y",
        target_level: Literal["graph", "node"] = "graph",
        task: Literal["regression", "binary", "multiclass"] = "regression",
        num_classes: int | None = None,
        target_names: list[str] | None = None,
        split: Literal["random", "instances", "node_masks"] = "random",
        split_args: dict[str, dict[str, Any]] | None = None,
        split_fractions: Sequence[float] = (0.8, 0.1, 0.1),
        seed: int = 0,
        download: bool = False,
        name: str | None = None,
    ) -> None:
        self.dataset = dataset
        self.args = dict(args or {})
        self.node_attributes = node_attributes
        self.edge_attributes = edge_attributes
        self.target = target
        self.target_level = target_level
        self.task = task
        self.num_classes = num_classes
        self.target_names = list(target_names) if target_names else None
        self.split = split
        self.split_args = dict(split_args or {})
        self.split_fractions = split_shares(split_fractions)
        check_int("data.source.seed", seed, 0)  # numpy's generators take no negative seed
        self.seed = seed
        self.download = download
        suffix = f"_{self.args['name']}" if "name" in self.args else ""
        self.name = name or f"pyg_{dataset.rsplit('.', 1)[-1]}{suffix}"
        if target_level not in ("graph", "node"):
            raise DataError(f"data.source.target_level: {target_level!r}; expected graph or node")
        if task not in ("regression", "binary", "multiclass"):
            raise DataError(f"data.source.task: {task!r}; expected regression, binary or multiclass")
        if split == "instances" and not {"train", "valid"} <= set(self.split_args):
            raise DataError(
                "data.source.split: instances needs data.source.split_args with at least 'train' and "
                f"'valid' (and optionally 'test'), got {sorted(self.split_args)}"
            )
        if not set(self.split_args) <= {"train", "valid", "test"}:
            raise DataError(f"data.source.split_args names splits {sorted(self.split_args)}; use train, valid, test")
        if split != "instances" and self.split_args:
            raise DataError("data.source.split_args is used by split: instances only")
        if split == "node_masks" and target_level != "node":
            raise DataError("data.source.split: node_masks splits per-node targets (target_level: node)")
        if split not in ("random", "instances", "node_masks"):
            raise DataError(f"data.source.split: {split!r}; expected random, instances or node_masks")
        self._instances: dict[str, InMemoryDataset] | None = None

    @property
    def spec(self) -> DataSpec:
        """Vocabularies, widths and targets, read from the data (:attr:`description`)."""
        return self.description.spec

    def origin(self) -> str:
        return f"{self.dataset}({', '.join(f'{k}={v!r}' for k, v in self.args.items())})"

    def options(self) -> dict:
        return {
            "dataset": self.dataset,
            "args": self.args,
            "node_attributes": self.node_attributes,
            "edge_attributes": self.edge_attributes,
            "target": self.target,
            "target_level": self.target_level,
            "task": self.task,
            "num_classes": self.num_classes,
            "split": self.split,
            "split_args": self.split_args,
            "split_fractions": self.split_fractions,
            "seed": self.seed,
            "fingerprint": self._fingerprint,
        }

    def instances(self) -> dict[str, InMemoryDataset]:
        """The dataset instance of every split (``all`` for one instance), created once."""
        if self._instances is None:
            cls = import_object("data.source.dataset", self.dataset)
            if not (isinstance(cls, type) and issubclass(cls, InMemoryDataset)):
                raise DataError(f"data.source.dataset: {self.dataset} is not a torch_geometric InMemoryDataset")
            cls = cls if self.download else offline(cls)
            parts = self.split_args if self.split == "instances" else {"all": {}}
            instances = {}
            for split, extra in parts.items():
                try:
                    instances[split] = cls(**{**self.args, **extra})
                except TypeError as error:
                    raise DataError(
                        f"{self.dataset}: cannot be built with { ({**self.args, **extra}) } ({error}); "
                        "check data.source.args"
                    ) from error
                if instances[split].transform is not None:
                    raise DataError(f"{self.origin()} has a transform; use pre_transform (applied once, stored)")
            self._instances = instances
            log.info("%s: %s graphs", self.origin(), ", ".join(f"{k} {len(v):,}" for k, v in instances.items()))
        return self._instances

    def ensure_raw(self, root: Path) -> None:
        self.instances()

    def open(self, root: Path) -> PygReader:
        masks = list(MASKS.values()) if self.split == "node_masks" else []
        return PygReader(
            list(self.instances().values()),
            self.description.nodes,
            self.description.edges,
            self.target,
            self.target_level == "node",
            masks,
        )

    def splits(self, root: Path, reader: PygReader) -> dict[str, np.ndarray]:
        graphs = int(reader.start[-1])
        if self.split == "node_masks":
            return {split: np.arange(k * graphs, (k + 1) * graphs) for k, split in enumerate(MASKS)}
        if self.split == "instances":
            return {split: np.arange(reader.start[k], reader.start[k + 1]) for k, split in enumerate(self.split_args)}
        return seeded_split(graphs, self.seed, self.split_fractions[:2])

    def _collated(self, attribute: str) -> list[torch.Tensor | None]:
        """The attribute's collated tensor in every instance (None where the dataset has none)."""
        return [getattr(instance._data, attribute, None) for instance in self.instances().values()]

    def _layout_of(self, attributes: list[str] | None, default: str, what: str) -> FeatureLayout:
        """Categorical and continuous columns of the node (or edge) attributes, with vocabularies."""
        categorical, continuous, vocab = [], [], []
        for name in [default] if attributes is None else attributes:
            tensors = self._collated(name)
            if not all(isinstance(t, torch.Tensor) for t in tensors):  # absent (None) in some instance
                if attributes is None:
                    continue
                available = sorted(self.instances()[next(iter(self.instances()))]._data.keys())
                raise DataError(
                    f"{self.origin()}: no tensor attribute '{name}' (data.source.{what}_attributes); "
                    f"the data has: {', '.join(available)}"
                )
            if (odd := next((t for t in tensors if t.is_complex() or t.dim() not in (1, 2)), None)) is not None:
                raise DataError(
                    f"{self.origin()}: {what} attribute '{name}' is a {odd.dtype} tensor of shape "
                    f"{tuple(odd.shape)}; features are (rows,) or (rows, columns) tensors of integer "
                    "categories or real floats"
                )
            values = torch.cat([t.reshape(len(t), -1) for t in tensors])
            if is_categorical(values):
                values = values.long()
                if len(values) and values.min() < 0:
                    column = int(torch.nonzero((values < 0).any(dim=0))[0])
                    raise DataError(
                        f"{self.origin()}: categorical {what} attribute '{name}' column {column} has "
                        "negative values; categories must be 0, 1, 2 ... (or make it a float tensor)"
                    )
                sizes = (values.max(dim=0).values + 1).tolist() if len(values) else [1] * values.shape[1]
                if max(sizes, default=0) > MAX_VOCAB:
                    raise DataError(
                        f"{self.origin()}: categorical {what} attribute '{name}' has {max(sizes)} values, "
                        f"more than {MAX_VOCAB}; store it as a float tensor to project it instead"
                    )
                categorical.append((name, values.shape[1]))
                vocab += sizes
            else:
                continuous.append((name, values.shape[1]))
        return FeatureLayout(tuple(categorical), tuple(continuous), tuple(vocab) or (1,))

    @cached_property
    def description(self) -> PygDescription:
        """The feature layouts and the :class:`DataSpec`, read from the collated tensors once and checked."""
        nodes = self._layout_of(self.node_attributes, "x", "node")
        edges = self._layout_of(self.edge_attributes, "edge_attr", "edge")
        targets = self._collated(self.target)
        if any(t is None for t in targets):
            raise DataError(f"{self.origin()}: no target attribute '{self.target}' (data.source.target)")
        per_node = self.target_level == "node"
        for instance, y in zip(self.instances().values(), targets):
            rows = int(instance._data.num_nodes) if per_node else len(next(iter(instance.slices.values()))) - 1
            if len(y) != rows:
                unit, other = ("nodes", "graph") if per_node else ("graphs", "node")
                raise DataError(
                    f"{self.origin()}: '{self.target}' has {len(y)} rows for {rows} {unit}; per-{other} "
                    f"targets need data.source.target_level: {other}"
                )
        y = torch.cat([t.reshape(len(t), -1) for t in targets]).double()
        classes = self._check_labels(y)
        if self.target_names is not None and len(self.target_names) != y.shape[1]:
            raise DataError(
                f"data.source.target_names has {len(self.target_names)} names for the {y.shape[1]} "
                f"columns of '{self.target}'"
            )
        if self.split == "node_masks":
            for mask in MASKS.values():
                if any(m is None or m.dim() != 1 for m in self._collated(mask)):
                    raise DataError(f"{self.origin()}: split: node_masks needs a 1-D node attribute '{mask}'")
        log.info(
            "%s: node features %s (vocab %s), continuous %s; edge features %s (vocab %s), continuous %s; "
            "%d %s target column(s) per %s",
            self.origin(),
            [n for n, _ in nodes.categorical],
            list(nodes.vocab),
            [n for n, _ in nodes.continuous],
            [n for n, _ in edges.categorical],
            list(edges.vocab),
            [n for n, _ in edges.continuous],
            y.shape[1],
            self.task,
            self.target_level,
        )
        spec = DataSpec(
            node_vocab=nodes.vocab,
            edge_vocab=edges.vocab,
            num_targets=y.shape[1],
            num_outputs=classes if self.task == "multiclass" else y.shape[1],
            continuous_node_dim=nodes.continuous_dim,
            continuous_edge_dim=edges.continuous_dim,
            target_level=self.target_level,
            target_kind=self.task,
            target_names=tuple(self.target_names or ()),
        )
        return PygDescription(nodes, edges, spec)

    def _check_labels(self, y: torch.Tensor) -> int:
        """Classes of a classification target (2 for binary, 0 for regression); raises on bad labels."""
        if self.task == "regression":
            return 0
        values = y[~torch.isnan(y)]
        if self.task == "binary":
            bad = values[(values != 0) & (values != 1)]
            rule = "0 or 1 (task: binary)"
        elif y.shape[1] != 1:
            raise DataError(f"{self.origin()}: a multi-class target is one column, '{self.target}' has {y.shape[1]}")
        else:
            limit = self.num_classes if self.num_classes is not None else float("inf")
            bad = values[(values < 0) | (values != values.round()) | (values >= limit)]
            rule = "a class id 0, 1, 2 ... (task: multiclass)"
        if len(bad):
            raise DataError(
                f"{self.origin()}: {len(bad)} values of '{self.target}' are not {rule}, e.g. {bad[:3].tolist()}"
            )
        if self.task == "binary":
            return 2
        classes = self.num_classes if self.num_classes is not None else int(values.max()) + 1
        if classes < 2:
            raise DataError(f"{self.origin()}: '{self.target}' has {classes} class(es); at least 2 are needed")
        return classes

    @cached_property
    def _fingerprint(self) -> str:
        """SHA-1 of every collated tensor and slice of every instance: the cache follows the data."""
        digest = hashlib.sha1()
        for split, instance in self.instances().items():
            digest.update(split.encode())
            stores: Mapping[str, Any] = {
                **{f"data.{k}": v for k, v in instance._data.to_dict().items()},
                **{f"slices.{k}": v for k, v in (instance.slices or {}).items()},
            }
            for key in sorted(stores):
                digest.update(key.encode())
                value = stores[key]
                if isinstance(value, torch.Tensor):
                    digest.update(memoryview(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()))
                else:
                    digest.update(repr(value).encode())
        return digest.hexdigest()
