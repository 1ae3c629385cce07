"""quants/floats.py: F32 / F16 / BF16 as block-size-1 "quantizers", against gguf-py's BF16 and
halves and bfloat16s worked out by hand."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

from dflash_gguf.quants.floats import BF16, F16, F32 as F32Quant

F32 = np.float32


def _u16(b: np.ndarray) -> list[int]:
    return b.reshape(-1, 2).copy().view("<u2").reshape(-1).tolist()


def test_f32_is_the_little_endian_bytes():
    out = F32Quant.quantize_blocks(np.array([[1.0], [-2.5], [0.0]], np.float32))
    assert out.dtype == np.uint8 and out.shape == (3, 4)
    # 1.0 = 0x3f800000, -2.5 = 0xc0200000
    assert out.tolist() == [[0, 0, 0x80, 0x3F], [0, 0, 0x20, 0xC0], [0, 0, 0, 0]]


def test_f16_rounds_to_nearest_even_with_subnormals_and_overflow():
    # by hand: 1/3 = 0x3555 (0x3eaaaaab: mantissa 0x2aaaab >> 13 = 0x155, rest 0xaab < half);
    # 65504 = 0x7bff, 65519.99 -> 0x7bff, 65520 (tie) -> even -> inf 0x7c00;
    # 2^-24 = 0x0001, 2^-25 (tie) -> 0, 3 * 2^-25 (tie between 1 and 2) -> 2; -0.0 = 0x8000
    v = F32([1 / 3, 65504, 65519.99, 65520, 2.0**-24, 2.0**-25, 3 * 2.0**-25, -0.0, -1.0])
    with np.errstate(over="ignore"):
        out = F16.quantize_blocks(v.reshape(-1, 1))
    assert out.shape == (9, 2)
    assert _u16(out) == [0x3555, 0x7BFF, 0x7BFF, 0x7C00, 0x0001, 0x0000, 0x0002, 0x8000, 0xBC00]


def test_bf16_rounds_the_top_half_to_nearest_even():
    # 0x3f808000: exactly half way, 0x3f80 is even -> 0x3f80; 0x3f818000: half way, 0x3f81 odd -> 0x3f82;
    # 0x3f808001: above half -> 0x3f81; 0x7f7fffff (largest float) rounds up into inf 0x7f80;
    # 0x00000001 (smallest subnormal) -> 0, no flush of the kept subnormals (0x00010000 stays).
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x00000001, 0x00010000, 0x80000000,
                     0xFF800000], np.uint32)
    out = BF16.quantize_blocks(bits.view(np.float32).reshape(-1, 1))
    assert _u16(out) == [0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x0000, 0x0001, 0x8000, 0xFF80]


def test_bf16_matches_gguf_py_on_a_stride_through_every_float():
    u = np.arange(0, 1 << 32, 65537, dtype=np.uint64).astype(np.uint32)
    f = u.view(np.float32)
    f = f[~np.isnan(f)]  # NaN never reaches a quantizer (refused first)
    want = gguf_quants.quantize(f.reshape(-1, 1), T.BF16)
    got = BF16.quantize_blocks(f.reshape(-1, 1))
    assert np.array_equal(got.reshape(-1), want.view(np.uint8).reshape(-1))


def test_f16_matches_gguf_py():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(4096) * np.exp(rng.uniform(-20, 12, 4096))).astype(np.float32)
    with np.errstate(over="ignore"):
        want = gguf_quants.quantize(x.reshape(-1, 1), T.F16)  # gguf-py returns float16 values
        got = F16.quantize_blocks(x.reshape(-1, 1))
    assert np.array_equal(got.reshape(-1), want.view(np.uint8).reshape(-1))
