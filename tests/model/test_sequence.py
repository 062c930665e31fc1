"""The sequence Transformer: T5 buckets, Toeplitz relation ids, RPE/URPE equivalence, Theorem 2 on sequences."""

from __future__ import annotations

import math

import pytest
import torch

from graphormer_urpe.constants import SEQUENCE_RELATION_OFFSET
from graphormer_urpe.model.sequence import (
    SequenceConfig,
    SequenceTransformer,
    bucket_relations,
    offset_relations,
    t5_relative_bucket,
)
from graphormer_urpe.testing.tolerance import rounding_tolerance


def reference_bucket(offset: int, num_buckets: int, max_distance: int) -> int:
    """Mesh TensorFlow's ``_relative_position_bucket(bidirectional=True)`` for one int, written as a scalar loop."""
    half = num_buckets // 2
    bucket = half if offset > 0 else 0
    n = abs(offset)
    exact = half // 2
    if n < exact:
        return bucket + n
    large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (half - exact))
    return bucket + min(large, half - 1)


def small_config(**overrides) -> SequenceConfig:
    base = dict(
        vocab_size=7,
        num_classes=5,
        length=12,
        num_layers=2,
        hidden_dim=16,
        ffn_dim=32,
        num_heads=4,
        attention="urpe",
        num_buckets=8,
        max_distance=16,
    )
    return SequenceConfig(**{**base, **overrides})


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Large random weights everywhere (C excluded), so no property holds by accident of a small init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_scale" not in name:
                p.copy_(torch.randn(p.shape, generator=generator))


def test_t5_bucket_hand_values():
    # defaults: 16 buckets per direction, 8 exact, log-spaced up to 128
    offsets = torch.tensor([0, -1, -7, -8, -12, -127, -128, -1000, 1, 7, 8, 12, 128])
    expected = [0, 1, 7, 8, 9, 15, 15, 15, 17, 23, 24, 25, 31]
    assert t5_relative_bucket(offsets, 32, 128).tolist() == expected


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 16), (16, 40), (4, 3)])
def test_t5_bucket_matches_reference_loop(num_buckets, max_distance):
    offsets = torch.arange(-300, 301)
    buckets = t5_relative_bucket(offsets, num_buckets, max_distance)
    assert buckets.tolist() == [reference_bucket(int(k), num_buckets, max_distance) for k in offsets]
    assert buckets.min() >= 0 and buckets.max() < num_buckets
    # non-positive and positive offsets use disjoint halves; |k| never moves to a nearer bucket
    assert set(buckets[offsets <= 0].tolist()).isdisjoint(buckets[offsets > 0].tolist())
    assert (buckets[301:].diff() >= 0).all() and (buckets[:301].flip(0).diff() >= 0).all()


def test_t5_bucket_rejects_bad_sizes():
    with pytest.raises(ValueError, match="even"):
        t5_relative_bucket(torch.arange(3), 7, 128)
    with pytest.raises(ValueError, match="max_distance"):
        t5_relative_bucket(torch.arange(3), 32, 8)


@pytest.mark.parametrize("relations", [offset_relations(9), bucket_relations(9, 8, 6)], ids=["offset", "bucket"])
def test_relation_index_is_toeplitz(relations):
    n = relations.shape[0]
    assert torch.equal(relations[1:, 1:], relations[:-1, :-1])  # (i, j) and (i + 1, j + 1) agree
    for offset in range(-n + 1, n):
        assert relations.diagonal(offset).unique().numel() == 1  # entries with j - i = offset


def test_offset_relations_one_id_per_signed_offset():
    n = 6
    relations = offset_relations(n)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert torch.equal(relations, j - i + (n - 1) + SEQUENCE_RELATION_OFFSET)
    assert relations.unique().tolist() == list(range(SEQUENCE_RELATION_OFFSET, SEQUENCE_RELATION_OFFSET + 2 * n - 1))


def test_scale_matrix_is_toeplitz_with_two_n_minus_one_values():
    model = SequenceTransformer(small_config())
    with torch.no_grad():
        model.relative_scale.weight.uniform_(0.0, 2.0)
    _, scale = model.attention_inputs(12)  # (1, H, n, n)
    scale = scale[0]
    assert torch.equal(scale[:, 1:, 1:], scale[:, :-1, :-1])
    assert scale[0].unique().numel() == 2 * 12 - 1


def test_shorter_sequence_uses_the_top_left_block():
    model = SequenceTransformer(small_config())
    bias_full, scale_full = model.attention_inputs(12)
    bias, scale = model.attention_inputs(5)
    assert torch.equal(bias, bias_full[..., :5, :5]) and torch.equal(scale, scale_full[..., :5, :5])
    assert torch.equal(bucket_relations(12, 8, 16)[:5, :5], bucket_relations(5, 8, 16))
    with pytest.raises(ValueError, match="longer than length"):
        model.attention_inputs(13)


@pytest.mark.parametrize("seed", [0, 1])
def test_urpe_with_unit_scale_equals_rpe(seed):
    rpe = SequenceTransformer(small_config(attention="rpe"))
    randomize(rpe, seed)
    urpe = SequenceTransformer(small_config(attention="urpe"))
    missing, unexpected = urpe.load_state_dict(rpe.state_dict(), strict=False)
    assert missing == ["relative_scale.weight"] and unexpected == []
    tokens = torch.randint(7, (3, 12), generator=torch.Generator().manual_seed(seed))
    assert torch.equal(urpe(tokens), rpe(tokens))
    with torch.no_grad():
        urpe.relative_scale.weight.mul_(1.5)
    assert not torch.allclose(urpe(tokens), rpe(tokens))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rpe_maps_a_constant_sequence_to_identical_outputs(seed):
    """Theorem 2: rows of softmax(QK^T + B) sum to 1, so identical tokens stay identical whatever B is."""
    model = SequenceTransformer(small_config(attention="rpe"))
    randomize(model, seed)
    out = model(torch.full((1, 12), 3))[0]  # (T, classes)
    torch.testing.assert_close(out, out[:1].expand_as(out), **rounding_tolerance(out))


def test_urpe_tells_positions_of_a_constant_sequence_apart():
    """Proposition 4's construction: an upper-triangular Toeplitz C makes row sums (n - i) / n differ."""
    model = SequenceTransformer(small_config(attention="urpe"))
    randomize(model, 0)
    with torch.no_grad():
        model.relative_bias.table.weight.zero_()
        offsets = torch.arange(-11, 12)  # C row for offset j - i
        model.relative_scale.weight[SEQUENCE_RELATION_OFFSET:] = (offsets >= 0).float().unsqueeze(1)
    out = model(torch.full((1, 12), 3))[0]
    gaps = torch.cdist(out, out) + torch.eye(12) * 1e9
    assert gaps.min() > 1e-3


def test_no_positional_encoding_is_permutation_equivariant():
    model = SequenceTransformer(small_config(attention="none"))
    randomize(model, 0)
    assert model.relative_bias is None and model.relative_scale is None
    tokens = torch.randint(7, (2, 12), generator=torch.Generator().manual_seed(0))
    order = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    permuted, original = model(tokens[:, order]), model(tokens)
    torch.testing.assert_close(permuted, original[:, order], **rounding_tolerance(permuted, original))


def test_output_shape_and_tables():
    config = small_config()
    model = SequenceTransformer(config)
    assert model(torch.zeros(2, 12, dtype=torch.long)).shape == (2, 12, 5)
    assert model.relative_bias.table.num_embeddings == SEQUENCE_RELATION_OFFSET + config.num_buckets
    assert model.relative_scale.weight.shape == (SEQUENCE_RELATION_OFFSET + 2 * 12 - 1, 4)
    assert torch.equal(model.relative_scale.weight[SEQUENCE_RELATION_OFFSET:], torch.ones(23, 4))
