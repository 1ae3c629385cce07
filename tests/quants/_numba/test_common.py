"""quants/_numba/common.py: what every kernel shares (ggml's fp16 and nearest_int bit tricks,
the float level rounding, moving sub-blocks into lanes, the lane buffer)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from dflash_gguf.quants.base import nearest_int as numpy_nearest_int  # noqa: E402

from .. import c_ports  # noqa: E402


def test_numba_fp16_conversion_matches_numpy():
    # ggml_compute_fp32_to_fp16 / fp16_to_fp32 as compiled: against NumPy's casts (identical to
    # ggml's for every non-NaN input) on a stride through all 2^32 float32 bit patterns plus
    # every pattern around the fp16 rounding/subnormal/overflow boundaries.
    from dflash_gguf.quants._numba import common

    strided = np.arange(0, 1 << 32, 4093, dtype=np.uint64)
    edges = np.array([0x33000000, 0x33800000, 0x38800000, 0x387FE000, 0x477FE000, 0x477FF000, 0x7F800000], np.uint64)
    near = (edges[:, None] + np.arange(-4096, 4096, dtype=np.int64)[None, :].astype(np.uint64)).reshape(-1)
    u = np.concatenate([strided, near, near | np.uint64(0x80000000)]).astype(np.uint32)
    f = u.view(np.float32)
    f = f[~np.isnan(f)]
    bits, back = common.fp16_convert(f)
    with np.errstate(over="ignore"):  # the overflow to inf is part of what is checked
        want = f.astype(np.float16)
    assert np.array_equal(bits, want.view(np.uint16).astype(np.int64))
    assert np.array_equal(back.view(np.uint32), want.astype(np.float32).view(np.uint32))
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    halves = halves[~np.isnan(halves)].astype(np.float32)
    assert np.array_equal(common.fp16_convert(halves)[1].view(np.uint32), halves.view(np.uint32))


def test_round_clamp_is_nearest_int_clamped():
    # The hot loops' levels (np.rint + two clamps) against ggml's nearest_int clamped, bit for
    # bit, wherever callers use it (|v| <= NEAREST_INT_LIMIT): every half-integer tie (to
    # even), its float32 neighbours, the range's ends, and -0.5 < v < 0, where rint gives -0
    # and the magic sum +0 (the same level once clamped at 0, and harmless below, see common).
    import numba

    from dflash_gguf.quants._numba import common

    @numba.njit(**{**common.JIT_OPTIONS, "cache": False})
    def both(v, lo, hi, got, want):
        for i in range(v.size):
            got[i] = common.round_clamp(v[i], lo, hi)
            want[i] = np.float32(max(lo, min(hi, np.float32(common.nearest_int(v[i])))))

    lim = float(common.NEAREST_INT_LIMIT)
    ties = np.arange(-40.5, 41, 1.0, dtype=np.float32)
    v = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)),
                        np.float32([0.0, -0.0, -0.3, -1e-30, 1e-45, lim, -lim, 4194302.5, -4194302.5]),
                        np.random.default_rng(5).uniform(-70, 70, 20000).astype(np.float32)])
    for lo, hi in ((0, 15), (0, 31), (-32, 31), (-128, 127)):
        got, want = np.empty_like(v), np.empty_like(v)
        both(v, np.float32(lo), np.float32(hi), got, want)
        if lo == 0:  # the Q4_K/Q5_K levels are stored and reused: the same bits, sign of zero included
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        else:
            assert np.array_equal(got, want)


@pytest.mark.parametrize("nsub,lanes", [(32, 32), (16, 64), (32, 64), (16, 16)])
def test_to_lanes_tiles_and_tail(nsub, lanes):
    """common.to_lanes: 8x8 register tiles for whole groups, element by element for the last,
    partial one (zero lanes past the end)."""
    from dflash_gguf.quants._numba.common import to_lanes

    per = 256 // nsub
    nb = 3 * lanes // per + 1
    blocks = np.random.default_rng(5).standard_normal((nb, 256)).astype(np.float32)
    flat = np.concatenate([blocks.reshape(-1), np.zeros(lanes * nsub, np.float32)])
    for b0 in range(0, nb, lanes // per):
        x = np.full((nsub, lanes), np.nan, np.float32)
        to_lanes(blocks, b0, nsub, x)
        lane_major = flat[b0 * 256:b0 * 256 + lanes * nsub].reshape(lanes, nsub)
        assert np.array_equal(x, lane_major.T), b0


def test_nearest_int_is_ggmls_bit_trick():
    # the compiled nearest_int against the numpy one and the scalar port, ties, limits and wraps included
    import numba

    from dflash_gguf.quants._numba import common

    @numba.njit(cache=False)
    def run(v, out):
        for i in range(v.size):
            out[i] = common.nearest_int(v[i])

    v = np.concatenate([np.arange(-40.5, 41, 1.0), [4194303, 4194304, -4194305, 1e30, -1e-45, np.nan, np.inf],
                        np.random.default_rng(9).uniform(-1e7, 1e7, 5000)]).astype(np.float32)
    got = np.empty(v.size, np.int64)
    run(v, got)
    assert np.array_equal(got, numpy_nearest_int(v))
    assert got[:20].tolist() == [c_ports.nearest_int(f) for f in v[:20]]


def test_lane_layout_skews_its_regions():
    from dflash_gguf.quants._numba.common import LANES, lane_layout

    # regions of rows x lanes floats, each followed by 16 floats of skew
    assert lane_layout(2, 3, lanes=8) == ([0, 2 * 8 + 16], 2 * 8 + 16 + 3 * 8 + 16)
    offsets, size = lane_layout(32, 32, 5)
    assert offsets == [0, 32 * LANES + 16, 2 * (32 * LANES + 16)] and size == offsets[2] + 5 * LANES + 16


def test_lane_buffer_is_64_byte_aligned():
    from dflash_gguf.quants._numba.common import lane_buffer

    for size in (1, 100, 4096 + 7):
        b = lane_buffer(size)
        assert b.size == size and b.dtype == np.float32 and b.ctypes.data % 64 == 0
