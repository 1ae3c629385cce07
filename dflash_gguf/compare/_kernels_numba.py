"""numba kernels behind ``compare.kernels`` (imported only there, only when numba is enabled).

Compiled with the quantizer's options (``quants._numba.common.JIT_OPTIONS``: no fastmath, so
no fused multiply-add and no reordering; nogil, so the compare worker threads run them in
parallel; cached on disk). Every float is float32 and every operation is the one ggml's
``dequantize_row_*`` (and gguf-py's NumPy mirror of it) does, in the same order.
"""
from __future__ import annotations

import numba
import numpy as np

from ..quants._numba.common import JIT_OPTIONS

jit = numba.njit(**JIT_OPTIONS)
F32 = np.float32
_INF = F32(np.inf)


@jit
def _h(raw, o):
    """The little-endian uint16 at byte ``o``."""
    return np.int64(raw[o]) | (np.int64(raw[o + 1]) << 8)


@jit
def _i8(v):
    """A byte as int8 (two's complement), as an int."""
    v = np.int64(v)
    return v - 256 if v > 127 else v


@jit
def q8_0(raw, f16, out):
    """dequantize_row_q8_0: y = q * d per value (blocks of 2-byte d + 32 int8), into ``out``."""
    nb = raw.shape[0] // 34
    for b in range(nb):
        o = 34 * b
        d = f16[_h(raw, o)]
        for i in range(32):
            out[32 * b + i] = F32(_i8(raw[o + 2 + i])) * d


@jit
def q4_k(raw, f16, out):
    """dequantize_row_q4_K: per sub-block j, d1 = d * sc, m1 = dmin * m, y = d1 * q - m1; the
    6-bit sc/m of get_scale_min_k4; sub-block 2g (2g+1) is the low (high) nibble of qs[32g:]."""
    nb = raw.shape[0] // 144
    for b in range(nb):
        o = 144 * b
        d = f16[_h(raw, o)]
        dmin = f16[_h(raw, o + 2)]
        s = o + 4
        for j in range(8):
            if j < 4:
                sc = np.int64(raw[s + j]) & 63
                m = np.int64(raw[s + j + 4]) & 63
            else:
                sc = (np.int64(raw[s + j + 4]) & 0xF) | ((np.int64(raw[s + j - 4]) >> 6) << 4)
                m = (np.int64(raw[s + j + 4]) >> 4) | ((np.int64(raw[s + j]) >> 6) << 4)
            d1 = d * F32(sc)
            m1 = dmin * F32(m)
            q0 = o + 16 + 32 * (j // 2)
            shift = 4 * (j % 2)
            for l in range(32):
                q = (np.int64(raw[q0 + l]) >> shift) & 0xF
                out[256 * b + 32 * j + l] = d1 * F32(q) - m1


@jit
def q6_k(raw, f16, out):
    """dequantize_row_q6_K: y = (d * scale) * q, q = (4 bits of ql | 2 bits of qh << 4) - 32, in
    ggml's loop: per half h (128 values) and l < 32, values l, l+32, l+64, l+96 take ql[l] low,
    ql[l+32] low, ql[l] high, ql[l+32] high nibbles and bits 0-1, 2-3, 4-5, 6-7 of qh[l]."""
    nb = raw.shape[0] // 210
    for b in range(nb):
        o = 210 * b
        d = f16[_h(raw, o + 208)]
        for h in range(2):
            ql, qh, sc, y = o + 64 * h, o + 128 + 32 * h, o + 192 + 8 * h, 256 * b + 128 * h
            for k in range(4):  # the four runs of 32: two scales each (l < 16, l >= 16)
                for half in range(2):
                    scale = d * F32(_i8(raw[sc + 2 * k + half]))
                    for l in range(16 * half, 16 * half + 16):
                        lo = (np.int64(raw[ql + l + 32 * (k & 1)]) >> (4 * (k >> 1))) & 0xF
                        hi = (np.int64(raw[qh + l]) >> (2 * k)) & 3
                        out[y + 32 * k + l] = scale * F32((lo | (hi << 4)) - 32)


@jit
def block_check(d, x, bs, limit):
    """kernels.block_check in one pass: per block, m = max |d| and r = max |x| with NumPy's
    maximum (a NaN sticks), ratio = m / r (inf if r is not > 0 and m > 0, else 0 there; NaN ->
    inf); the count of ratios > limit (float32), the first largest ratio, and in its block the
    first largest |d| (or the first NaN) -- NumPy's argmax."""
    nb = d.shape[0] // bs
    bad = 0
    worst = F32(-1.0)
    wb = -1
    for b in range(nb):
        o = b * bs
        m = F32(0.0)
        r = F32(0.0)
        for i in range(o, o + bs):
            a = abs(d[i])
            m = a if (a > m or a != a) else m
            c = abs(x[i])
            r = c if (c > r or c != c) else r
        if r > 0:
            q = m / r
        else:
            q = _INF if m > 0 else F32(0.0)
        if q != q:
            q = _INF
        if q > limit:
            bad += 1
        if q > worst:
            worst = q
            wb = b
    if bad == 0:
        return 0, F32(0.0), -1
    o = wb * bs
    at = o
    m = abs(d[o])
    for i in range(o, o + bs):
        a = abs(d[i])
        if a != a:
            return bad, worst, i
        if a > m:
            m = a
            at = i
    return bad, worst, at
