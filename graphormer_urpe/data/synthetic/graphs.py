"""A node task on regular graphs where RPE provably fails and URPE does not (Theorem 2 on graphs): every node has
the same features, and its label is the number of nodes at a given distance. See docs/synthetic.md."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader

from graphormer_urpe.data.batch import GraphRecord, collate_graphs
from graphormer_urpe.data.loaders import eval_loader, train_loader
from graphormer_urpe.data.spec import DataSpec
from graphormer_urpe.data.structure import graph_structure
from graphormer_urpe.errors import check_int

#: Seed-stream ids that keep the three splits apart.
_SPLIT_IDS = {"train": 0, "valid": 1, "test": 2}


def distance_counts(spd: np.ndarray, distance: int) -> np.ndarray:
    """Number of nodes at shortest-path distance exactly ``distance`` (>= 1) from each node.

    Shapes: spd (n, n), unreachable pairs holding a value that is never ``distance`` -> (n,) int64."""
    return (spd == distance).sum(axis=1).astype(np.int64)


def max_distance_count(degree: int, distance: int, max_nodes: int) -> int:
    """Largest possible count: ``d (d - 1)^(k - 1)`` nodes at distance k in a d-regular graph, at most n - 1."""
    return min(degree * (degree - 1) ** (distance - 1), max_nodes - 1)


def regular_graph_record(graph: nx.Graph, index: int, distance: int = 2) -> GraphRecord:
    """A graph with one constant node and edge feature, preprocessed like any dataset; ``y``: (n, 1) float32
    :func:`distance_counts` at ``distance``, the node labels."""
    n = graph.number_of_nodes()
    half = np.array(graph.edges(), dtype=np.int64).reshape(-1, 2).T  # (2, e/2)
    edge_index = np.concatenate([half, half[::-1]], axis=1)  # both directions
    structure = graph_structure(n, edge_index)
    return GraphRecord(
        x=np.zeros((n, 1), dtype=np.int64),
        edge_index=edge_index,
        edge_attr=np.zeros((edge_index.shape[1], 1), dtype=np.int64),
        spd=structure.spd,
        first_edge=structure.first_edge,
        in_degree=structure.in_degree,
        out_degree=structure.out_degree,
        y=distance_counts(structure.spd, distance).astype(np.float32)[:, None],
        index=index,
    )


def regular_graphs(
    count: int, degree: int, min_nodes: int, max_nodes: int, distance: int, seed: int
) -> tuple[list[GraphRecord], Counter]:
    """``count`` random connected d-regular graphs whose labels are not all equal (n drawn uniformly from the node
    range, n * d even), a function of the arguments, and the number of rejected graphs per reason."""
    sizes = [n for n in range(min_nodes, max_nodes + 1) if n > degree and n * degree % 2 == 0]
    if not sizes:
        raise ValueError(f"no {degree}-regular graph has between {min_nodes} and {max_nodes} nodes")
    rng = np.random.default_rng(seed)
    graphs: list[GraphRecord] = []
    rejected: Counter = Counter()
    while len(graphs) < count:
        if sum(rejected.values()) > 100 * count + 1000:
            raise RuntimeError(
                f"only {len(graphs)} of {count} usable graphs after rejecting {dict(rejected)}: "
                "widen the node range or change degree/distance"
            )
        graph = nx.random_regular_graph(degree, int(rng.choice(sizes)), seed=int(rng.integers(2**31)))
        if not nx.is_connected(graph):
            rejected["disconnected"] += 1
            continue
        record = regular_graph_record(graph, index=len(graphs), distance=distance)
        if (record.y == record.y[0]).all():
            rejected["same label at every node"] += 1
            continue
        graphs.append(record)
    return graphs, rejected


class SyntheticGraphDataModule(pl.LightningDataModule):
    """Random d-regular graphs with identical node features; label = number of nodes at a given distance. The
    graphs are generated in memory from the seed at ``setup``, never written to disk.

    Args:
        degree: d, the degree of every node.
        min_nodes: smallest graph.
        max_nodes: largest graph.
        distance: labels count the nodes at exactly this shortest-path distance.
        train_graphs, val_graphs, test_graphs: graphs per split.
        batch_size: graphs per optimiser step over all devices (the global batch).
        seed: seed of all three splits.
    """

    #: Size-aware batching (``GraphDataModule.bucket_window``): none.
    bucket_window = 0

    def __init__(
        self,
        degree: int = 3,
        min_nodes: int = 12,
        max_nodes: int = 24,
        distance: int = 2,
        train_graphs: int = 2000,
        val_graphs: int = 250,
        test_graphs: int = 250,
        batch_size: int = 64,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_int("data.degree", degree, 2)
        check_int(
            "data.min_nodes", min_nodes, degree + 1, hint=f" (a {degree}-regular graph has more than {degree} nodes)"
        )
        check_int("data.max_nodes", max_nodes, min_nodes, hint=" (data.min_nodes)")
        check_int("data.distance", distance, 1)
        for key, value in (
            ("data.train_graphs", train_graphs),
            ("data.val_graphs", val_graphs),
            ("data.test_graphs", test_graphs),
            ("data.batch_size", batch_size),
        ):
            check_int(key, value, 1)
        self.degree = degree
        self.min_nodes = min_nodes
        self.max_nodes = max_nodes
        self.distance = distance
        self.split_sizes = {"train": train_graphs, "valid": val_graphs, "test": test_graphs}  # graphs per split
        self.batch_size = batch_size
        self.seed = seed
        self.datasets: dict[str, list[GraphRecord]] = {}
        self.rejected: Counter = Counter()

    @property
    def spec(self) -> DataSpec:
        """One constant node and edge feature, one class label per node (counts ``0 .. max_distance_count``)."""
        classes = max_distance_count(self.degree, self.distance, self.max_nodes) + 1
        return DataSpec(
            node_vocab=(1,),
            edge_vocab=(1,),
            num_targets=1,
            num_outputs=classes,
            target_level="node",
            target_kind="multiclass",
        )

    def setup(self, stage: str | None = None) -> None:
        """Generate the three splits from the seed, counting rejected graphs."""
        if self.datasets:
            return
        for split, count in self.split_sizes.items():
            seed = int(np.random.SeedSequence([self.seed, _SPLIT_IDS[split]]).generate_state(1)[0])
            self.datasets[split], rejected = regular_graphs(
                count, self.degree, self.min_nodes, self.max_nodes, self.distance, seed=seed
            )
            self.rejected += rejected

    def describe(self) -> dict:
        """Graph family, split sizes, rejected graphs and the accuracy of always predicting the majority label."""
        info = {
            "source": f"synthetic {self.degree}-regular graphs, label = #nodes at distance {self.distance}",
            "nodes": f"{self.min_nodes}..{self.max_nodes}",
            "splits": dict(self.split_sizes),
            "batch_size": self.batch_size,
            "seed": self.seed,
        }
        if self.datasets:
            info["rejected"] = dict(self.rejected)
            labels = {
                split: Counter(int(v) for record in records for v in record.y[:, 0])
                for split, records in self.datasets.items()
            }  # label -> nodes with it
            info["majority_label_accuracy"] = {k: round(max(n.values()) / n.total(), 4) for k, n in labels.items()}
        return info

    def identity(self) -> dict:
        """Which data these are, as checkpoints record it: the class and every option but the batch size."""
        return {
            "datamodule": f"{type(self).__module__}.{type(self).__qualname__}",
            "degree": self.degree,
            "min_nodes": self.min_nodes,
            "max_nodes": self.max_nodes,
            "distance": self.distance,
            "train_graphs": self.split_sizes["train"],
            "val_graphs": self.split_sizes["valid"],
            "test_graphs": self.split_sizes["test"],
            "seed": self.seed,
        }

    @property
    def eval_batch_size(self) -> int:
        """Graphs per evaluation step over all devices: the training batch's."""
        return self.batch_size

    def train_dataloader(self) -> DataLoader:
        """Shuffled global batches, this process's slice of each; resumable mid-epoch."""
        return train_loader(self.datasets["train"], self.batch_size, self.trainer, collate_graphs)

    def val_dataloader(self) -> DataLoader:
        """This process's exact shard of the validation graphs."""
        return eval_loader(self.datasets["valid"], self.batch_size, self.trainer, collate_graphs)

    def test_dataloader(self) -> DataLoader:
        """This process's exact shard of the test graphs."""
        return eval_loader(self.datasets["test"], self.batch_size, self.trainer, collate_graphs)
