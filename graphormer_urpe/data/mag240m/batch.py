"""The unpadded batch MAG240M DataLoader workers hand over, padded on the training device.

Shape letters: B graphs, N nodes of the largest graph, V nodes and P node pairs (sum of n * n) of the batch,
E edges, F node-feature columns, Fc continuous node-feature width, Fe edge-feature columns, Fec continuous
edge-feature width, Y targets.
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
    """A batch of graphs without padding (fewer bytes to copy into shared memory and to transfer), padded
    after the move to the training device by :meth:`pad`. Fields mean what they do in :class:`GraphBatch`.

    Nodes are listed graph after graph; ``spd`` holds each graph's (n, n) block, row-major, block after
    block. Integer fields use the smallest integer dtype that holds them; :meth:`pad` widens them.

    Shapes:
        num_nodes, index, target_node: (B,) int64; y: (B, Y) float32.
        x: (V, F) integer; x_continuous: (V, Fc) float16/32; in_degree, out_degree: (V,) integer.
        spd: (P,) uint8; edge_attr: (E, Fe) integer; edge_continuous: (E, Fec) float32.
        edge_dst: (E,) integer, each edge's target as a position in its graph; edges are listed node
            after node (``out_degree`` of each), by ascending target.
        lease: (1,) uint8 or None, the worker's shared-memory slot (:mod:`.slots`) the tensors live in;
            stays on the host; :meth:`release` frees it.
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
        """The padded :class:`GraphBatch`, on this batch's device, in new memory (so this one can be released)."""
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
        """Give the worker's slot back, once the batch has been copied onward (by :meth:`pad` or a move)."""
        release(self.lease)
