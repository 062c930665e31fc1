"""The unpadded batch that MAG240M DataLoader workers hand over, padded on the training device.

Workers build a :class:`CompactGraphBatch` (real nodes only, each subgraph's (n, n) SPD block,
small integer types) straight into a shared-memory slot (:mod:`graphormer_urpe.data.mag240m.slots`);
the training process pads it into the model's :class:`~graphormer_urpe.data.batch.GraphBatch` on
its device (:meth:`CompactGraphBatch.pad`), deriving the first edges of shortest paths there.

Shape letters: B graphs, N nodes of the largest graph, V nodes and P node pairs (sum of n * n) of
the whole batch, E edges, F node-feature columns, Fc continuous node-feature width, Fe edge-feature
columns, Fec continuous edge-feature width, Y targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from graphormer_urpe.constants import NO_EDGE, UNREACHABLE_SPD
from graphormer_urpe.data.batch import GraphBatch, TensorFields, pad_rows
from graphormer_urpe.data.mag240m.slots import release
from graphormer_urpe.data.mag240m.structure import batched_first_edges


@dataclass
class CompactGraphBatch(TensorFields):
    """A batch of graphs without padding: what DataLoader workers hand over, padded after the move
    to the training device by :meth:`pad` (fewer bytes to copy into shared memory and to transfer).

    Nodes are listed graph after graph; the pair arrays hold each graph's (n, n) block, row-major,
    block after block (V = sum of n, P = sum of n * n). Integer fields may use any integer dtype
    (the smallest that holds their values); :meth:`pad` widens them to the :class:`GraphBatch` ones.

    ===============  =========  ================  ==================================================
    field            dtype      shape             meaning (as in :class:`GraphBatch`)
    ===============  =========  ================  ==================================================
    num_nodes        int64      (B,)              nodes of each graph
    x                integer    (V, F)            categorical node features
    x_continuous     float16/32 (V, Fc)           continuous node features
    in_degree        integer    (V,)              in-degree of each node
    out_degree       integer    (V,)              out-degree of each node
    spd              uint8      (P,)              shortest-path distances, blocks of the graphs
    edge_attr        integer    (E, Fe)           categorical edge features
    edge_continuous  float32    (E, Fec)          continuous edge features
    edge_dst         integer    (E,)              target node (position in its graph) of each edge;
                                                  edges are listed node after node (``out_degree``
                                                  of each), by ascending target
    y                float32    (B, Y)            graph-level targets (or a target node's label)
    index            int64      (B,)              dataset position of each graph
    target_node      int64      (B,)              as in :class:`GraphBatch`
    lease            uint8      (1,) or None      the worker's shared-memory slot the tensors live in
                                                  (:mod:`~graphormer_urpe.data.mag240m.slots`); stays
                                                  on the host; :meth:`release` frees the slot
    ===============  =========  ================  ==================================================
    """

    num_nodes: torch.Tensor
    x: torch.Tensor
    x_continuous: torch.Tensor
    in_degree: torch.Tensor
    out_degree: torch.Tensor
    spd: torch.Tensor
    edge_attr: torch.Tensor
    edge_continuous: torch.Tensor
    edge_dst: torch.Tensor
    y: torch.Tensor
    index: torch.Tensor
    target_node: torch.Tensor
    lease: torch.Tensor | None = field(default=None, metadata={"host": True})

    def pad(self) -> GraphBatch:
        """The padded :class:`GraphBatch`, built on the device the tensors are on, in new memory
        (it shares none with this batch, so the batch can be released)."""
        n_max = int(self.num_nodes.max())  # one host sync on a GPU
        node_mask = torch.arange(n_max, device=self.num_nodes.device) < self.num_nodes[:, None]  # (B, N)
        pair_mask = node_mask[:, :, None] & node_mask[:, None, :]  # (B, N, N)
        spd = pad_rows(pair_mask, self.spd, UNREACHABLE_SPD)  # (B, N, N)
        first_edge = batched_first_edges(spd, self.num_nodes, self.out_degree, self.edge_dst)  # (V, N)
        return GraphBatch(
            x=pad_rows(node_mask, self.x.long(), 0),  # (B, N, F)
            x_continuous=pad_rows(node_mask, self.x_continuous, 0),  # (B, N, Fc)
            node_mask=node_mask,
            in_degree=pad_rows(node_mask, self.in_degree.long(), 0),  # (B, N)
            out_degree=pad_rows(node_mask, self.out_degree.long(), 0),
            spd=spd,
            first_edge=pad_rows(node_mask, first_edge, NO_EDGE),  # (B, N, N)
            edge_attr=self.edge_attr.to(torch.long, copy=True),
            edge_continuous=self.edge_continuous.clone(),
            edge_dst=self.edge_dst.to(torch.long, copy=True),
            y=self.y.clone(),
            index=self.index.clone(),
            target_node=self.target_node.clone(),
        )

    def release(self) -> None:
        """Give the worker's shared-memory slot back for its next batch; call it once the batch
        has been copied onward (after :meth:`pad`, or the move to a GPU). No-op without a lease."""
        release(self.lease)
