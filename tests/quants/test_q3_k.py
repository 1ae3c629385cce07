"""quants/q3_k.py (Q3_K, numpy path) against ggml.

Two references: llama.cpp's live libggml-base.so (``ggml_quantize_chunk`` with imatrix NULL,
which runs quantize_row_q3_K_ref, and ``ggml_get_type_traits(type)->to_float``), skipped
cleanly where it is not built; and, always, a scalar line-by-line port of make_q3_quants and
quantize_row_q3_K_ref run on a few blocks. The cases (shared with test_q2_k.py) sit on the
C code's edges: values on the level grid and exact ties, flat and zero sub-blocks, amax
around GROUP_MAX_EPS, fp16 d underflowing to 0 (make_q3_quants' own levels are stored) or
overflowing to inf, squares that overflow to inf/NaN, subnormals, plus a few MB of random rows.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from dflash_gguf.quants import dequantize, quantize, resolve_qtype, row_nbytes
from dflash_gguf.quants.q3_k import Q3_K, make_q3_quants

from .c_ports import GROUP_MAX_EPS, _quiet, fp16_bits, fp16_value, nearest_int
from .test_quants import _ggml_base, describe_mismatch

F32 = np.float32
QTYPE = "q3_K"


# --- the C, one statement per line --------------------------------------------------------------
def c_make_q3_quants(x, nmax=4):
    """make_q3_quants(n, nmax, x, L, do_rmse=true): (scale, L)."""
    n = len(x)
    mx = amax = F32(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < GROUP_MAX_EPS:
        return F32(0), [0] * n
    iscale = F32(-nmax) / mx
    L = [0] * n
    sumlx = suml2 = F32(0)
    for i in range(n):
        L[i] = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
        w = x[i] * x[i]
        sumlx += w * x[i] * F32(L[i])
        suml2 += w * F32(L[i]) * F32(L[i])
    for _ in range(5):
        n_changed = 0
        for i in range(n):
            w = x[i] * x[i]
            slx = sumlx - w * x[i] * F32(L[i])
            if slx > 0:
                sl2 = suml2 - w * F32(L[i]) * F32(L[i])
                new_l = max(-nmax, min(nmax - 1, nearest_int(x[i] * sl2 / slx)))
                if new_l != L[i]:
                    slx += w * x[i] * F32(new_l)
                    sl2 += w * F32(new_l) * F32(new_l)
                    if sl2 > 0 and slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i], sumlx, suml2 = new_l, slx, sl2
                        n_changed += 1
        if not n_changed:
            break
    return (sumlx / suml2 if suml2 > F32(0) else F32(0)), [v + nmax for v in L]


def pack_2bit(L) -> list[int]:
    return [L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6)
            for j in (0, 128) for l in range(32)]


@_quiet
def c_quantize_row_q3_K(x: np.ndarray) -> np.ndarray:
    out = []
    for b in np.asarray(x, np.float32).reshape(-1, 256):
        L, scales = [0] * 256, [F32(0)] * 16
        max_scale = amax = F32(0)
        for j in range(16):
            scales[j], L[16 * j:16 * j + 16] = c_make_q3_quants(list(b[16 * j:16 * j + 16]))
            if abs(scales[j]) > amax:
                amax, max_scale = abs(scales[j]), scales[j]
        sc = [0] * 12
        d_bits = fp16_bits(F32(0))
        if max_scale:
            iscale = F32(-32) / max_scale
            for j in range(16):
                l = (nearest_int(iscale * scales[j]) + 128) % 256 - 128  # int -> int8_t
                l = max(-32, min(31, l)) + 32
                if j < 8:
                    sc[j] = l & 0xF
                else:
                    sc[j - 8] |= (l & 0xF) << 4
                sc[j % 4 + 8] |= (l >> 4) << (2 * (j // 4))
            d_bits = fp16_bits(F32(1) / iscale)
        for j in range(16):
            s = sc[j] & 0xF if j < 8 else sc[j - 8] >> 4
            s = (s | (((sc[8 + j % 4] >> (2 * (j // 4))) & 3) << 4)) - 32
            d = fp16_value(d_bits) * F32(s)
            if not d:
                continue
            for ii in range(16):
                L[16 * j + ii] = max(-4, min(3, nearest_int(b[16 * j + ii] / d))) + 4
        hmask = [0] * 32
        for j in range(256):
            if L[j] > 3:
                hmask[j % 32] |= 1 << (j // 32)
                L[j] -= 4
        out.append([*hmask, *pack_2bit(L), *sc, d_bits & 0xFF, d_bits >> 8])
    return np.array(out, np.uint8)


# --- the live library -------------------------------------------------------------------------
class _TypeTraits(ctypes.Structure):
    _fields_ = [  # struct ggml_type_traits (ggml.h)
        ("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64), ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t), ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def ggml_quantize(lib, x: np.ndarray, qtype: str) -> np.ndarray:
    t = resolve_qtype(qtype)
    want = np.zeros(x.shape[0] * row_nbytes(t, x.shape[1]), np.uint8)
    lib.ggml_quantize_init(int(t))
    lib.ggml_quantize_chunk(int(t), x.ctypes.data, want.ctypes.data, 0, x.shape[0], x.shape[1], None)
    return want


def ggml_to_float(lib, data: np.ndarray, qtype: str, n: int) -> np.ndarray:
    t = resolve_qtype(qtype)
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    traits = lib.ggml_get_type_traits(int(t)).contents
    assert traits.type_name.decode().lower() == t.name.lower() and traits.to_float
    data = np.ascontiguousarray(data, np.uint8)
    out = np.empty(n, np.float32)
    _TO_FLOAT(traits.to_float)(data.ctypes.data, out.ctypes.data, n)
    return out


def _bf16(v: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def cases(rng: np.random.Generator, levels: range, n: int = 32 * 4096):
    """(name, n float32 values): whole rows for either 256 or 4096 columns. ``levels``: the
    type's integer levels (-4..3 for Q3_K, 0..3 for Q2_K), for the grid and tie cases."""
    normal = rng.standard_normal(n)
    yield "normal sigma 0.02", normal * 0.02
    yield "uniform", rng.uniform(-1, 1, n)
    yield "heavy-tailed t2", rng.standard_t(2, n)
    out = normal * 0.02
    out[::97] *= 200
    yield "outliers every 97th x200", out
    yield "all positive", np.abs(normal) * 0.02
    yield "all positive, offset", np.abs(normal) + 3
    yield "all negative", -np.abs(normal) * 0.02
    yield "zeros", np.zeros(n)
    yield "constant rows", np.repeat(rng.choice([1, -3.5, 0.02, -1e-20, 7e4, 1e-40, 0], n // 4096), 4096)
    yield "constant sub-blocks", np.repeat(rng.choice([1, -3.5, 0.02, -1e-20, 7e4, 1e-40, 0], n // 16), 16)
    yield "1e-30 scale", normal * 1e-30
    yield "around GROUP_MAX_EPS", normal * np.repeat(np.exp(rng.uniform(-36, -33, n // 16)), 16)
    yield "tiny: fp16 d underflows", normal * 1e-9
    yield "float32 subnormals", normal * 1e-40
    yield "1e4 scale", normal * 1e4
    yield "fp16 d overflows", normal * 1e8
    yield "squares overflow", normal * 1e20
    yield "extremes", rng.choice(np.array([3e38, -3e38, 1e-45, 0, 1]), n)
    yield "a scale per sub-block", normal * np.repeat(np.exp(rng.uniform(-40, 40, n // 16)), 16)
    sparse = np.zeros(n)
    hit = rng.random(n) < 0.05
    sparse[hit] = rng.choice([1.0, -1.0], hit.sum())
    yield "sparse ones", sparse
    k = rng.integers(levels.start, levels.stop, n).astype(np.float32)
    step = np.repeat(np.exp2(rng.integers(-20, 20, n // 16)), 16).astype(np.float32)
    yield "on the level grid", k * step
    yield "exact ties", (k + F32(0.5)) * step
    yield "half-integers", rng.integers(-16, 17, n) / F32(2)
    yield "bf16 weights", _bf16(normal * 0.02)


def rows(values, ncols: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, np.float32).reshape(-1, ncols))


def megabytes(rng: np.random.Generator) -> np.ndarray:
    """4 MiB of float32 as rows of 4096: Gaussian at many scales, heavy tails, bf16, uniform."""
    q = 1 << 18
    return rows(np.concatenate([
        rng.standard_normal(q) * np.exp(rng.uniform(-8, 3, q // 4096)).repeat(4096),
        rng.standard_t(2, q), _bf16(rng.standard_normal(q) * 0.02), rng.uniform(-1, 1, q),
    ]), 4096)


def _q3_subblock_d(y: np.ndarray) -> np.ndarray:
    """fp16(d) * (code - 32) per sub-block (nb, 16) of block_q3_K bytes y (nb, 110)."""
    d = y[:, 108:110].copy().view(np.float16).astype(np.float32)
    s = y[:, 96:108].astype(np.int32)
    lo = np.concatenate([s[:, :8] & 0xF, s[:, :8] >> 4], axis=1)
    hi = (s[:, 8:12, None] >> (2 * np.arange(4))) & 3  # [block, k, q] -> sub-block 4q + k
    code = lo | (hi.transpose(0, 2, 1).reshape(-1, 16) << 4)
    with np.errstate(invalid="ignore"):
        return d * (code - 32).astype(np.float32)


def requant_ties(qtype: str, decode, levels: range, seed: int, nb: int = 1024) -> tuple[np.ndarray, int]:
    """Rows of 256 where about a fifth of the values sit exactly half-way between two levels
    of the final requantization: (k + 1/2)*d - dm, with d, dm what ``decode`` reads back from
    the block's bytes per sub-block, re-quantized a few rounds so the scales settle. There C's
    true division gives k + 1/2 exactly and nearest_int rounds it to even (a reciprocal
    multiply would not). Returns the rows and how many values are exact ties at the end."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((nb, 256)) * np.exp(rng.uniform(-3, 3, (nb, 1)))).astype(np.float32)
    k = rng.integers(levels.start, levels.stop - 1, (nb, 16, 16)).astype(np.float32)
    sel = rng.random((nb, 16, 16)) < 0.2
    y = x
    for _ in range(4):
        d, dm = decode(quantize(y, qtype))
        t = (k + F32(0.5)) * d[:, :, None] - dm[:, :, None]
        y = np.where(sel & (d[:, :, None] != 0), t, x.reshape(nb, 16, 16)).reshape(nb, 256)
    d, dm = decode(quantize(y, qtype))
    with np.errstate(all="ignore"):
        q = (y.reshape(nb, 16, 16) + dm[:, :, None]) / d[:, :, None]
    return y, int(((q == np.floor(q) + F32(0.5)) & (d[:, :, None] != 0)).sum())


def _q3_decode(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = _q3_subblock_d(q.reshape(-1, 110))
    return d, np.zeros_like(d)


def edge_blocks(qtype: str, decode, levels: range, extra=()):
    """(name, rows of 256) built from the quantizer's own scales to sit on an edge."""
    y, n_ties = requant_ties(qtype, decode, levels, 17)
    assert n_ties > 500, f"only {n_ties} exact requantization ties were built"
    yield "requantization ties", y
    yield from extra


def _double_reciprocal_blocks() -> np.ndarray:
    """Blocks whose only non-zero value x0 (sub-block 0) makes max_scale m = (-4 x0^3)/(16 x0^2)
    (no refinement step applies) and where fp16(1/(-32/m)), the C's d, differs from
    fp16(m/-32): d must be the reciprocal of iscale, literally."""
    x0 = np.random.default_rng(1).uniform(0.01, 100, 1 << 20).astype(np.float32)
    x0[::2] *= -1
    w = x0 * x0
    m = ((w * x0) * F32(-4)) / ((w * F32(-4)) * F32(-4))
    literal = (F32(1) / (F32(-32) / m)).astype(np.float16).view(np.uint16)
    hit = x0[literal != (m / F32(-32)).astype(np.float16).view(np.uint16)]
    assert hit.size >= 5, "the search found too few blocks where the two formulas differ"
    x = np.zeros((hit.size, 256), np.float32)
    x[:, 0] = hit
    return x


def _q3_edges():
    return edge_blocks(QTYPE, _q3_decode, range(-4, 4), [("d = fp16(1/iscale)", _double_reciprocal_blocks())])


# --- tests ------------------------------------------------------------------------------------
def test_make_q3_quants_is_the_c_loop():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((16, 300)) * np.exp(rng.uniform(-12, 12, 300))).astype(np.float32)
    x[:, 0] = 0
    x[:, 1] = 1e-16  # below GROUP_MAX_EPS: all zero
    x[:, 2] = -2.5
    x[:, 3] = rng.integers(-4, 4, 16)  # on the grid
    x[:, 4] = rng.integers(-4, 4, 16) + F32(0.5)  # ties
    x[:, 5] = 0
    x[7, 5] = 3.0  # one value
    with np.errstate(all="ignore"):
        scale, L = make_q3_quants(x)
        refined = 0
        for c in range(x.shape[1]):
            want_scale, want_L = c_make_q3_quants(list(x[:, c]))
            assert F32(scale[c]).view(np.uint32) == F32(want_scale).view(np.uint32), c
            assert L[:, c].tolist() == want_L, c
            first = [max(-4, min(3, nearest_int(F32(-4) / x[np.argmax(np.abs(x[:, c])), c] * v))) + 4 for v in x[:, c]]
            refined += want_L != first and c > 1
    assert refined > 50, "the refinement sweeps changed too few levels to test them"


def test_blocks_match_the_c_port():
    rng = np.random.default_rng(11)
    picks = [rows(v, 256)[:2] for _, v in cases(rng, range(-4, 4), 4096)]
    x = np.concatenate(picks)
    with np.errstate(all="ignore"):
        got = Q3_K.quantize_blocks(x)
    want = c_quantize_row_q3_K(x)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"blocks {bad.tolist()} differ from the C port"


def test_zero_blocks_and_threads():
    q = quantize(np.zeros((2, 512), np.float32), QTYPE).reshape(-1, 110)
    assert (q == 0).all()  # L = 0, hmask 0, scales memset 0, d = +0
    x = (np.random.default_rng(3).standard_normal((40, 1024)) * 0.02).astype(np.float32)
    want = quantize(x, QTYPE, threads=1)
    old = Q3_K.chunk_values
    try:
        Q3_K.chunk_values = 2048
        assert np.array_equal(quantize(x, QTYPE, threads=3), want)
    finally:
        Q3_K.chunk_values = old


def test_edge_blocks_match_the_c_port():
    for name, x in _q3_edges():
        x = x[:256]
        assert np.array_equal(quantize(x, QTYPE), c_quantize_row_q3_K(x)), name


@pytest.mark.slow
def test_live_ggml_bytes_on_edge_blocks():
    lib = _ggml_base()
    for name, x in _q3_edges():
        want = ggml_quantize(lib, x, QTYPE)
        got = quantize(x, QTYPE)
        assert np.array_equal(got.reshape(-1), want), f"{name}: " + describe_mismatch(x, got, want, QTYPE)


@pytest.mark.slow
@pytest.mark.parametrize("ncols", [256, 4096])
def test_live_ggml_bytes(ncols):
    lib = _ggml_base()
    kept = 0
    for name, values in cases(np.random.default_rng(2024), range(-4, 4)):
        x = rows(values, ncols)
        want = ggml_quantize(lib, x, QTYPE)
        got = quantize(x, QTYPE)
        assert got.shape == (x.shape[0], row_nbytes(QTYPE, ncols))
        assert np.array_equal(got.reshape(-1), want), f"{name}: " + describe_mismatch(x, got, want, QTYPE)
        nonzero = (np.abs(x.reshape(-1, 16)).max(axis=1) >= GROUP_MAX_EPS).reshape(-1, 16)
        kept += int(((_q3_subblock_d(want.reshape(-1, 110)) == 0) & nonzero).sum())
    assert kept > 1000, "too few sub-blocks kept make_q3_quants' own levels (d*sc == 0)"


@pytest.mark.slow
def test_the_c_port_is_ggml():
    lib = _ggml_base()
    x = np.concatenate([rows(v, 256)[:1] for _, v in cases(np.random.default_rng(5), range(-4, 4), 4096)])
    assert np.array_equal(c_quantize_row_q3_K(x).reshape(-1), ggml_quantize(lib, x, QTYPE))


@pytest.mark.slow
def test_live_ggml_bytes_on_megabytes():
    lib = _ggml_base()
    x = megabytes(np.random.default_rng())
    want = ggml_quantize(lib, x, QTYPE)
    got = quantize(x, QTYPE)
    assert np.array_equal(got.reshape(-1), want), describe_mismatch(x, got, want, QTYPE)


@pytest.mark.slow
def test_live_ggml_dequantize():
    """dequantize (gguf-py's) of our bytes, and of random blocks with a finite fp16 d (every
    level, high bit and 6-bit scale code), equals ggml's to_float bit for bit."""
    lib = _ggml_base()
    for name, values in cases(np.random.default_rng(2024), range(-4, 4)):
        x = rows(values, 4096)
        q = quantize(x, QTYPE)
        with np.errstate(invalid="ignore"):  # an fp16 d that overflowed to inf, times a 0 scale
            got = dequantize(q, QTYPE, x.shape).reshape(-1)
        want = ggml_to_float(lib, q, QTYPE, x.size)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    raw = np.random.default_rng(5).integers(0, 256, (4096, 110), dtype=np.uint8)
    d = raw[:, 108:110].copy().view("<u2")
    raw[:, 108:110] = np.where((d & 0x7C00) == 0x7C00, d & 0x83FF, d).view(np.uint8)  # no inf/NaN d
    got = dequantize(raw, QTYPE, (4096 * 256,))
    want = ggml_to_float(lib, raw, QTYPE, 4096 * 256)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
