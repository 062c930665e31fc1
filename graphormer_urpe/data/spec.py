"""What a dataset is, declared once; every datamodule exposes it as ``spec``, linked into the task by the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from graphormer_urpe.data.lsc_formats import SubmissionFormat

TargetLevel = Literal["graph", "node", "target_node"]
TargetKind = Literal["regression", "binary", "multiclass"]
#: Where the model reads its prediction for each target level.
READOUT = {"graph": "graph_token", "node": "nodes", "target_node": "target_node"}


def default_target_names(count: int) -> tuple[str, ...]:
    """``y``, or ``y0``, ``y1`` ... (the names of targets a dataset does not name)."""
    return ("y",) if count == 1 else tuple(f"y{k}" for k in range(count))


@dataclass(frozen=True)
class DataSpec:
    """One dataset's declaration (frozen; vocabularies and names are stored as tuples).

    Example:
        >>> zinc = DataSpec(node_vocab=[28], edge_vocab=[4], num_targets=1, num_outputs=1)
        >>> zinc.node_vocab, zinc.target_names, zinc.readout
        ((28,), ('y',), 'graph_token')
        >>> papers = DataSpec((3,), (6,), 1, 153, target_level="target_node", target_kind="multiclass")  # MAG240M
        >>> [papers.encoder_fields()[k] for k in ("node_vocab", "num_outputs", "readout")]  # set in the model's config
        [[3], 153, 'target_node']

    Args:
        node_vocab: values per categorical node-feature column (F entries).
        edge_vocab: values per categorical edge-feature column (Fe entries).
        num_targets: Y, target columns per graph (per node for ``target_level: node``).
        num_outputs: the model's output width: Y for regression and binary targets, the classes of a multi-class one.
        continuous_node_dim: Fc, width of the continuous node features (0: none).
        continuous_edge_dim: Fec, width of the continuous edge features (0: none).
        target_level: ``graph``, ``node`` or ``target_node`` (one target per sampled subgraph's target node: MAG240M).
        target_kind: ``regression``, ``binary`` (Y labels in {0, 1}) or ``multiclass`` (one label < num_outputs).
        target_names: name of every target (metrics, prediction columns); empty: ``y``, or ``y0``, ``y1`` ...
        submission: the OGB-LSC leaderboard's file format and evaluator, None for other datasets.
        molecule_features: names of the M molecule-level features of every graph (``GraphBatch.molecule_features``,
            (B, M)): ``rdkit2d/<descriptor>`` for RDKit descriptors, then the table's own feature columns; empty:
            none (every dataset but a SMILES table with ``descriptors`` or ``feature_columns``).
    """

    node_vocab: tuple[int, ...]
    edge_vocab: tuple[int, ...]
    num_targets: int
    num_outputs: int
    continuous_node_dim: int = 0
    continuous_edge_dim: int = 0
    target_level: TargetLevel = "graph"
    target_kind: TargetKind = "regression"
    target_names: tuple[str, ...] = ()
    submission: SubmissionFormat | None = None
    molecule_features: tuple[str, ...] = ()

    #: The encoder fields the data decides: input features (a checkpoint's tables fit equal ones) and outputs.
    FEATURE_FIELDS: ClassVar[tuple[str, ...]] = (
        "node_vocab",
        "edge_vocab",
        "continuous_node_dim",
        "continuous_edge_dim",
    )
    OUTPUT_FIELDS: ClassVar[tuple[str, ...]] = ("num_outputs", "readout")
    #: Encoder fields of the molecule-level features: a checkpoint fine-tuned on others gets a new projection.
    MOLECULE_FIELDS: ClassVar[tuple[str, ...]] = ("molecule_features",)

    def __post_init__(self) -> None:
        for name in ("node_vocab", "edge_vocab"):
            vocab = tuple(int(v) for v in getattr(self, name))
            if not vocab or min(vocab) < 1:
                raise ValueError(f"DataSpec.{name}={vocab}: one entry of at least 1 per feature column")
            object.__setattr__(self, name, vocab)
        object.__setattr__(self, "molecule_features", tuple(str(name) for name in self.molecule_features))
        if len(set(self.molecule_features)) != len(self.molecule_features):
            raise ValueError(f"DataSpec.molecule_features={self.molecule_features}: a name is repeated")
        names = tuple(self.target_names) or default_target_names(self.num_targets)
        object.__setattr__(self, "target_names", names)
        if len(names) != self.num_targets:
            raise ValueError(f"DataSpec: {len(names)} target names {names} for num_targets={self.num_targets}")
        if self.target_level not in READOUT:
            raise ValueError(f"DataSpec.target_level={self.target_level!r}; expected one of {', '.join(READOUT)}")
        if self.target_kind not in ("regression", "binary", "multiclass"):
            raise ValueError(f"DataSpec.target_kind={self.target_kind!r}; expected regression, binary or multiclass")
        counts = f"num_targets={self.num_targets}, num_outputs={self.num_outputs}"
        if self.target_kind == "multiclass" and (self.num_targets != 1 or self.num_outputs < 2):
            raise ValueError(f"DataSpec: a multi-class target is one column with at least 2 classes, got {counts}")
        if self.target_kind != "multiclass" and self.num_outputs != self.num_targets:
            raise ValueError(f"DataSpec: {self.target_kind} targets have one output each, got {counts}")
        if min(self.continuous_node_dim, self.continuous_edge_dim) < 0:
            raise ValueError("DataSpec: continuous feature widths are 0 (none) or more")

    @property
    def readout(self) -> str:
        """Where the model reads its prediction: ``graph_token``, ``nodes`` or ``target_node``."""
        return READOUT[self.target_level]

    def encoder_fields(self) -> dict[str, object]:
        """The ``GraphormerConfig`` fields the data decides (:attr:`FEATURE_FIELDS`, :attr:`OUTPUT_FIELDS`, then
        :attr:`MOLECULE_FIELDS`)."""
        return {
            "node_vocab": list(self.node_vocab),
            "edge_vocab": list(self.edge_vocab),
            "continuous_node_dim": self.continuous_node_dim,
            "continuous_edge_dim": self.continuous_edge_dim,
            "num_outputs": self.num_outputs,
            "readout": self.readout,
            "molecule_features": list(self.molecule_features),
        }


@dataclass(frozen=True)
class SequenceSpec:
    """One synthetic sequence task's declaration: ``vocab_size`` token values, one label of ``num_classes``
    per token (named ``y``), ``length`` tokens per sequence (sizes the Toeplitz C)."""

    vocab_size: int
    num_classes: int
    length: int
    target_kind: ClassVar[str] = "multiclass"
    target_names: ClassVar[tuple[str, ...]] = ("y",)
    FEATURE_FIELDS: ClassVar[tuple[str, ...]] = ("vocab_size", "length")  # as DataSpec.FEATURE_FIELDS
    OUTPUT_FIELDS: ClassVar[tuple[str, ...]] = ("num_classes",)
    MOLECULE_FIELDS: ClassVar[tuple[str, ...]] = ()

    def encoder_fields(self) -> dict[str, object]:
        """The ``SequenceConfig`` fields that the data decides (:attr:`FEATURE_FIELDS`, then :attr:`OUTPUT_FIELDS`)."""
        return {"vocab_size": self.vocab_size, "length": self.length, "num_classes": self.num_classes}
