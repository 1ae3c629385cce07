"""quants/base.py: ggml's bit tricks, the order-exact reductions, the registry and quantize_array's
chunking and NaN/inf guard. Expected values are worked out by hand from ggml-quants.c, or come
from a literal scalar loop written here."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES

from dflash_gguf.errors import QuantizationError
from dflash_gguf.quants import quantize
from dflash_gguf.quants.base import (
    first_absmax, fp16_bytes, fp16_round, nearest_int, quantize_array, reduce_rows, registered, seq_sum,
    trunc_to_int8_bits,
)

F32 = np.float32


def test_nearest_int_rounds_half_to_even_and_wraps_like_the_c_trick():
    # (bits(f + 1.5*2^23) & 0x7fffff) - 0x400000, by hand:
    # 2.5 -> 2, 3.5 -> 4, -0.5 -> 0, -1.5 -> -2 (ties to even, as the float add rounds);
    # 4194304 + 12582912 = 2^24, mantissa 0 -> -4194304 (the wrap past the limit);
    # -4194305 + 12582912 = 8388607 = 1.(22 ones) * 2^22: mantissa 8388606 -> 4194302;
    # NaN + x = the quiet NaN 0x7fc00000: mantissa 0x400000 -> 0.
    f = F32([2.5, 3.5, -0.5, -1.5, 4194303, 4194304, -4194305, np.nan])
    assert nearest_int(f).tolist() == [2, 4, 0, -2, 4194303, -4194304, 4194302, 0]


def test_nearest_int_is_rint_inside_the_limit():
    rng = np.random.default_rng(0)
    f = np.concatenate([rng.uniform(-4194303, 4194303, 10000), rng.uniform(-40, 40, 10000),
                        np.arange(-40.5, 41, 1.0)]).astype(np.float32)
    assert np.array_equal(nearest_int(f), np.rint(f).astype(np.int64))


def test_trunc_to_int8_bits_is_the_x86_cast():
    # (int8_t)v on x86-64: cvttss2si to int32 (INT32_MIN, low byte 0, when out of range or NaN),
    # then the low byte: 127.9 -> 127, -1.5 -> -1 = 255, 300.7 -> 300 = 44, -128.2 -> -128 = 128,
    # 2147483520 (the largest float32 below 2^31) -> 0x7fffff80 -> 128, 3e9/NaN/-inf -> 0.
    v = F32([127.9, -1.5, 300.7, -128.2, 2147483520.0, 3e9, np.nan, -np.inf])
    assert trunc_to_int8_bits(v).tolist() == [127, 255, 44, 128, 128, 0, 0, 0]


def test_seq_sum_is_sequential():
    # 1 + 2^25 rounds back to 2^25 in float32, so only left-to-right order gives 0 here.
    a = np.zeros((32, 3), np.float32)
    a[0] = 1
    a[1] = 2.0**25
    a[2] = -(2.0**25)
    assert seq_sum(a).tolist() == [0.0, 0.0, 0.0]
    assert seq_sum(a[:, :1]).tolist() == [0.0]  # the single-column path too
    neg = np.full((16, 2), -0.0, np.float32)
    assert np.signbit(seq_sum(neg, from_zero=False)).all() and not np.signbit(seq_sum(neg)).any()


def test_seq_sum_matches_a_c_loop_on_random_columns():
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((32, 50)) * np.exp(rng.uniform(-15, 15, (32, 50)))).astype(np.float32)
    want = np.empty(50, np.float32)
    for c in range(50):
        s = F32(0)
        for v in a[:, c]:
            s = F32(s + v)
        want[c] = s
    assert np.array_equal(seq_sum(a).view(np.uint32), want.view(np.uint32))
    assert np.array_equal(seq_sum(np.asfortranarray(a)).view(np.uint32), want.view(np.uint32))  # the loop path


@pytest.mark.parametrize("cols", [32, 16, 24, 1])
def test_reduce_rows_is_the_ufunc_reduce(cols):
    rng = np.random.default_rng(cols)
    a = rng.standard_normal((97, cols)).astype(np.float32)
    for uf in (np.maximum, np.minimum):
        assert np.array_equal(reduce_rows(uf, a), uf.reduce(a, axis=1))
        strided = np.repeat(a, 2, axis=1)[:, ::2]  # not C-contiguous: the plain reduce
        assert np.array_equal(reduce_rows(uf, strided), uf.reduce(a, axis=1))


def _first_absmax_loop(row):
    # if (amax < fabsf(v)) { amax = fabsf(v); max = v; }  from amax = max = 0
    amax = mx = F32(0)
    for v in row:
        if amax < abs(v):
            amax, mx = abs(v), v
    return amax, mx


@pytest.mark.parametrize("axis", [0, 1])
def test_first_absmax_is_the_first_value_of_largest_magnitude(axis):
    rng = np.random.default_rng(2)
    rows = rng.integers(-3, 4, (200, 8)).astype(np.float32)  # many +-ties
    rows[0] = [3, -3, 0, 0, 0, 0, 0, 0]
    rows[1] = [-3, 3, 0, 0, 0, 0, 0, 0]
    rows[2] = 0
    rows[3] = -0.0
    want = [_first_absmax_loop(r) for r in rows]
    amax, mx = first_absmax(rows if axis == 1 else np.ascontiguousarray(rows.T), axis=axis)
    assert amax.tolist() == [w[0] for w in want]
    assert mx.view(np.uint32).tolist() == [np.float32(w[1]).view(np.uint32) for w in want]  # +0, never -0
    assert mx[0] == 3 and mx[1] == -3


def test_fp16_bytes_and_round():
    # IEEE halves by hand: 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff, 65520 -> tie to even -> inf 0x7c00,
    # 2^-24 = 0x0001 (smallest subnormal), 2^-25 -> tie to even -> 0, -0.0 = 0x8000
    v = F32([1.0, -2.0, 65504, 65520, 2.0**-24, 2.0**-25, -0.0])
    with np.errstate(over="ignore"):
        b = fp16_bytes(v)
        r = fp16_round(v)
    assert b.shape == (7, 2)
    assert (b[:, 0].astype(np.uint16) | (b[:, 1].astype(np.uint16) << 8)).tolist() == [
        0x3C00, 0xC000, 0x7BFF, 0x7C00, 0x0001, 0x0000, 0x8000]
    assert r.tolist()[:3] == [1.0, -2.0, 65504.0] and np.isinf(r[3]) and r[5] == 0


def test_registry_matches_ggml_sizes():
    reg = registered()
    assert {t.name for t in reg} >= {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}
    x = np.random.default_rng(3).standard_normal((2, 256)).astype(np.float32)
    for t, cls in reg.items():
        assert (cls.block_size, cls.type_size) == GGML_QUANT_SIZES[t]
        out = cls.quantize_blocks(x.reshape(-1, cls.block_size).copy())
        assert out.dtype == np.uint8 and out.shape == (512 // cls.block_size, cls.type_size), t.name


def test_non_finite_first_index_across_chunks_and_threads():
    from dflash_gguf.quants.q8_0 import Q8_0

    x = np.ones((64, 256), np.float32)
    x[50, 7] = np.nan
    x[10, 3] = np.inf
    old = Q8_0.chunk_values
    try:
        Q8_0.chunk_values = 256
        with pytest.raises(QuantizationError, match=r"\(10, 3\)"):
            quantize(x, "q8_0", name="w", threads=2)
    finally:
        Q8_0.chunk_values = old


def test_quantize_array_refuses_what_is_not_a_float_array():
    from dflash_gguf.quants.q8_0 import Q8_0

    with pytest.raises(QuantizationError, match="0-d"):
        quantize_array(Q8_0, np.float32(1.0), name="s")
    with pytest.raises(QuantizationError, match="cannot quantize dtype bool"):
        quantize_array(Q8_0, np.zeros((1, 32), bool), name="b")
    with pytest.raises(QuantizationError, match="'w'.*last dimension 33"):
        quantize_array(Q8_0, np.zeros((1, 33), np.float32), name="w")


def test_quantize_array_row_chunks_of_a_strided_input_are_the_contiguous_bytes():
    # a transposed view is chunked by whole rows (no full copy); integers are converted as floats
    from dflash_gguf.quants.q8_0 import Q8_0

    x = np.random.default_rng(4).integers(-100, 100, (64, 96)).astype(np.int32)
    old = Q8_0.chunk_values
    try:
        Q8_0.chunk_values = 64
        got = quantize_array(Q8_0, x.T, threads=3)
    finally:
        Q8_0.chunk_values = old
    assert np.array_equal(got, quantize_array(Q8_0, np.ascontiguousarray(x.T, dtype=np.float32), threads=1))
