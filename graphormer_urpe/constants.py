"""Index conventions shared by preprocessing, collation and the model, each named once: no other module writes a
bare ``+ 1`` or ``255``. The relation ids and their masking are tabled in docs/model.md, "Index conventions"."""

from __future__ import annotations

#: Id of the padding row in every categorical embedding table (node features, degrees, edges).
PAD_ID = 0
#: Position of the learned graph token (virtual node) in the token sequence.
GRAPH_TOKEN_POS = 0
#: Token position of node i is ``i + NODE_TOKEN_OFFSET`` (the graph token comes first).
NODE_TOKEN_OFFSET = 1
#: ``GraphBatch.target_node`` of a graph-level example: no node is the prediction target.
NO_TARGET_NODE = -1

#: Stored (``uint8``) shortest-path distance of pairs that are unreachable (or at least this far apart).
UNREACHABLE_SPD = 255
#: Stored "no edge" id in the per-pair first-edge matrix (``int16``).
NO_EDGE = -1

#: Relation ids (rows of B and C): pairs with a padding node, pairs with the graph token, 2 + SPD of real pairs.
PAD_RELATION = 0
GRAPH_TOKEN_RELATION = 1
SPD_RELATION_OFFSET = 2

#: First relation id of sequence offsets and T5 buckets (id :data:`PAD_RELATION` stays reserved).
SEQUENCE_RELATION_OFFSET = PAD_RELATION + 1
#: T5's defaults: 32 buckets (16 per direction, half of them exact) spaced logarithmically up to 128.
DEFAULT_T5_NUM_BUCKETS = 32
DEFAULT_T5_MAX_DISTANCE = 128

#: Largest stored distance (longer paths are stored as
#: unreachable; molecules and sampled subgraphs are far below).
MAX_STORED_DISTANCE = UNREACHABLE_SPD - 1
#: Largest useful ``spatial_pos_max``: it masks the unreachable pairs only.
MAX_SPATIAL_POS_MAX = UNREACHABLE_SPD

#: Official collator's default ``spatial_pos_max``: pairs at ``spd >= 20`` masked (official training passes 1024).
DEFAULT_SPATIAL_POS_MAX = 20
#: Official Graphormer: multi-hop edge encoding looks at the first 5 edges of a path.
DEFAULT_MULTI_HOP_MAX_DIST = 5

#: 1 hartree in electronvolt (CODATA 2018), for QM9 gaps stored in atomic units.
HARTREE_TO_EV = 27.211386246
