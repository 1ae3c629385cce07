"""quantize_iq4_nl / quantize_iq4_xs without an importance matrix, compiled (the numpy mirror is
quants/iq4.py, whose docstring spells out the C): quantize_row_iq4_nl_impl with
``quant_weights == NULL``, ``ntry = 7``, ``best_index_int8`` over ``kvalues_iq4nl``.

The scale search (a first fit and 15 trials, each a pass over the sub-block with two
sequential float32 sums) is run on LANES sub-blocks in lockstep (common.LANES).

best_index_int8 without its table: inside the table's range C's search ends with
``val[ml] <= x < val[ml+1]`` and picks ml+1 when ``!(x - val[ml] < val[ml+1] - x)``. Near the
midpoint ``m = (val[ml] + val[ml+1])/2`` (|m| >= 4.5) both float32 differences are exact
(multiples of x's ulp, smaller than 2^24 of them), and rounding is monotonic elsewhere, so the
test is exactly ``x >= m`` (checked on every float32 in [-128, 114]): the index is the number of
midpoints ``m_k <= x``, which also gives C's early returns (``x <= -127`` -> 0, ``x >= 113`` ->
15, infinities included). NaN ends C's search at 15; it is reachable in the final levels (a
NaN scale from sums that overflowed), so those count ``!(x < m_k)``. In the search, id*xb[j]
is finite in every sub-block whose result is kept (within +-134), and q = val[index] comes
from a chain of selects, which vectorises (no table, no gather).
"""
from __future__ import annotations

import numpy as np

from .common import (
    F32,
    LANES,
    ONE,
    ZERO,
    fp32_to_fp16,
    jit,
    lane_buffer,
    lane_layout,
    nearest_int,
    to_lanes,
)

# kvalues_iq4nl (ggml-common.h) as float32, and the 15 midpoints between neighbours (exact:
# halves of sums of small integers).
_KV = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
(_V0, _V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13, _V14, _V15) = (F32(v) for v in _KV)
_MIDS = (_KV[:-1] + _KV[1:]) / F32(2)
(_M0, _M1, _M2, _M3, _M4, _M5, _M6, _M7, _M8, _M9, _M10, _M11, _M12, _M13, _M14) = (F32(v) for v in _MIDS)
_GROUP_MAX_EPS = F32(1e-15)
_M127 = F32(-127.0)  # values[0] as the float C converts it to
_F32_32 = F32(32.0)
_NTRY = 7

# The search's buffer (common.lane_layout): x and the weights w = x*x position-major
# (32 x LANES), then rows of one value per lane.
_N = 32
_NV = 8
(_X, _W, _V), _SIZE = lane_layout(_N, _N, _NV)
(_AMAX, _MAX, _ID, _SQX, _SQ2, _D, _BEST, _SCALE) = [_V + r * LANES for r in range(_NV)]


@jit
def _value(a):
    """values[best_index_int8(16, values, a)] for a finite a: the last midpoint <= a picks."""
    q = _V0
    q = _V1 if a >= _M0 else q
    q = _V2 if a >= _M1 else q
    q = _V3 if a >= _M2 else q
    q = _V4 if a >= _M3 else q
    q = _V5 if a >= _M4 else q
    q = _V6 if a >= _M5 else q
    q = _V7 if a >= _M6 else q
    q = _V8 if a >= _M7 else q
    q = _V9 if a >= _M8 else q
    q = _V10 if a >= _M9 else q
    q = _V11 if a >= _M10 else q
    q = _V12 if a >= _M11 else q
    q = _V13 if a >= _M12 else q
    q = _V14 if a >= _M13 else q
    return _V15 if a >= _M14 else q


@jit
def _index(a):
    """best_index_int8(16, kvalues_iq4nl, a) for any float32 a, NaN included (15, as in C)."""
    n = np.int32(15)
    for m in (_M0, _M1, _M2, _M3, _M4, _M5, _M6, _M7, _M8, _M9, _M10, _M11, _M12, _M13, _M14):
        n -= np.int32(1) if a < m else np.int32(0)
    return n


@jit
def _absmax_lanes(b):
    """`if (ax > amax) { amax = ax; max = xb[j]; }` from amax = max = 0 over each lane, and
    weight[j] = xb[j]*xb[j]."""
    for s in range(LANES):
        b[_AMAX + s] = ZERO
        b[_MAX + s] = ZERO
    for i in range(_N):
        for s in range(LANES):
            v = b[_X + i * LANES + s]
            b[_W + i * LANES + s] = v * v
            a = abs(v)
            take = a > b[_AMAX + s]
            b[_AMAX + s] = a if take else b[_AMAX + s]
            b[_MAX + s] = v if take else b[_MAX + s]


@jit
def _sums_lanes(b):
    """sumqx += w*q*xb[j]; sumq2 += w*q*q from 0 with q = value(id*xb[j]), each lane's id in
    row _ID; positions four at a time, each lane's two sums taking the terms in C's order."""
    L = LANES
    for s in range(L):
        b[_SQX + s] = ZERO
        b[_SQ2 + s] = ZERO
    for i in range(0, _N, 4):
        for s in range(L):
            idv = b[_ID + s]
            o = i * L + s
            x0 = b[_X + o]
            x1 = b[_X + o + L]
            x2 = b[_X + o + 2 * L]
            x3 = b[_X + o + 3 * L]
            q0 = _value(idv * x0)
            q1 = _value(idv * x1)
            q2 = _value(idv * x2)
            q3 = _value(idv * x3)
            w0 = b[_W + o] * q0
            w1 = b[_W + o + L] * q1
            w2 = b[_W + o + 2 * L] * q2
            w3 = b[_W + o + 3 * L] * q3
            b[_SQX + s] = (((b[_SQX + s] + w0 * x0) + w1 * x1) + w2 * x2) + w3 * x3
            b[_SQ2 + s] = (((b[_SQ2 + s] + w0 * q0) + w1 * q1) + w2 * q2) + w3 * q3


@jit
def _search_lanes(b):
    """The scale of quantize_row_iq4_nl_impl's search for every lane into row _SCALE.

    Lanes with amax < GROUP_MAX_EPS (C skips them; zero-filled tail lanes too) run along on
    inf/NaN ids, which only feed their own selects, and are set to 0 at the end."""
    L = LANES
    # pass 0 is the first fit, pass t the trial itry = t - 8 (one call site of the unrolled
    # sums: half the machine code and compile time)
    for t in range(2 * _NTRY + 2):
        if t == 0:
            for s in range(L):
                d = -b[_MAX + s] / _M127  # float d = -max/values[0]
                b[_ID + s] = ONE / d
        else:
            num = F32(t - 8 - 127)  # itry + values[0], an int, converted for the division
            for s in range(L):
                b[_ID + s] = num / b[_MAX + s]
        _sums_lanes(b)
        if t == 0:
            for s in range(L):
                sqx = b[_SQX + s]
                sq2 = b[_SQ2 + s]
                d = sqx / sq2 if sq2 > 0 else ZERO
                b[_D + s] = d
                b[_BEST + s] = d * sqx
        else:
            for s in range(L):
                sqx = b[_SQX + s]
                sq2 = b[_SQ2 + s]
                # sumq2 > 0 && sumqx*sumqx > best*sumq2; selects, so the lanes stay vectors
                acc = (sq2 > 0) & (sqx * sqx > b[_BEST + s] * sq2)
                d = sqx / sq2 if acc else b[_D + s]
                b[_D + s] = d
                b[_BEST + s] = d * sqx if acc else b[_BEST + s]
    for s in range(L):
        b[_SCALE + s] = ZERO if b[_AMAX + s] < _GROUP_MAX_EPS else b[_D + s]


@jit
def _levels(xb, at, idl, Lb):
    """Lb[j] = best_index_int8(idl*xb[at + j]) for j < 32."""
    for j in range(32):
        Lb[j] = _index(idl * xb[at + j])


@jit
def _pack(Lb, y, at):
    """q4[16*i + j] = L[32*i + j] | L[32*i + 16 + j] << 4 for one 32-value sub-block."""
    for j in range(16):
        y[at + j] = Lb[j] | (Lb[16 + j] << 4)


@jit
def _put16(y, at, h):
    y[at] = h & 0xFF
    y[at + 1] = h >> 8


@jit
def iq4_nl(blocks):
    """quantize_iq4_nl (no imatrix): (nb, 32) float32 C-contiguous -> (nb, 18) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 18), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * LANES].reshape((_N, LANES))
    Lb = np.empty(32, np.int32)
    for b0 in range(0, nb, LANES):
        to_lanes(blocks, b0, _N, x)
        _absmax_lanes(buf)
        _search_lanes(buf)
        for s in range(min(LANES, nb - b0)):
            y = out[b0 + s]
            sc = buf[_SCALE + s]
            _put16(y, 0, fp32_to_fp16(sc))  # dh = fp16(scales[0])
            # id = scales[0] ? 1/scales[0] : 0, the float32 scale (a NaN one gives NaN levels: 15)
            _levels(blocks[b0 + s], 0, ONE / sc if sc != 0 else ZERO, Lb)
            _pack(Lb, y, 2)
    return out


@jit
def iq4_xs(blocks):
    """quantize_iq4_xs (no imatrix): (nb, 256) float32 C-contiguous -> (nb, 136) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 136), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * LANES].reshape((_N, LANES))
    Lb = np.empty(32, np.int32)
    per = LANES // 8
    for b0 in range(0, nb, per):
        to_lanes(blocks, b0, _N, x)
        _absmax_lanes(buf)
        _search_lanes(buf)
        for b in range(min(per, nb - b0)):
            xb = blocks[b0 + b]
            y = out[b0 + b]
            sc = _SCALE + 8 * b
            # `if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }` from 0: a NaN never wins
            amax_scale = ZERO
            max_scale = ZERO
            for ib in range(8):
                v = buf[sc + ib]
                if abs(v) > amax_scale:
                    amax_scale = abs(v)
                    max_scale = v
            d = -max_scale / _F32_32  # -0 when every scale is 0: fp16 0x8000
            _put16(y, 0, fp32_to_fp16(d))
            idv = ONE / d if d != 0 else ZERO
            scales_h = 0
            for k in range(4):
                y[4 + k] = 0
            for ib in range(8):
                l = nearest_int(idv * buf[sc + ib])
                l = max(-32, min(31, l))
                dl = d * F32(l)
                _levels(xb, 32 * ib, ONE / dl if dl != 0 else ZERO, Lb)
                _pack(Lb, y, 8 + 16 * ib)
                l += 32
                y[4 + ib // 2] |= (l & 0xF) << (4 * (ib % 2))
                scales_h |= (l >> 4) << (2 * ib)
            _put16(y, 2, scales_h)
    return out
