"""quants/q2_k.py (Q2_K, numpy path) against ggml.

As test_q3_k.py (whose cases and live-library helpers this shares): the live libggml-base.so
(``ggml_quantize_chunk`` with imatrix NULL, i.e. quantize_row_q2_K_ref, and to_float) where
it is built, and always a scalar line-by-line port of make_qkx2_quants(use_mad=true) and
quantize_row_q2_K_ref on a few blocks.
"""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.quants import dequantize, quantize, row_nbytes
from dflash_gguf.quants.base import fp16_round
from dflash_gguf.quants.q2_k import Q2_K
from dflash_gguf.quants.q4_k import make_qkx2_quants
from dflash_gguf.quants.q4_k import qkx2_levels

from .c_ports import _quiet, fp16_bits, fp16_value, nearest_int
from .test_q3_k import (
    cases,
    edge_blocks,
    ggml_quantize,
    ggml_to_float,
    megabytes,
    pack_2bit,
    rows,
)
from .test_quants import _ggml_base, describe_mismatch

F32 = np.float32
QTYPE = "q2_K"
LEVELS = range(4)


# --- the C, one statement per line --------------------------------------------------------------
@_quiet
def c_make_qkx2_quants_mad(n, nmax, x, weights, rmin, rdelta, nstep):
    """make_qkx2_quants(..., use_mad=true): (scale, *the_min, L)."""
    mn = mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        mn = min(mn, x[i])
        mx = max(mx, x[i])
        sum_w += weights[i]
        sum_x += weights[i] * x[i]
    if mn > 0:
        mn = F32(0)
    if mx == mn:
        return F32(0), -mn, [0] * n
    iscale = F32(nmax) / (mx - mn)
    scale = F32(1) / iscale
    best_error = F32(0)
    L = [max(0, min(nmax, nearest_int(iscale * (x[i] - mn)))) for i in range(n)]
    for i in range(n):
        best_error += weights[i] * abs(scale * F32(L[i]) + mn - x[i])
    for step in range(nstep + 1):
        iscale = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (mx - mn)
        sum_l = sum_l2 = sum_xl = F32(0)
        laux = [max(0, min(nmax, nearest_int(iscale * (x[i] - mn)))) for i in range(n)]
        for i in range(n):
            w, l = weights[i], F32(laux[i])
            sum_l += w * l
            sum_l2 += w * l * l
            sum_xl += w * l * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = F32(0)
                this_scale = sum_xl / sum_l2
            cur_error = F32(0)
            for i in range(n):
                cur_error += weights[i] * abs(this_scale * F32(laux[i]) + this_min - x[i])
            if cur_error < best_error:
                L, best_error, scale, mn = laux, cur_error, this_scale, this_min
    return scale, -mn, L


@_quiet
def c_quantize_row_q2_K(x: np.ndarray) -> np.ndarray:
    out = []
    for b in np.asarray(x, np.float32).reshape(-1, 256):
        L, scales, mins = [0] * 256, [F32(0)] * 16, [F32(0)] * 16
        max_scale = max_min = F32(0)
        for j in range(16):
            xs = list(b[16 * j:16 * j + 16])
            scales[j], mins[j], L[16 * j:16 * j + 16] = c_make_qkx2_quants_mad(16, 3, xs, [abs(v) for v in xs], -0.5, 0.1, 15)
            max_scale = max(max_scale, scales[j])
            max_min = max(max_min, mins[j])
        sc = [0] * 16
        d_bits = dmin_bits = fp16_bits(F32(0))
        if max_scale > 0:
            iscale = F32(15) / max_scale
            sc = [nearest_int(iscale * s) & 0xFF for s in scales]  # int -> uint8_t
            d_bits = fp16_bits(max_scale / F32(15))
        if max_min > 0:
            iscale = F32(15) / max_min
            sc = [(s | (nearest_int(iscale * m) << 4)) & 0xFF for s, m in zip(sc, mins)]
            dmin_bits = fp16_bits(max_min / F32(15))
        for j in range(16):
            d = fp16_value(d_bits) * F32(sc[j] & 0xF)
            if not d:
                continue
            dm = fp16_value(dmin_bits) * F32(sc[j] >> 4)
            for ii in range(16):
                L[16 * j + ii] = max(0, min(3, nearest_int((b[16 * j + ii] + dm) / d)))
        out.append([*sc, *pack_2bit(L), d_bits & 0xFF, d_bits >> 8, dmin_bits & 0xFF, dmin_bits >> 8])
    return np.array(out, np.uint8)


def _q2_subblock_d(y: np.ndarray) -> np.ndarray:
    """fp16(d) * (sc & 0xF) per sub-block (nb, 16) of block_q2_K bytes y (nb, 84)."""
    d = y[:, 80:82].copy().view(np.float16).astype(np.float32)
    with np.errstate(invalid="ignore"):
        return d * (y[:, :16] & 0xF).astype(np.float32)


def _q2_decode(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fp16(d)*(sc & 0xF), fp16(dmin)*(sc >> 4)) per sub-block: what the requantization uses."""
    y = q.reshape(-1, 84)
    dmin = y[:, 82:84].copy().view(np.float16).astype(np.float32)
    with np.errstate(invalid="ignore"):
        return _q2_subblock_d(y), dmin * (y[:, :16] >> 4).astype(np.float32)


def _d_division_blocks() -> np.ndarray:
    """Blocks whose max_scale s is sub-block 0's (the others are zero) and where the C's
    d = fp16(s/15) differs from fp16(s*(1/15)): a true division, literally."""
    x = np.random.default_rng(3).standard_normal((16, 1 << 17)).astype(np.float32)
    with np.errstate(all="ignore"):
        s = make_qkx2_quants(x, np.abs(x), 3, -0.5, 0.1, 15, use_mad=True).scale
    hit = np.flatnonzero(fp16_round(s / F32(15)) != fp16_round(s * (F32(1) / F32(15))))
    assert hit.size >= 5, "the search found too few blocks where the two formulas differ"
    out = np.zeros((hit.size, 256), np.float32)
    out[:, :16] = x[:, hit].T
    return out


def _q2_edges():
    return edge_blocks(QTYPE, _q2_decode, LEVELS, [("d = fp16(max_scale/15)", _d_division_blocks())])


# --- tests ------------------------------------------------------------------------------------
def test_make_qkx2_quants_mad_is_the_c_loop():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((16, 120)) * np.exp(rng.uniform(-12, 12, 120))).astype(np.float32)
    x[:, 0] = 3.0  # constant but positive: min > 0 becomes 0, so not flat
    x[:, 1] = 0.0  # flat
    x[:, 2] = -2.0  # flat and negative
    x[:, 3] = np.abs(x[:, 3]) + 10  # positive only: this_min > 0 -> 0
    x[:, 4] = rng.integers(0, 4, 16)  # on the level grid
    x[:, 5] = 0
    x[3, 5] = -1.5  # one value (zero weights elsewhere)
    w = np.abs(x)
    with np.errstate(all="ignore"):
        fit = make_qkx2_quants(x, w, 3, -0.5, 0.1, 15, use_mad=True)
    levels = qkx2_levels(x, fit, np.arange(x.shape[1]), 3)
    for c in range(x.shape[1]):
        scale, the_min, L = c_make_qkx2_quants_mad(16, 3, list(x[:, c]), list(w[:, c]), -0.5, 0.1, 15)
        assert F32(fit.scale[c]).view(np.uint32) == F32(scale).view(np.uint32), c
        assert F32(fit.the_min[c]).view(np.uint32) == F32(the_min).view(np.uint32), c
        assert levels[:, c].tolist() == L, c


def test_blocks_match_the_c_port():
    rng = np.random.default_rng(13)
    x = np.concatenate([rows(v, 256)[:1] for _, v in cases(rng, LEVELS, 4096)])
    with np.errstate(all="ignore"):
        got = Q2_K.quantize_blocks(x)
    want = c_quantize_row_q2_K(x)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"blocks {bad.tolist()} differ from the C port"


def test_zero_blocks_and_threads():
    q = quantize(np.zeros((2, 512), np.float32), QTYPE).reshape(-1, 84)
    assert (q == 0).all()  # scales 0, L = 0, d = dmin = +0
    x = (np.random.default_rng(3).standard_normal((40, 1024)) * 0.02).astype(np.float32)
    want = quantize(x, QTYPE, threads=1)
    old = Q2_K.chunk_values
    try:
        Q2_K.chunk_values = 2048
        assert np.array_equal(quantize(x, QTYPE, threads=3), want)
    finally:
        Q2_K.chunk_values = old


def test_edge_blocks_match_the_c_port():
    for name, x in _q2_edges():
        x = x[:96]
        assert np.array_equal(quantize(x, QTYPE), c_quantize_row_q2_K(x)), name


@pytest.mark.slow
def test_live_ggml_bytes_on_edge_blocks():
    lib = _ggml_base()
    for name, x in _q2_edges():
        want = ggml_quantize(lib, x, QTYPE)
        got = quantize(x, QTYPE)
        assert np.array_equal(got.reshape(-1), want), f"{name}: " + describe_mismatch(x, got, want, QTYPE)


@pytest.mark.slow
@pytest.mark.parametrize("ncols", [256, 4096])
def test_live_ggml_bytes(ncols):
    lib = _ggml_base()
    kept = 0
    for name, values in cases(np.random.default_rng(2024), LEVELS):
        x = rows(values, ncols)
        want = ggml_quantize(lib, x, QTYPE)
        got = quantize(x, QTYPE)
        assert got.shape == (x.shape[0], row_nbytes(QTYPE, ncols))
        assert np.array_equal(got.reshape(-1), want), f"{name}: " + describe_mismatch(x, got, want, QTYPE)
        xs = x.reshape(-1, 16)
        varied = (xs.max(axis=1) != np.minimum(xs.min(axis=1), 0)).reshape(-1, 16)  # not flat
        kept += int(((_q2_subblock_d(want.reshape(-1, 84)) == 0) & varied).sum())
    assert kept > 1000, "too few sub-blocks kept make_qkx2_quants' own levels (d*sc == 0)"


@pytest.mark.slow
def test_the_c_port_is_ggml():
    lib = _ggml_base()
    x = np.concatenate([rows(v, 256)[:1] for _, v in cases(np.random.default_rng(5), LEVELS, 4096)])
    assert np.array_equal(c_quantize_row_q2_K(x).reshape(-1), ggml_quantize(lib, x, QTYPE))


@pytest.mark.slow
def test_live_ggml_bytes_on_megabytes():
    lib = _ggml_base()
    x = megabytes(np.random.default_rng())
    want = ggml_quantize(lib, x, QTYPE)
    got = quantize(x, QTYPE)
    assert np.array_equal(got.reshape(-1), want), describe_mismatch(x, got, want, QTYPE)


@pytest.mark.slow
def test_live_ggml_dequantize():
    """dequantize (gguf-py's) of our bytes, and of random blocks with finite fp16 d and dmin
    (every level and 4-bit scale/min code), equals ggml's to_float bit for bit."""
    lib = _ggml_base()
    for name, values in cases(np.random.default_rng(2024), LEVELS):
        x = rows(values, 4096)
        q = quantize(x, QTYPE)
        with np.errstate(invalid="ignore"):  # an fp16 d/dmin that overflowed to inf, times a 0 code
            got = dequantize(q, QTYPE, x.shape).reshape(-1)
        want = ggml_to_float(lib, q, QTYPE, x.size)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    raw = np.random.default_rng(5).integers(0, 256, (4096, 84), dtype=np.uint8)
    dd = raw[:, 80:84].copy().view("<u2")
    raw[:, 80:84] = np.where((dd & 0x7C00) == 0x7C00, dd & 0x83FF, dd).view(np.uint8)  # no inf/NaN
    got = dequantize(raw, QTYPE, (4096 * 256,))
    want = ggml_to_float(lib, raw, QTYPE, 4096 * 256)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
