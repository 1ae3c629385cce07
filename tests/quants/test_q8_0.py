"""quants/q8_0.py (the numpy path of quantize_row_q8_0_ref): against gguf-py's Q8_0, which is
byte-exact with ggml, and blocks worked out by hand."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants

from dflash_gguf.quants import quantize
from dflash_gguf.quants.q8_0 import Q8_0

F32 = np.float32


def test_matches_gguf_py_where_it_is_exact():
    # gguf-py 0.19's Q8_0 is byte-exact with ggml; ours must agree on fresh data too.
    import gguf

    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 512)) * rng.uniform(1e-3, 10, (64, 1))).astype(np.float32)
    assert np.array_equal(quantize(x, "q8_0"), gguf.quantize(x, GGMLQuantizationType.Q8_0))


def test_numpy_blocks_match_gguf_py_across_scales():
    # the class's own numpy path (whatever backend quantize() would pick), scales 1e-30 .. 1e30
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((2000, 32)) * np.exp(rng.uniform(-69, 69, (2000, 1)))).astype(np.float32)
    x[::7] = np.round(x[::7] / np.abs(x[::7]).max(axis=1, keepdims=True) * 127) + 0.5  # a half-integer grid
    x[1::9] = 0
    with np.errstate(all="ignore"):
        assert np.array_equal(Q8_0.quantize_blocks(x), gguf_quants.quantize(x, GGMLQuantizationType.Q8_0))


def test_halves_round_away_from_zero():
    # amax 127 -> d = 1, id = 1: qs = roundf(x), halves away from zero (not to even);
    # 0.49999997 (the float below 0.5) -> 0
    x = np.zeros((1, 32), np.float32)
    x[0, :8] = [127, 0.5, -0.5, 1.5, 2.5, -126.5, np.nextafter(F32(0.5), F32(0)), -2.5]
    out = Q8_0.quantize_blocks(x)
    assert out[0, :2].tolist() == [0x00, 0x3C]  # fp16(1.0)
    assert out[0, 2:10].view(np.int8).tolist() == [127, 1, -1, 2, 3, -127, 0, -3]
    assert not out[0, 10:].any()


def test_an_overflowing_inverse_gives_zero_bytes():
    # amax 1e-40: d = amax/127 ~ 7.9e-43 != 0, so id = 1/d = inf; x*id is +-inf (or NaN for 0),
    # and (int8_t)roundf(+-inf) is INT32_MIN's low byte on x86-64: 0. fp16(d) is 0 too.
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [1e-40, -1e-40, 5e-41]
    with np.errstate(all="ignore"):
        assert not Q8_0.quantize_blocks(x).any()
