"""quants/iq4.py (IQ4_NL, IQ4_XS without an importance matrix) against ggml.

Two references: llama.cpp's live libggml-base.so (``ggml_quantize_chunk`` with imatrix NULL,
and ``ggml_get_type_traits(type)->to_float`` for dequantization), skipped cleanly where it is
not built; and, always, a scalar line-by-line port of ``best_index_int8`` and
``quantize_row_iq4_nl_impl`` (NULL weights, ntry = 7) run on a few blocks. The data sit on
the edges the C code has: exact ties between kvalues levels (in the trial search and in the
final levels), amax at GROUP_MAX_EPS, scale 0 blocks (-0 in IQ4_XS's d), subnormal, tiny and
huge inputs whose sums overflow, plus a few MB of random rows.
"""
from __future__ import annotations


import numpy as np
import pytest

from dflash_gguf.quants import dequantize, quantize, resolve_qtype, row_nbytes
from dflash_gguf.quants.iq4 import KVALUES, best_index_int8, best_value, fit_scales

from .test_q3_k import ggml_quantize, ggml_to_float  # the live library's quantizer and to_float
from .test_quants import _ggml_base, describe_mismatch

F32 = np.float32
TYPES = ["iq4_nl", "iq4_xs"]
MIDPOINTS = (KVALUES[:-1] + KVALUES[1:]) / F32(2)  # exact: sums of small integers, halved
_KV = [int(v) for v in KVALUES]


# --- a scalar port of the C, one statement per line -------------------------------------------
def c_best_index_int8(x) -> int:
    x = F32(x)
    if x <= _KV[0]:
        return 0
    if x >= _KV[15]:
        return 15
    ml, mu = 0, 15
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < _KV[mav]:
            mu = mav
        else:
            ml = mav
    return mu - 1 if x - F32(_KV[mu - 1]) < F32(_KV[mu]) - x else mu


def c_nearest_int(f) -> int:
    v = np.array([F32(f) + F32(12582912.0)], np.float32).view(np.int32)[0]
    return (int(v) & 0x7FFFFF) - 0x400000


def c_iq4_impl(x: np.ndarray, super_block_size: int) -> bytes:
    """quantize_row_iq4_nl_impl(super_block_size, 32, x, ..., quant_weights=NULL, ntry=7)."""
    ntry, nsub = 7, super_block_size // 32
    L, scales = [0] * super_block_size, [F32(0)] * nsub
    max_scale, amax_scale = F32(0), F32(0)
    for ib in range(nsub):
        xb = [F32(v) for v in x[32 * ib : 32 * ib + 32]]
        weight = [v * v for v in xb]
        amax, mx = F32(0), F32(0)
        for v in xb:
            if abs(v) > amax:
                amax, mx = abs(v), v
        if amax < F32(1e-15):
            scales[ib] = F32(0)
            continue
        d = -mx / F32(_KV[0])
        iscale = F32(1) / d
        sumqx, sumq2 = F32(0), F32(0)
        for j in range(32):
            q = F32(_KV[c_best_index_int8(iscale * xb[j])])
            sumqx += weight[j] * q * xb[j]
            sumq2 += weight[j] * q * q
        d = sumqx / sumq2 if sumq2 > 0 else F32(0)
        best = d * sumqx
        for itry in range(-ntry, ntry + 1):
            iscale = F32(itry + _KV[0]) / mx
            sumqx, sumq2 = F32(0), F32(0)
            for j in range(32):
                q = F32(_KV[c_best_index_int8(iscale * xb[j])])
                sumqx += weight[j] * q * xb[j]
                sumq2 += weight[j] * q * q
            if sumq2 > 0 and sumqx * sumqx > best * sumq2:
                d = sumqx / sumq2
                best = d * sumqx
        scales[ib] = d
        if abs(d) > amax_scale:
            amax_scale, max_scale = abs(d), d
    if nsub == 1:
        head = np.array([scales[0]], np.float32).astype("<f2").tobytes()
        iscale = F32(1) / scales[0] if scales[0] else F32(0)
        L = [c_best_index_int8(iscale * F32(v)) for v in x]
    else:
        d = -max_scale / F32(32)
        iscale = F32(1) / d if d else F32(0)
        scales_h, scales_l = 0, [0] * (nsub // 2)
        for ib in range(nsub):
            lv = max(-32, min(31, c_nearest_int(iscale * scales[ib])))
            dl = d * F32(lv)
            idl = F32(1) / dl if dl else F32(0)
            for j in range(32):
                L[32 * ib + j] = c_best_index_int8(idl * F32(x[32 * ib + j]))
            lv += 32
            scales_l[ib // 2] |= (lv & 0xF) << (4 * (ib % 2))
            scales_h |= (lv >> 4) << (2 * ib)
        head = np.array([d], np.float32).astype("<f2").tobytes() + scales_h.to_bytes(2, "little") + bytes(scales_l)
    qs = bytes(L[32 * i + j] | (L[32 * i + 16 + j] << 4) for i in range(nsub) for j in range(16))
    return head + qs


# --- data -------------------------------------------------------------------------------------
def _tie_blocks(rng: np.random.Generator, n_super: int) -> np.ndarray:
    """Super-blocks of eight 32-value sub-blocks on power-of-two grids. Sub-block 0 holds
    kvalues*c with one -127c: its scale comes out exactly c (each term of sumqx is c times the
    matching term of sumq2), the largest. Sub-block 1 mixes kvalues and ~20 % midpoints times
    c (scale just under c: 6-bit scale -32, dl = c), sub-blocks 2-7 the same times c/2 (6-bit
    scale -16, dl = c/2 exactly), each with one -127c'. Each sub-block's trial itry = 0 has
    id = 1/c' exactly, so the search meets exact ties, and so do IQ4_XS's final levels."""
    c = np.exp2(rng.integers(-12, 4, (n_super, 1, 1))).astype(np.float32)
    y = rng.choice(KVALUES[1:], (n_super, 8, 32))
    mid = rng.random((n_super, 8, 32)) < 0.2  # few enough that the fitted scale stays near c/2
    mid[:, 0] = False
    y[mid] = rng.choice(MIDPOINTS, mid.sum())
    y[np.arange(n_super)[:, None], np.arange(8), rng.integers(0, 32, (n_super, 8))] = -127
    # Half the super-blocks also get sub-block 1 = -(grid with -127): scale exactly -c, so
    # max_scale is decided by `abs_d > amax_scale` keeping the first of +-c.
    neg = np.arange(n_super) % 2 == 1
    y[neg, 1] = -rng.choice(KVALUES[1:], (neg.sum(), 32))
    y[neg, 1, 0] = 127
    swap = neg & (rng.random(n_super) < 0.5)
    y[swap, :2] = y[swap, 1::-1]
    scale = np.where(np.arange(8) < 2, F32(1), F32(0.5))
    return (y * (c * scale[:, None])).astype(np.float32)


def _nl_final_ties(rng: np.random.Generator, n_blocks: int) -> np.ndarray:
    """Gaussian blocks where one value is moved, by a fixed-point iteration, to where the final
    IQ4_NL level sees an exact midpoint: fl(id*x[k]) == m with id = 1/scale of the block as it
    ends up (moving x[k] moves the scale a little, so repeat until it stops moving)."""
    x = rng.standard_normal((n_blocks, 32)).astype(np.float32)
    k = np.argmin(np.abs(x), axis=1)  # a small value: moving it cannot change max
    m = rng.choice(F32([-4.5, 7, 19, -16, -28.5, 31.5]), n_blocks)
    rows = np.arange(n_blocks)
    with np.errstate(all="ignore"):
        for _ in range(8):
            iscale = F32(1) / fit_scales(np.ascontiguousarray(x.T))
            v0 = (m / iscale).astype(np.float32)
            for step in (0, -1, 1, -2, 2, -3, 3):
                cand = (v0.view(np.int32) + np.int32(step)).view(np.float32)
                hit = (iscale * cand == m) & (iscale * x[rows, k] != m)
                x[rows[hit], k[hit]] = cand[hit]
    return x


def _cases(rng: np.random.Generator):
    """(name, float32 values, a multiple of 4096)."""
    n = 1 << 16
    normal = rng.standard_normal(n).astype(np.float32)
    yield "normal 0.02", normal * F32(0.02)
    yield "bf16 weights", ((normal * F32(0.02)).view(np.uint32) & 0xFFFF0000).view(np.float32)
    yield "uniform", rng.uniform(-1, 1, n)
    yield "heavy-tailed", rng.standard_t(2, n)
    out = normal * F32(0.02)
    out[::97] *= F32(200)
    yield "outliers", out
    yield "all-positive", np.abs(normal) + F32(0.01)
    yield "all-negative", -np.abs(normal)
    yield "zeros", np.zeros(8192)
    yield "constant rows", np.repeat(F32([1, -3.5, 0.02, -1e-3, 7e4, 1e-20, -0.0, 2.5e-15]), 4096)
    yield "1e-30 scale", normal * F32(1e-30)
    yield "subnormals", normal * F32(1e-40)
    yield "1e4 scale", normal * F32(1e4)
    sparse = np.zeros(n, np.float32)
    sparse[rng.random(n) < 0.03] = 1
    sparse[rng.random(n) < 0.01] = -1
    yield "sparse ones", sparse
    # amax just below, at and just above GROUP_MAX_EPS (amax < 1e-15f is the zero test)
    eps = F32(1e-15)
    edge = np.stack([np.nextafter(eps, F32(0)), eps, np.nextafter(eps, F32(1))]).astype(np.float32)
    amax = rng.choice(edge, 2048)
    blocks = (rng.uniform(-1, 1, (2048, 32)) * amax[:, None]).astype(np.float32)
    blocks[np.arange(2048), rng.integers(0, 32, 2048)] = amax * rng.choice(F32([1, -1]), 2048)
    yield "amax at GROUP_MAX_EPS", blocks
    yield "level ties", _tie_blocks(rng, 256)
    yield "level ties (final NL)", _nl_final_ties(rng, 2048)
    yield "huge (sums overflow)", normal * F32(1e18)
    yield "extremes", rng.choice(F32([3e38, -3e38, 1e-45, 0, 1, -1e20]), n)
    yield "a scale per block", normal * np.exp(rng.uniform(-40, 40, n // 32)).astype(np.float32).repeat(32)


def _rows(values, ncols: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, np.float32).reshape(-1, ncols))


# --- tests ------------------------------------------------------------------------------------
def test_best_index_int8_is_the_c_search():
    """Every midpoint (an exact tie goes up), its float32 neighbours, the table's values and
    ends, values beyond them, +-0, infinities and NaN (C's search ends at 15)."""
    around = np.concatenate([MIDPOINTS, KVALUES, F32([-127.5, 113.5, -1e30, 1e30, 0, -0.0, 1e-45])])
    x = np.concatenate([around, np.nextafter(around, F32(np.inf)), np.nextafter(around, F32(-np.inf))])
    x = np.concatenate([x, F32([np.inf, -np.inf, np.nan]), np.random.default_rng(1).uniform(-140, 130, 5000)])
    x = x.astype(np.float32)
    want = [c_best_index_int8(v) for v in x]
    with np.errstate(invalid="ignore"):  # inf - inf
        assert best_index_int8(x).tolist() == want
        assert best_value(x).tolist() == KVALUES[want].tolist()
    assert best_index_int8(MIDPOINTS).tolist() == list(range(1, 16))  # ties pick the upper level


@pytest.mark.parametrize("qtype", TYPES)
def test_scalar_c_port(qtype):
    """A few blocks of each case against the scalar port (no library needed)."""
    bs = 32 if qtype == "iq4_nl" else 256
    rng = np.random.default_rng(7)
    for name, values in _cases(np.random.default_rng(11)):
        x = _rows(values, bs)
        pick = x[rng.choice(x.shape[0], 3, replace=False)]
        got = quantize(pick, qtype).reshape(len(pick), -1)
        with np.errstate(all="ignore"):
            want = [c_iq4_impl(row, bs) for row in pick]
        for g, w in zip(got, want):
            assert g.tobytes() == w, f"{name}: " + describe_mismatch(pick, got, np.frombuffer(b"".join(want), np.uint8), qtype)


def test_edge_cases_keep_their_edges():
    """The tie cases really tie: in the search (trial itry = 0's exact id), in the final NL
    levels (fixed point reached) and in IQ4_XS's final levels (dl a power of two, read back
    from the bytes: d = -c/32 is exact in fp16)."""
    cases = dict(_cases(np.random.default_rng(2024)))
    x = _rows(cases["level ties"], 32)
    mx = x[np.arange(len(x)), np.argmax(np.abs(x), axis=1)]
    y = (F32(-127) / mx)[:, None] * x
    assert np.isin(y, MIDPOINTS).sum() > 1000
    x = _rows(cases["level ties (final NL)"], 32)
    with np.errstate(all="ignore"):
        y = (F32(1) / fit_scales(np.ascontiguousarray(x.T)))[:, None] * x
    assert np.isin(y, MIDPOINTS).any(axis=1).sum() > 1000
    xs = _rows(cases["level ties"], 256)
    q = quantize(xs, "iq4_xs").reshape(-1, 136)
    d = q[:, :2].copy().view(np.float16).astype(np.float32)  # exact: d = -c/32, in fp16 range
    ls = ((q[:, 4:8, None] >> np.array([0, 4], np.uint8)) & 0xF).reshape(-1, 8) | (
        ((q[:, 2:4].copy().view("<u2") >> (2 * np.arange(8, dtype=np.uint16))) & 3) << 4)
    dl = (d * (ls.astype(np.float32) - 32)).reshape(-1)
    with np.errstate(divide="ignore"):
        y = np.where(dl != 0, F32(1) / dl, F32(0))[:, None] * xs.reshape(-1, 32)
    assert np.isin(y, MIDPOINTS).sum() > 1000


@pytest.mark.slow
@pytest.mark.parametrize("ncols", [256, 4096])
@pytest.mark.parametrize("qtype", TYPES)
def test_live_ggml_bytes(qtype, ncols):
    lib = _ggml_base()
    for name, values in _cases(np.random.default_rng(2024)):
        x = _rows(values, ncols)
        want = ggml_quantize(lib, x, qtype)
        got = quantize(x, qtype)
        assert got.shape == (x.shape[0], row_nbytes(qtype, ncols))
        assert np.array_equal(got.reshape(-1), want), f"{name}: " + describe_mismatch(x, got, want, qtype)


@pytest.mark.slow
@pytest.mark.parametrize("qtype", TYPES)
def test_live_ggml_bytes_on_megabytes(qtype):
    """4 MiB of float32 per run: Gaussian at many scales, heavy tails, bf16-rounded, uniform."""
    lib = _ggml_base()
    rng = np.random.default_rng()
    q = 1 << 18
    x = np.concatenate([
        rng.standard_normal(q) * np.exp(rng.uniform(-8, 3, q // 4096)).repeat(4096),
        rng.standard_t(2, q), ((rng.standard_normal(q) * 0.02).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32),
        rng.uniform(-1, 1, q),
    ])
    x = _rows(x, 4096)
    want = ggml_quantize(lib, x, qtype)
    got = quantize(x, qtype)
    assert np.array_equal(got.reshape(-1), want), describe_mismatch(x, got, want, qtype)


@pytest.mark.slow
@pytest.mark.parametrize("qtype", TYPES)
def test_live_ggml_dequantize(qtype):
    """dequantize (gguf-py's) of our bytes, and of random blocks with a finite fp16 d (every
    level and 6-bit scale code), equals ggml's to_float bit for bit."""
    lib = _ggml_base()
    rng = np.random.default_rng(5)
    for name, values in _cases(np.random.default_rng(2024)):
        x = _rows(values, 4096)
        q = quantize(x, qtype)
        with np.errstate(invalid="ignore"):  # an fp16 d that overflowed to inf, times a 0 scale
            got = dequantize(q, qtype, x.shape).reshape(-1)
        want = ggml_to_float(lib, q, qtype, x.size)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    bs, ts = (32, 18) if qtype == "iq4_nl" else (256, 136)
    raw = rng.integers(0, 256, (4096, ts), dtype=np.uint8)
    d = rng.integers(0, 0x7C00, 4096).astype(np.uint16) | (rng.integers(0, 2, 4096).astype(np.uint16) << 15)
    raw[:, :2] = d.astype("<u2").view(np.uint8).reshape(-1, 2)
    n = raw.shape[0] * bs
    got = dequantize(raw, qtype, (n,))
    want = ggml_to_float(lib, raw, qtype, n)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("qtype", TYPES)
def test_zero_blocks_and_threads(qtype):
    """All-zero blocks: IQ4_NL stores d = +0, IQ4_XS d = -max_scale/32 = -0 (fp16 0x8000), the
    6-bit scales 32 and every level best_index_int8(0) = 8. Threads/chunking change nothing."""
    q = quantize(np.zeros((2, 512), np.float32), qtype).reshape(-1, 18 if qtype == "iq4_nl" else 136)
    if qtype == "iq4_nl":
        assert (q[:, :2] == 0).all() and (q[:, 2:] == 0x88).all()
    else:
        assert (q[:, 0] == 0).all() and (q[:, 1] == 0x80).all()
        assert (q[:, 2:4] == 0xAA).all() and (q[:, 4:8] == 0).all() and (q[:, 8:] == 0x88).all()
    x = (np.random.default_rng(3).standard_normal((40, 1024)) * 0.02).astype(np.float32)
    want = quantize(x, qtype, threads=1)
    from dflash_gguf.quants.base import registered

    cls = registered()[resolve_qtype(qtype)]
    old = cls.chunk_values
    try:
        cls.chunk_values = 2048
        assert np.array_equal(quantize(x, qtype, threads=3), want)
        assert np.array_equal(quantize(x[:, ::1].astype(np.float64), qtype), want)
    finally:
        cls.chunk_values = old
