"""Index conventions shared by preprocessing, collation and the model.

Every categorical id, padding value and reserved position is named here once; no other module
writes a bare ``+ 1`` or ``255``.

Relation ids (the integer index that selects a row of the attention bias table B and of the
URPE scale table C) for a batch with a graph token at position :data:`GRAPH_TOKEN_POS`::

    PAD_RELATION          0   any pair that involves a padding node (B row fixed at 0, C at 0)
    GRAPH_TOKEN_RELATION  1   any pair that involves the graph token (the "virtual distance")
    SPD_RELATION_OFFSET   2   a pair of real nodes at shortest-path distance d -> 2 + min(d, max_distance)
    unreachable pairs         2 + max_distance + 1, when ``max_distance`` is set (a learned relation)

With ``spatial_pos_max`` set, pairs at distance ``>= spatial_pos_max`` (and unreachable ones) are
masked out of the softmax, as the official Graphormer collator's option does; ``spatial_pos_max:
null`` masks nothing, as both official training pipelines do (they pass 1024). Without a graph
token (``graph_token: false``) id 1 is unused and the relation matrix is the node block alone.

Relation ids of a sequence of length n (the synthetic tasks), id :data:`PAD_RELATION` reserved::

    B (T5 buckets)   SEQUENCE_RELATION_OFFSET + bucket(j - i)           0 <= bucket < num_buckets
    C (Toeplitz)     SEQUENCE_RELATION_OFFSET + (j - i) + (n - 1)       one id per signed offset
"""

from __future__ import annotations

#: Id of the padding row in every categorical embedding table (node features, degrees, edges).
PAD_ID = 0
#: Position of the learned graph token (virtual node) in the token sequence.
GRAPH_TOKEN_POS = 0
#: Token position of node i is ``i + NODE_TOKEN_OFFSET`` (the graph token comes first).
NODE_TOKEN_OFFSET = 1
#: ``GraphBatch.target_node`` of a graph-level example: no node is the prediction target.
NO_TARGET_NODE = -1

#: Stored shortest-path distance of pairs that are unreachable (or at least this far apart).
#: Distances are stored as ``uint8``; this value is never a usable distance.
UNREACHABLE_SPD = 255
#: Stored "no edge" id in the per-pair first-edge matrix (``int16``).
NO_EDGE = -1

PAD_RELATION = 0
GRAPH_TOKEN_RELATION = 1
SPD_RELATION_OFFSET = 2

#: First relation id of sequence offsets and T5 buckets (id :data:`PAD_RELATION` stays reserved).
SEQUENCE_RELATION_OFFSET = PAD_RELATION + 1
#: T5's defaults: 32 buckets (16 per direction, half of them exact) spaced logarithmically up to 128.
DEFAULT_T5_NUM_BUCKETS = 32
DEFAULT_T5_MAX_DISTANCE = 128

#: Largest stored distance: ``uint8`` distances, :data:`UNREACHABLE_SPD` reserved (longer paths
#: are stored as unreachable; molecules and sampled subgraphs are far below it).
MAX_STORED_DISTANCE = UNREACHABLE_SPD - 1
#: Largest useful ``spatial_pos_max``: it masks the unreachable pairs only.
MAX_SPATIAL_POS_MAX = UNREACHABLE_SPD

#: Default of the official collator's ``spatial_pos_max`` (v1.0 ``graphormer/collator.py``): pairs
#: with ``spd >= 20`` are masked. Both official training pipelines override it with 1024, which
#: masks nothing (v1.0 ``graphormer/data.py``, v2 ``graphormer/tasks/graph_prediction.py``).
DEFAULT_SPATIAL_POS_MAX = 20
#: Official Graphormer: multi-hop edge encoding looks at the first 5 edges of a path.
DEFAULT_MULTI_HOP_MAX_DIST = 5

#: 1 hartree in electronvolt (CODATA 2018), for QM9 gaps stored in atomic units.
HARTREE_TO_EV = 27.211386246
