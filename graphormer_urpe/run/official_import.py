"""Import a checkpoint of official Graphormer (microsoft/Graphormer, v1.0 or v2) as one of ours.

    python -m graphormer_urpe.run.official_import checkpoint_best_pcqm4mv2.pt runs/imported/graphormer.ckpt

writes ``graphormer.ckpt`` (an RPE model in our layout, for ``train.py --init_from`` and
:meth:`~graphormer_urpe.tasks.GraphormerTask.from_checkpoint`) and, next to it,
``graphormer.yaml``: the matching ``model.init_args.encoder`` and ``data.init_args.path_order``, to
pass after the dataset's config::

    python train.py --config pcqm4mv2.yaml --config runs/imported/graphormer.yaml \\
        --init_from runs/imported/graphormer.ckpt          # attention: urpe in the config: C = 1

The two layouts, as the official code builds them (the file each fact comes from):

* **v1.0** (branch ``v1.0``, ``graphormer/model.py``): a PyTorch Lightning checkpoint, weights in
  ``state_dict`` under ``atom_encoder``, ``edge_encoder``, ``edge_dis_encoder``,
  ``spatial_pos_encoder``, ``in_degree_encoder``, ``out_degree_encoder``, ``graph_token``,
  ``graph_token_virtual_distance``, ``layers.{i}.self_attention_norm / self_attention.linear_{q,k,v}
  / self_attention.output_layer / ffn_norm / ffn.layer{1,2}``, ``final_ln`` and ``out_proj`` (or
  ``downstream_out_proj``). Pre-LN layers, final LayerNorm, linear head.
* **v2** (``main``, fairseq): weights in ``model`` under ``encoder.graph_encoder.graph_node_feature.*``
  and ``.graph_attn_bias.*`` (same table names), ``encoder.graph_encoder.emb_layer_norm``,
  ``encoder.graph_encoder.layers.{i}.self_attn.{q,k,v,out}_proj / self_attn_layer_norm / fc1 / fc2
  / final_layer_norm`` (``graphormer/modules/graphormer_graph_encoder_layer.py``) and the head
  ``encoder.lm_head_transform_weight / layer_norm / embed_out / lm_output_learned_bias``
  (``graphormer/models/graphormer.py``). Post-LN layers unless ``pre_layernorm`` (whose
  ``encoder.graph_encoder.final_layer_norm`` exists but is never applied), embedding LayerNorm, no
  final LayerNorm, v2 head. ``encoder.masked_lm_pooler`` is never applied either; both are dropped.

Rows of the embedding tables (official ``convert_to_single_emb`` in ``wrapper.py`` adds
``1 + 512 f`` to column f, and every collator ``pad_*`` adds 1 more, so 0 is padding):

==========================  =============================  ===================================
table                       official row                   ours
==========================  =============================  ===================================
node feature f, value v     ``512 f + v + 2``              ``1 + sum(node_vocab[:f]) + v``
edge feature (multi_hop)    ``512 f + v + 3`` (one more     ``1 + sum(edge_vocab[:f]) + v``
                            ``+ 1`` in ``preprocess_item``)
edge feature (single_hop)   ``512 f + v + 2``              same
degree d                    ``d + 1``                      ``min(d, max_degree) + 1``
distance d                  ``d + 1`` (``spatial_pos``)    relation ``2 + min(d, max_distance)``
unreachable (``algos.pyx``  ``511``                        the unreachable relation
stores 510)
graph token distance        ``graph_token_virtual_distance``  relation 1
hop n matrix                ``edge_dis_encoder`` rows      ``edge_bias.hop_weight[n]``
                            ``n H^2 .. (n + 1) H^2``
==========================  =============================  ===================================

Padding rows are set to zero here. Official v1.0 (and v2 without ``apply_graphormer_init``)
leaves them at their random initial values; the edge table's padding row then enters the mean over
the hops of every path shorter than the longest path in the *batch*, so official predictions depend
on the batch. A warning says when that is the case and by how much.

Official pretrained files also hold fairseq objects (``args``, ``cfg``); they are read with a
restricted unpickler that rebuilds tensors and plain containers only and replaces every other
object by an inert placeholder, so no code from the file runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import logging
import pickle
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from graphormer_urpe.constants import MAX_SPATIAL_POS_MAX, MAX_STORED_DISTANCE, PAD_ID, PAD_RELATION
from graphormer_urpe.data.sources.featurize import ATOM_VOCAB, BOND_VOCAB
from graphormer_urpe.errors import CheckpointError
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig
from graphormer_urpe.run.checkpoints import state_dict_problems

log = logging.getLogger(__name__)

#: ``convert_to_single_emb``'s offset between feature columns (official ``wrapper.py``).
OFFICIAL_FEATURE_OFFSET = 512
#: Official ``spatial_pos`` of unreachable pairs: 510 from ``algos.pyx``, plus the collator's 1.
OFFICIAL_UNREACHABLE_ROW = 511
#: Official default ``multi_hop_max_dist`` (v1.0 ``data.py``, v2 ``tasks/graph_prediction.py``).
OFFICIAL_MULTI_HOP_MAX_DIST = 5


#: Encoder keys written to the ``.yaml``: what the weights fix. Vocabularies and outputs come from the
#: data, ``attention`` and the dropouts from the user's config (``attention: urpe`` starts at C = 1).
ARCHITECTURE_KEYS = ("num_layers", "hidden_dim", "ffn_dim", "num_heads", "max_degree", "spatial_pos_max",
                     "max_distance", "edge_encoding", "multi_hop_max_dist", "layer_norm", "embedding_norm",
                     "final_norm", "head")


class OfficialImportError(CheckpointError):
    """The file is not an official Graphormer checkpoint we can map exactly; the message says why."""


class _Placeholder:
    """Stands for any object in the file that is not a tensor or a plain container."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:  # items of a pickled dict subclass
        pass

    def append(self, item: Any) -> None:  # items of a pickled list subclass
        pass

    def extend(self, items: Any) -> None:
        pass


_ALLOWED = {
    ("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_tensor"), ("torch", "Size"), ("builtins", "set"), ("builtins", "frozenset"),
    ("argparse", "Namespace"),  # fairseq's args: a plain attribute container
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "torch" and name.endswith("Storage")):
            return super().find_class(module, name)
        return type(name, (_Placeholder,), {"__module__": "official_import.placeholder"})


class _RestrictedPickle:
    """A ``pickle_module`` for ``torch.load``: tensors and containers only (see the module docstring)."""

    Unpickler = _RestrictedUnpickler
    __name__ = "graphormer_urpe.run.official_import"

    @staticmethod
    def load(file: io.IOBase, **kwargs: Any) -> Any:
        return _RestrictedUnpickler(file, **kwargs).load()


def read_official(path: str | Path) -> tuple[dict[str, torch.Tensor], str, dict[str, Any]]:
    """The weights, the layout (``v1`` or ``v2``) and the hyper-parameters found (may be empty).

    Raises:
        OfficialImportError: unreadable file, or neither layout.
    """
    path = Path(path)
    if not path.is_file():
        raise OfficialImportError(f"{path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # fairseq objects inside: the restricted unpickler instead
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_RestrictedPickle)
        except Exception as error:
            raise OfficialImportError(f"{path} is not a readable torch file: {error}") from None
    if not isinstance(checkpoint, Mapping):
        raise OfficialImportError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dictionary")
    if "model" in checkpoint and isinstance(checkpoint["model"], Mapping):
        state, version = dict(checkpoint["model"]), "v2"
        hparams = {}
        args = checkpoint.get("args")
        if isinstance(args, argparse.Namespace):
            hparams = vars(args)
    elif "state_dict" in checkpoint and isinstance(checkpoint["state_dict"], Mapping):
        state, version = dict(checkpoint["state_dict"]), "v1"
        found = checkpoint.get("hyper_parameters")
        hparams = dict(found) if isinstance(found, Mapping) else {}  # Lightning's AttributeDict: a placeholder
    else:
        raise OfficialImportError(f"{path}: neither a fairseq checkpoint ('model', official v2) nor a Lightning "
                                  f"checkpoint ('state_dict', official v1.0); top-level keys: {sorted(checkpoint)}")
    if version == "v1" and any(k.startswith("model.") for k in state):
        raise OfficialImportError(f"{path} is a checkpoint of this project, not an official one: use it directly")
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, version, hparams


class _Keys:
    """Takes tensors out of the official state dict by name, so that leftovers can be named."""

    def __init__(self, state: Mapping[str, torch.Tensor]) -> None:
        self.left = dict(state)
        self.missing: list[str] = []

    def take(self, name: str) -> torch.Tensor:
        if name not in self.left:
            self.missing.append(name)
            return torch.zeros(0)
        return self.left.pop(name)

    def has(self, name: str) -> bool:
        return name in self.left


def _rows(table: torch.Tensor, rows: Sequence[int], name: str) -> torch.Tensor:
    """``table[rows]`` with row 0 (padding) zero; stops when the official table is too small."""
    needed = max(rows)
    if needed >= table.shape[0]:
        raise OfficialImportError(f"official {name} has {table.shape[0]} rows, but our featurisation needs row "
                                  f"{needed}: the checkpoint was trained on other features (check --node_vocab / "
                                  "--edge_vocab)")
    out = table[list(rows)].clone()
    out[PAD_ID] = 0.0
    return out


def _feature_rows(vocab: Sequence[int], shift: int, name: str) -> list[int]:
    """Official rows of our categorical table: row 0 padding, then ``512 f + v + shift`` per column."""
    if any(v > OFFICIAL_FEATURE_OFFSET for v in vocab):
        raise OfficialImportError(f"{name}: official tables hold at most {OFFICIAL_FEATURE_OFFSET} values per "
                                  f"column, the vocabulary is {list(vocab)}")
    return [PAD_ID] + [OFFICIAL_FEATURE_OFFSET * f + v + shift for f, size in enumerate(vocab) for v in range(size)]


def convert(state: Mapping[str, torch.Tensor], version: str, hparams: Mapping[str, Any] | None = None, *,
            node_vocab: Sequence[int] = ATOM_VOCAB, edge_vocab: Sequence[int] = BOND_VOCAB,
            multi_hop_max_dist: int | None = None) -> tuple[GraphormerConfig, dict[str, torch.Tensor], list[str]]:
    """Our encoder config and :class:`~graphormer_urpe.model.graphormer.Graphormer` state dict for
    official weights (sizes from the shapes, see the module docstring for the mapping).

    Args:
        state: the official weights (``state_dict`` of v1.0, ``model`` of v2).
        version: ``v1`` or ``v2``.
        hparams: hyper-parameters found in the file (``multi_hop_max_dist``, dropouts), may be empty.
        node_vocab, edge_vocab: our featurisation's values per column (ogb's for molecules).
        multi_hop_max_dist: K; default: the file's, else official 5.

    Returns:
        The config (RPE), the state dict, and the official keys dropped because official never applies them.

    Raises:
        OfficialImportError: missing or unknown keys, shapes that do not fit, tables too small.
    """
    hparams = dict(hparams or {})
    keys = _Keys(state)
    if version == "v1":
        node, bias, layer_prefix = "", "", "layers"
        names = dict(q="self_attention.linear_q", k="self_attention.linear_k", v="self_attention.linear_v",
                     out="self_attention.output_layer", norm1="self_attention_norm", norm2="ffn_norm",
                     fc1="ffn.layer1", fc2="ffn.layer2")
    elif version == "v2":
        node, bias = "encoder.graph_encoder.graph_node_feature.", "encoder.graph_encoder.graph_attn_bias."
        layer_prefix = "encoder.graph_encoder.layers"
        names = dict(q="self_attn.q_proj", k="self_attn.k_proj", v="self_attn.v_proj", out="self_attn.out_proj",
                     norm1="self_attn_layer_norm", norm2="final_layer_norm", fc1="fc1", fc2="fc2")
    else:
        raise OfficialImportError(f"unknown official layout {version!r}")
    for name in (f"{node}atom_encoder.weight", f"{bias}spatial_pos_encoder.weight"):
        if not keys.has(name):
            raise OfficialImportError(f"not an official Graphormer {version} checkpoint: no {name}")

    atom = keys.take(f"{node}atom_encoder.weight")
    hidden = atom.shape[1]
    spatial = keys.take(f"{bias}spatial_pos_encoder.weight")
    heads = spatial.shape[1]
    depth = len(layer_prefix.split("."))
    num_layers = len({k.split(".")[depth] for k in keys.left if k.startswith(layer_prefix + ".")})
    multi_hop = keys.has(f"{bias}edge_dis_encoder.weight")
    hops = multi_hop_max_dist or int(hparams.get("multi_hop_max_dist") or OFFICIAL_MULTI_HOP_MAX_DIST)

    ours: dict[str, torch.Tensor] = {}
    ours["nodes.features.weight"] = _rows(atom, _feature_rows(node_vocab, 2, "atom_encoder"), "atom_encoder")
    in_degree = keys.take(f"{node}in_degree_encoder.weight")
    out_degree = keys.take(f"{node}out_degree_encoder.weight")
    for mine, degrees in (("in_degree", in_degree), ("out_degree", out_degree)):
        if len(degrees):  # (a missing table is reported with the other missing keys)
            ours[f"nodes.{mine}.weight"] = _rows(degrees, range(len(degrees)), f"{mine}_encoder")
    ours["graph_token.weight"] = keys.take(f"{node}graph_token.weight")

    unreachable = spatial.shape[0] > OFFICIAL_UNREACHABLE_ROW
    if unreachable:  # 512 rows: every distance and "unreachable" (row 511)
        distance = dict(spatial_pos_max=None, max_distance=MAX_STORED_DISTANCE)
        spd_rows = [d + 1 for d in range(MAX_STORED_DISTANCE + 1)] + [OFFICIAL_UNREACHABLE_ROW]
    else:  # a smaller table (v1.0 ZINC: 40 rows) cannot hold unreachable pairs: official would fail on them
        distance = dict(spatial_pos_max=min(spatial.shape[0] - 1, MAX_SPATIAL_POS_MAX), max_distance=None)
        spd_rows = [d + 1 for d in range(distance["spatial_pos_max"])]
    virtual = keys.take(f"{bias}graph_token_virtual_distance.weight")
    table = torch.cat([spatial.new_zeros(1, heads), virtual.reshape(1, -1), spatial[spd_rows]])
    table[PAD_RELATION] = 0.0
    ours["relative_bias.table.weight"] = table

    edges = keys.take(f"{bias}edge_encoder.weight")
    ours["edge_bias.features.weight"] = _rows(edges, _feature_rows(edge_vocab, 3 if multi_hop else 2, "edge_encoder"),
                                              "edge_encoder")
    if multi_hop:
        dis = keys.take(f"{bias}edge_dis_encoder.weight").reshape(-1, heads, heads)
        if hops > dis.shape[0]:
            raise OfficialImportError(f"multi_hop_max_dist {hops} exceeds the {dis.shape[0]} hop matrices of "
                                      "edge_dis_encoder")
        ours["edge_bias.hop_weight"] = dis[:hops].clone()
    padding = {name: float(t[0].abs().max()) for name, t in
               (("atom_encoder", atom), ("edge_encoder", edges), ("spatial_pos_encoder", spatial),
                ("in_degree_encoder", in_degree), ("out_degree_encoder", out_degree)) if t.numel() and t[0].any()}
    if padding:
        log.warning("official padding rows are not zero (%s); they are zero here. Official predictions with the edge "
                    "table's padding row != 0 depend on the longest path in the batch", ", ".join(
                        f"{k}: max |w| {v:.3g}" for k, v in padding.items()))

    for i in range(num_layers):
        prefix = f"{layer_prefix}.{i}."
        for part in ("weight", "bias"):
            ours[f"layers.{i}.attention.qkv.{part}"] = torch.cat(
                [keys.take(f"{prefix}{names[p]}.{part}") for p in ("q", "k", "v")])
            for mine, theirs in (("attention.out", "out"), ("attention_norm", "norm1"), ("ffn_norm", "norm2"),
                                 ("ffn.0", "fc1"), ("ffn.3", "fc2")):
                ours[f"layers.{i}.{mine}.{part}"] = keys.take(f"{prefix}{names[theirs]}.{part}")
    ffn_dim = ours["layers.0.ffn.0.weight"].shape[0] if num_layers else hidden

    dropped = []
    if version == "v1":
        for part in ("weight", "bias"):
            ours[f"final_norm.{part}"] = keys.take(f"final_ln.{part}")
        head = "out_proj" if keys.has("out_proj.weight") else "downstream_out_proj"
        for part in ("weight", "bias"):
            ours[f"head.{part}"] = keys.take(f"{head}.{part}")
        variant = dict(layer_norm="pre", embedding_norm=False, final_norm=True, head="linear")
        dropout = dict(dropout=hparams.get("dropout_rate"), attention_dropout=hparams.get("attention_dropout_rate"),
                       input_dropout=hparams.get("intput_dropout_rate"))  # sic, v1.0's spelling
    else:
        embedding_norm = keys.has("encoder.graph_encoder.emb_layer_norm.weight")
        if embedding_norm:
            for part in ("weight", "bias"):
                ours[f"embedding_norm.{part}"] = keys.take(f"encoder.graph_encoder.emb_layer_norm.{part}")
        pre_layernorm = keys.has("encoder.graph_encoder.final_layer_norm.weight")  # built only with pre_layernorm
        for name in [k for k in keys.left if k.startswith(("encoder.graph_encoder.final_layer_norm.",
                                                             "encoder.masked_lm_pooler."))]:
            dropped.append(name)
            keys.left.pop(name)
        for mine, theirs in (("transform", "lm_head_transform_weight"), ("norm", "layer_norm")):
            for part in ("weight", "bias"):
                ours[f"head.{mine}.{part}"] = keys.take(f"encoder.{theirs}.{part}")
        ours["head.out.weight"] = keys.take("encoder.embed_out.weight")
        ours["head.bias"] = keys.take("encoder.lm_output_learned_bias").reshape(1)
        variant = dict(layer_norm="pre" if pre_layernorm else "post", embedding_norm=embedding_norm,
                       final_norm=False, head="v2")
        dropout = dict(dropout=hparams.get("dropout"), attention_dropout=hparams.get("attention_dropout"),
                       activation_dropout=hparams.get("act_dropout"))
    problems = []
    if keys.missing:
        problems.append(f"missing official keys: {', '.join(keys.missing)}")
    if keys.left:
        problems.append(f"unknown keys: {', '.join(sorted(keys.left))}")
    if problems:
        raise OfficialImportError(f"not an official Graphormer {version} checkpoint we can map: " + "; ".join(problems))

    num_outputs = ours["head.out.weight" if version == "v2" else "head.weight"].shape[0]
    config = GraphormerConfig(
        node_vocab=list(node_vocab), edge_vocab=list(edge_vocab), num_outputs=num_outputs, num_layers=num_layers,
        hidden_dim=hidden, ffn_dim=ffn_dim, num_heads=heads, attention="rpe", max_degree=in_degree.shape[0] - 2,
        edge_encoding="multi_hop" if multi_hop else "single_hop", multi_hop_max_dist=hops if multi_hop else 1,
        **distance, **variant, **{k: float(v) for k, v in dropout.items() if v is not None},
    )
    problems = state_dict_problems(ours, Graphormer(config).state_dict())
    if problems:
        raise OfficialImportError("official weights do not fit the inferred model:\n" + "\n".join(
            f"  - {p}" for p in problems))
    return config, ours, dropped


def import_checkpoint(source: str | Path, output: str | Path, *, node_vocab: Sequence[int] = ATOM_VOCAB,
                      edge_vocab: Sequence[int] = BOND_VOCAB, multi_hop_max_dist: int | None = None,
                      task: str = "regression") -> GraphormerConfig:
    """Read an official checkpoint, write ours (``output``) and its config (``output`` with ``.yaml``).

    The checkpoint holds ``state_dict`` (``model.*``, plus ``target_mean`` 0 and ``target_std`` 1 for
    ``task="regression"``: the official model predicts in the data's units) and
    ``hyper_parameters.encoder``.
    """
    state, version, hparams = read_official(source)
    config, weights, dropped = convert(state, version, hparams, node_vocab=node_vocab, edge_vocab=edge_vocab,
                                       multi_hop_max_dist=multi_hop_max_dist)
    model_state = {f"model.{k}": v.float().contiguous() for k, v in weights.items()}
    if task == "regression":
        model_state["target_mean"] = torch.zeros(config.num_outputs)
        model_state["target_std"] = torch.ones(config.num_outputs)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    encoder = {k: v for k, v in dataclasses.asdict(config).items() if k in ARCHITECTURE_KEYS}
    torch.save({"state_dict": model_state, "hyper_parameters": {"encoder": dataclasses.asdict(config)},
                "official_import": {"source": str(source), "layout": version, "dropped": dropped}}, output)
    output.with_suffix(".yaml").write_text(yaml.safe_dump(
        {"model": {"init_args": {"encoder": encoder}}, "data": {"init_args": {"path_order": "official"}}},
        sort_keys=False))
    note = f"; dropped (never applied by official code): {', '.join(dropped)}" if dropped else ""
    log.info("official %s checkpoint %s -> %s (+ %s): %d layers, width %d, %d heads, %s%s", version, source, output,
             output.with_suffix(".yaml").name, config.num_layers, config.hidden_dim, config.num_heads,
             config.edge_encoding, note)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphormer_urpe.run.official_import",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("source", help="official checkpoint: v1.0 Lightning .ckpt or v2 fairseq .pt")
    parser.add_argument("output", help="our checkpoint to write; its config goes next to it with .yaml")
    parser.add_argument("--node_vocab", type=int, nargs="+", default=list(ATOM_VOCAB),
                        help="values per node-feature column of the data (default: ogb's atom features)")
    parser.add_argument("--edge_vocab", type=int, nargs="+", default=list(BOND_VOCAB),
                        help="values per edge-feature column of the data (default: ogb's bond features)")
    parser.add_argument("--multi_hop_max_dist", type=int, default=None,
                        help="hops of the edge encoding (default: the checkpoint's, else official 5)")
    parser.add_argument("--task", choices=["regression", "classification"], default="regression",
                        help="the task the checkpoint will start (regression adds target statistics 0 and 1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        import_checkpoint(args.source, args.output, node_vocab=args.node_vocab, edge_vocab=args.edge_vocab,
                          multi_hop_max_dist=args.multi_hop_max_dist, task=args.task)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
