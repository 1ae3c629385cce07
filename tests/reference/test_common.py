"""reference/common.py's new primitives against values computed by hand: the sink softmax and
RoPE over a slice of the head, NeoX and interleaved (GPT-J) pairing; and its shortcuts (one-call
RMSNorm, rolled RoPE, bare mm, masked GQA on CPU) bit for bit against the forms transformers runs."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.errors import ConfigError  # noqa: E402
from dflash_gguf.reference.common import (  # noqa: E402
    RMSNorm, RopeSpec, RopeTable, apply_rope, apply_rope_rolled, apply_rope_slice, attend, attend_with_sinks, inv_freq,
    linear, repeat_kv, visibility_mask,
)

E = math.e
# one head, one query q = (1, 0), keys (1, 0) and (0, 1), values (1, 2) and (3, −1), scale 1
Q = torch.tensor([[[[1.0, 0.0]]]])
K = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
V = torch.tensor([[[[1.0, 2.0], [3.0, -1.0]]]])


def test_sink_joins_the_denominator_only():
    # scores (1, 0), sink logit 0: p = (e, 1) / (e + 1 + 1); the sink's own share (1/(e+2)) is dropped
    p1, p2 = E / (E + 2), 1 / (E + 2)
    assert (p1, p2) == pytest.approx((0.5761168847658291, 0.21194155761708544), abs=1e-15)
    out = attend_with_sinks(Q, K, V, None, 1.0, torch.tensor([0.0]))
    torch.testing.assert_close(out, torch.tensor([[[p1 * 1 + p2 * 3, p1 * 2 - p2 * 1]]]))  # (1.21194, 0.94029)
    # a sink of −inf is plain softmax: (e, 1) / (e + 1)
    out = attend_with_sinks(Q, K, V, None, 1.0, torch.tensor([-math.inf]))
    torch.testing.assert_close(out, torch.tensor([[[(E + 3) / (E + 1), (2 * E - 1) / (E + 1)]]]))
    torch.testing.assert_close(out, attend(Q, K, V, None, 1.0))
    # the sink is a raw logit: the scale multiplies q·k, not the sink (scale 2: scores (2, 0))
    out = attend_with_sinks(Q, K, V, None, 2.0, torch.tensor([1.0]))
    z = E**2 + 1 + E
    torch.testing.assert_close(out, torch.tensor([[[(E**2 + 3) / z, (2 * E**2 - 1) / z]]]))


def test_sinks_with_a_mask_and_grouped_heads():
    # key 0 hidden: scores (−inf, 0) + sink 0 -> half the mass on v2, half on the sink
    mask = torch.tensor([[False, True]])
    out = attend_with_sinks(Q, K, V, mask, 1.0, torch.tensor([0.0]))
    torch.testing.assert_close(out, torch.tensor([[[1.5, -0.5]]]))
    # two query heads share the kv head; each uses its own sink (0 and −inf)
    q2 = torch.cat([Q, Q], dim=1)
    out = attend_with_sinks(q2, K, V, None, 1.0, torch.tensor([0.0, -math.inf]))[0, 0]
    p1, p2 = E / (E + 2), 1 / (E + 2)
    torch.testing.assert_close(out, torch.tensor([p1 + 3 * p2, 2 * p1 - p2, (E + 3) / (E + 1), (2 * E - 1) / (E + 1)]))


def test_vllm_rotary_dim_frequencies():
    # vLLM: inv_freq = base^(−2i/R) over the rotated width R, not the head
    inv, scale = inv_freq(RopeSpec(8, 100.0, rotary_dim=4))
    torch.testing.assert_close(inv, torch.tensor([1.0, 0.1]))
    assert scale == 1.0
    # z-lab's rule (rotary_dim None) ignores the factor for default rope: the whole head
    inv, _ = inv_freq(RopeSpec(8, 100.0, partial_rotary_factor=0.5))
    torch.testing.assert_close(inv, torch.tensor([1.0, 100 ** -0.25, 0.1, 100 ** -0.75]))
    with pytest.raises(ConfigError, match="even"):
        inv_freq(RopeSpec(8, 100.0, rotary_dim=3))


def _rotated(interleaved: bool) -> torch.Tensor:
    x = torch.arange(1.0, 9.0).view(1, 1, 1, 8)  # (1, 2, …, 8), head_dim 8
    table = RopeTable(RopeSpec(8, 100.0, rotary_dim=4, interleaved=interleaved), 2, torch.float64, torch.device("cpu"))
    cos, sin = table(1, 2)  # position 1: angles 1 and 0.1
    return apply_rope_slice(x.double(), cos, sin, interleaved)[0, 0, 0]


def test_partial_neox_rotates_halves_of_the_slice():
    c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(0.1), math.sin(0.1)
    # pairs (x0, x2) at angle 1 and (x1, x3) at angle 0.1; x4..x7 pass through
    want = [1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2, 5, 6, 7, 8]
    torch.testing.assert_close(_rotated(False), torch.tensor(want, dtype=torch.float64))


def test_partial_interleaved_rotates_adjacent_pairs():
    c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(0.1), math.sin(0.1)
    # GPT-J: pairs (x0, x1) at angle 1 and (x2, x3) at angle 0.1
    want = [1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3 * c2 - 4 * s2, 4 * c2 + 3 * s2, 5, 6, 7, 8]
    torch.testing.assert_close(_rotated(True), torch.tensor(want, dtype=torch.float64))


def test_full_width_slice_is_the_zlab_rotation():
    x = torch.randn(1, 2, 3, 8, generator=torch.Generator().manual_seed(0))
    cos, sin = RopeTable(RopeSpec(8, 1e4), 3, torch.float32, torch.device("cpu"))(0, 3)
    assert torch.equal(apply_rope_slice(x, cos, sin, False), apply_rope(x, cos, sin))


def _hf_rms_norm(x, weight, eps):
    """transformers' Qwen3RMSNorm.forward, verbatim."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_transformers_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(0)
    norm = RMSNorm(64, 1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(64, generator=g) + 0.5)
    # rows of a block, per-head rows of a projection, and a transposed (non-contiguous) view
    for x in (torch.randn(8, 64, generator=g), torch.randn(8, 4, 64, generator=g),
              torch.randn(4, 8, 64, generator=g).transpose(0, 1)):
        x = (x * 3).to(dtype)
        assert torch.equal(norm(x), _hf_rms_norm(x, norm.weight, 1e-6))


def test_rolled_rope_is_rotate_half_bit_for_bit():
    table = RopeTable(RopeSpec(64, 1e4), 40, torch.float32, torch.device("cpu"))
    x = torch.randn(1, 4, 8, 64, generator=torch.Generator().manual_seed(1)).transpose(1, 2)  # strided, as projected
    cos, sin = table(30, 34)
    rolled = apply_rope_rolled(x, *table.rolled(30, 34))
    assert torch.equal(rolled, apply_rope(x, cos, sin))
    assert not torch.equal(rolled, x)  # it did rotate


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 7, 8])
def test_linear_is_the_module_bit_for_bit(rows, bias):
    g = torch.Generator().manual_seed(rows)
    layer = torch.nn.Linear(96, 48, bias=bias)
    x = torch.randn(rows, 96, generator=g)
    with torch.no_grad():
        assert torch.equal(linear(x, layer), layer(x[None])[0])


@pytest.mark.parametrize("causal, window", [(True, None), (True, 3), (False, 3)])
def test_masked_grouped_attention_on_cpu_is_the_repeated_one(causal, window):
    # transformers repeats K/V whenever there is a mask; attend lets CPU SDPA group the heads instead
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(1, 8, 5, 16, generator=g), torch.randn(1, 2, 40, 16, generator=g), torch.randn(1, 2, 40, 16, generator=g)
    mask = visibility_mask(5, 40, causal=causal, window=window, device="cpu")
    repeated = torch.nn.functional.scaled_dot_product_attention(
        q, repeat_kv(k, 4), repeat_kv(v, 4), attn_mask=mask[None, None], scale=0.25)
    assert torch.equal(attend(q, k, v, mask, 0.25), repeated.transpose(1, 2).reshape(1, 5, 128))
