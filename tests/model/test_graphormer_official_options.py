"""Options that make the model behave as official Graphormer: distance masking and the rows of B and
C (``spatial_pos_max``, ``max_distance``), and the v2 architecture variants (post-LN layers,
embedding LayerNorm, final LayerNorm, v2 head), each with URPE at C = 1 equal to RPE."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import yaml

from graphormer_urpe.configs import CONFIG_DIR
from graphormer_urpe.constants import SPD_RELATION_OFFSET, UNREACHABLE_SPD
from graphormer_urpe.data.batch import collate_graphs
from graphormer_urpe.model.graphormer import Graphormer, GraphormerConfig, V2Head
from graphormer_urpe.testing.graphs import make_record
from graphormer_urpe.testing.tolerance import rounding_tolerance


def path_graph_with_salt(rng: np.random.Generator, n: int = 300):
    """A path 0 - 1 - ... - (n-2) (distances up to 254 stored, longer ones stored as unreachable)
    plus an isolated node n - 1 (a salt ion)."""
    half = np.stack([np.arange(n - 2), np.arange(1, n - 1)])
    return make_record(rng, n, edges=np.concatenate([half, half[::-1]], axis=1))


def build(seed: int = 0, **overrides) -> Graphormer:
    torch.manual_seed(seed)
    config = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=2, **overrides)
    return Graphormer(config).eval()


@pytest.mark.parametrize("spatial_pos_max", [20, 255, None])
def test_spatial_pos_max_masks_exactly_the_documented_pairs(rng: np.random.Generator, spatial_pos_max) -> None:
    record = path_graph_with_salt(rng)
    batch = collate_graphs([record, make_record(rng, 5)])
    net = build(spatial_pos_max=spatial_pos_max, max_distance=30 if spatial_pos_max is None else None)
    relation, key_mask = net.relations(batch)
    spd = torch.from_numpy(record.spd.astype(np.int64))  # (n, n)
    unreachable = spd == UNREACHABLE_SPD
    if spatial_pos_max is None:
        expected_hidden = torch.zeros_like(unreachable)
    else:
        expected_hidden = (spd >= spatial_pos_max) | unreachable
    assert torch.equal(~key_mask[0, 1:, 1:], expected_hidden)
    assert key_mask[0, :, 0].all() and key_mask[0, 0].all()  # the graph token sees and is seen by everyone
    if spatial_pos_max == 255:  # the bug: 255 < 256, so every real distance stays visible
        assert key_mask[0, 1:, 1:][~unreachable].all() and expected_hidden.sum() == unreachable.sum()


@pytest.mark.parametrize("value", [256, 1024, 0, -3])
def test_impossible_spatial_pos_max_stops_naming_the_key_and_range(value: int) -> None:
    with pytest.raises(ValueError, match=r"encoder\.spatial_pos_max=.*from 1 to 255.*or null"):
        GraphormerConfig(spatial_pos_max=value)


def test_max_distance_is_validated() -> None:
    with pytest.raises(ValueError, match=r"encoder\.max_distance=255: must be an integer from 0 to 254"):
        GraphormerConfig(spatial_pos_max=None, max_distance=255)
    with pytest.raises(ValueError, match=r"encoder\.spatial_pos_max is null .* set max_distance"):
        GraphormerConfig(spatial_pos_max=None)


def test_without_masking_distances_share_the_last_row_and_unreachable_has_its_own(rng: np.random.Generator) -> None:
    record = path_graph_with_salt(rng, n=12)
    batch = collate_graphs([record])
    net = build(spatial_pos_max=None, max_distance=4)
    assert net.config.num_relations == SPD_RELATION_OFFSET + 5 + 1
    assert net.relative_bias.table.num_embeddings == net.relative_scale.weight.shape[0] == 8
    relation, key_mask = net.relations(batch)
    spd = torch.from_numpy(record.spd.astype(np.int64))
    expected = torch.where(spd == UNREACHABLE_SPD, SPD_RELATION_OFFSET + 5, SPD_RELATION_OFFSET + spd.clamp(max=4))
    assert torch.equal(relation[0, 1:, 1:], expected)
    assert key_mask.all()
    # the unreachable row is learned: the salt's prediction depends on it
    before = net(batch)
    with torch.no_grad():
        net.relative_bias.table.weight[SPD_RELATION_OFFSET + 5] += 3.0
    assert not torch.allclose(before, net(batch))


def test_masked_layout_is_the_old_default(rng: np.random.Generator) -> None:
    """Defaults: spatial_pos_max 20, rows for distances 0..19, no unreachable row (22 rows)."""
    config = GraphormerConfig()
    assert (config.spatial_pos_max, config.max_distance, config.num_relations) == (20, None, 22)
    assert config.unreachable_relation is None
    net = build()
    assert net.embedding_norm is None and isinstance(net.final_norm, torch.nn.LayerNorm)
    assert isinstance(net.head, torch.nn.Linear) and not any(layer.post_norm for layer in net.layers)


def test_paper_configs_follow_the_official_training_and_the_default_does_not_change() -> None:
    for name in ("zinc_subset", "zinc_full", "pcqm4mv2", "mag240m"):
        encoder = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())["model"]["init_args"]["encoder"]
        assert encoder["spatial_pos_max"] is None and encoder["max_distance"] > 0, name
    qm9 = yaml.safe_load((CONFIG_DIR / "qm9_gap.yaml").read_text())["model"]["init_args"]["encoder"]
    assert "max_distance" not in qm9 and qm9.get("spatial_pos_max", 20) == 20


VARIANTS = [
    dict(layer_norm=ln, embedding_norm=emb, final_norm=final, head=head)
    for ln, emb, final, head in itertools.product(["pre", "post"], [False, True], [True, False], ["linear", "v2"])
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
@pytest.mark.parametrize("distances", [dict(), dict(spatial_pos_max=None, max_distance=6)], ids=["masked", "unmasked"])
def test_urpe_at_c_equal_one_is_rpe_bit_for_bit_in_every_variant(rng: np.random.Generator, variant, distances) -> None:
    batch = collate_graphs([make_record(rng, n, i, connected=i % 2 == 0) for i, n in enumerate([6, 11, 3])])
    rpe = build(attention="rpe", **variant, **distances)
    urpe = build(attention="urpe", seed=1, **variant, **distances)
    result = urpe.load_state_dict(rpe.state_dict(), strict=False)
    assert result.missing_keys == ["relative_scale.weight"] and not result.unexpected_keys
    assert torch.equal(rpe(batch), urpe(batch))
    with torch.no_grad():
        urpe.relative_scale.weight[1:] += 0.5
    assert not torch.allclose(rpe(batch), urpe(batch))


def test_post_norm_layer_and_v2_head_follow_the_official_formulas(rng: np.random.Generator) -> None:
    batch = collate_graphs([make_record(rng, 7)])
    net = build(layer_norm="post", embedding_norm=True, final_norm=False, head="v2")
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    x = net.nodes(batch)
    x = torch.cat([net.graph_token.weight.expand(1, 1, -1), x], 1)
    x = net.embedding_norm(x)
    bias, scale = net.attention_inputs(batch)
    for layer in net.layers:  # v2 graphormer_graph_encoder_layer.py, pre_layernorm=False
        x = layer.attention_norm(x + layer.attention(x, bias, scale))
        x = layer.ffn_norm(x + layer.ffn[3](torch.nn.functional.gelu(layer.ffn[0](x))))
    head = net.head
    assert isinstance(head, V2Head)
    expected = head.norm(torch.nn.functional.gelu(head.transform(x[:, 0]))) @ head.out.weight.T + head.bias
    out = net(batch)
    torch.testing.assert_close(out, expected, **rounding_tolerance(out, expected))


@pytest.mark.parametrize("key,value", [("layer_norm", "sandwich"), ("head", "mlp")])
def test_unknown_variant_names_the_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"encoder\.{key}='{value}'"):
        GraphormerConfig(**{key: value})
