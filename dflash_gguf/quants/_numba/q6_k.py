"""make_qx_quants and quantize_row_q6_K_ref, compiled (the numpy mirror is quants/q6_k.py).
Sub-blocks are fitted in lockstep, see common.LANES (64 of them here, see _LANES)."""
from __future__ import annotations

import numpy as np

from .common import (
    F32,
    F32_01,
    ONE,
    ZERO,
    fp16_to_fp32,
    fp32_to_fp16,
    jit,
    lane_buffer,
    lane_layout,
    nearest_int,
    round_clamp,
    to_lanes,
)

_F32_M128 = F32(-128.0)
_GROUP_MAX_EPS = F32(1e-15)

# The fit's buffer (common.lane_layout): x, its weights w = x*x and w*x (the same in every
# trial, so computed once), position-major (16 x _LANES), and 9 rows of one value per lane.
_N = 16
_NV = 9
# Twice common.LANES: this fit's trials are short (16 values), and 64 lanes (four super-blocks)
# give the out-of-order core enough independent sums to overlap (1.17x over 32; 128: no better).
_LANES = 64
(_X, _WW, _WX, _V), _SIZE = lane_layout(_N, _N, _N, _NV, lanes=_LANES)
_SCALE, _L_ISCALE, _ZERO, _MX, _AMAX, _ISCALE, _SUMLX, _SUML2, _BEST = [_V + r * _LANES for r in range(_NV)]


@jit
def _qx_lanes(b, nmax):
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL) for the _LANES sub-blocks in the
    buffer's x region, in lockstep as q4_k._qkx2_lanes.

    Out in the value rows: _SCALE the scale, _L_ISCALE the iscale of the accepted trial
    (regenerates L where the stored scale reads back as 0), _ZERO nonzero where every
    |x| < eps (C returns early with L = 0).

    Levels MAX(-nmax, MIN(nmax - 1, nearest_int(iscale*x))) are computed in float
    (round_clamp): max is the value of largest magnitude, so |iscale*x| <= (nmax + 0.9)(1 +
    2^-24)^2 < 33 in every live lane; the lanes C returns early from may compute NaN here but
    are never accepted, and their scale is set to 0 at the end.
    """
    L = _LANES
    lo = F32(-nmax)
    hi = F32(nmax - 1)
    for s in range(L):
        b[_AMAX + s] = ZERO
        b[_MX + s] = ZERO
    for i in range(_N):
        for s in range(L):
            o = i * L + s
            xi = b[_X + o]
            ax = abs(xi)
            up = ax > b[_AMAX + s]  # if (ax > amax) { amax = ax; max = x[i]; }
            b[_AMAX + s] = ax if up else b[_AMAX + s]
            b[_MX + s] = xi if up else b[_MX + s]
            w = xi * xi  # rmse_type 1: float w = x[i]*x[i]
            b[_WW + o] = w
            b[_WX + o] = w * xi  # the w*x[i] of sumlx += w*x[i]*l
    for s in range(L):
        b[_ZERO + s] = ONE if b[_AMAX + s] < _GROUP_MAX_EPS else ZERO  # C returns 0 early, L = 0
        b[_ISCALE + s] = F32(-nmax) / b[_MX + s]  # float iscale = -nmax / max
        b[_SUMLX + s] = ZERO
        b[_SUML2 + s] = ZERO
    for i in range(_N):
        for s in range(L):
            o = i * L + s
            lf = round_clamp(b[_ISCALE + s] * b[_X + o], lo, hi)
            b[_SUMLX + s] += b[_WX + o] * lf  # sumlx += w*x[i]*l
            b[_SUML2 + s] += b[_WW + o] * lf * lf  # suml2 += w*l*l
    for s in range(L):
        sl2 = b[_SUML2 + s]
        sc = b[_SUMLX + s] / sl2 if sl2 != 0 else ZERO
        b[_SCALE + s] = sc
        b[_BEST + s] = sc * b[_SUMLX + s]
        b[_L_ISCALE + s] = b[_ISCALE + s]
    for step in range(-9, 10):
        if step == 0:
            continue
        num = F32(nmax) + F32_01 * F32(step)
        for s in range(L):
            b[_ISCALE + s] = -num / b[_MX + s]  # iscale = -(nmax + 0.1f*is) / max
            b[_SUMLX + s] = ZERO
            b[_SUML2 + s] = ZERO
        # four positions at a time: each lane's sums take the four terms in order in registers
        for i in range(0, _N, 4):
            for s in range(L):
                isc = b[_ISCALE + s]
                o = i * L + s
                l0 = round_clamp(isc * b[_X + o], lo, hi)
                l1 = round_clamp(isc * b[_X + o + L], lo, hi)
                l2 = round_clamp(isc * b[_X + o + 2 * L], lo, hi)
                l3 = round_clamp(isc * b[_X + o + 3 * L], lo, hi)
                b[_SUMLX + s] = (((b[_SUMLX + s] + b[_WX + o] * l0) + b[_WX + o + L] * l1)
                                 + b[_WX + o + 2 * L] * l2) + b[_WX + o + 3 * L] * l3
                b[_SUML2 + s] = (((b[_SUML2 + s] + b[_WW + o] * l0 * l0) + b[_WW + o + L] * l1 * l1)
                                 + b[_WW + o + 2 * L] * l2 * l2) + b[_WW + o + 3 * L] * l3 * l3
        for s in range(L):
            # if (suml2 > 0 && sumlx*sumlx > best*suml2) { L = ...; scale = sumlx/suml2; best = scale*sumlx; }
            sl2 = b[_SUML2 + s]
            slx = b[_SUMLX + s]
            if sl2 > 0 and slx * slx > b[_BEST + s] * sl2 and b[_ZERO + s] == 0:
                sc = slx / sl2
                b[_SCALE + s] = sc
                b[_BEST + s] = sc * slx
                b[_L_ISCALE + s] = b[_ISCALE + s]
    for s in range(L):
        if b[_ZERO + s] != 0:
            b[_SCALE + s] = ZERO


@jit
def _q6_values(vv, j, d, L):
    """dequantize_row_q6_K's y = (d * scale) * q for sub-block j into vv: ``d`` is that
    d * scale (GGML_FP16_TO_FP32(d) * the int8 scale, both of which read back exactly), q the
    level L - 32 (L <= 63, kept whole by the packing): the same float32 operations on the same
    operands, so the bits of dequantizing the block. (q converted from int32: the same float,
    and a conversion AVX2 has a vector instruction for, unlike int64's.)"""
    for ii in range(16):
        vv[16 * j + ii] = d * F32(np.int32(L[16 * j + ii] - 32))


def _q6(blocks, vals=None):
    """quantize_row_q6_K_ref: (nb, 256) float32 C-contiguous -> (nb, 210) uint8; unless
    ``vals`` is None, also the values the bytes dequantize to, bit for bit, into ``vals`` (nb,
    256) float32, as q4_k._k4 (the specialisation without ``vals`` is compiled without those
    branches)."""
    nb = blocks.shape[0]
    out = np.empty((nb, 210), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * _LANES].reshape((_N, _LANES))
    v = buf[_V:_V + _NV * _LANES].reshape((_NV, _LANES))
    L = np.empty(256, np.int64)
    sc = np.empty(16, np.int64)
    per = _LANES // 16
    for b0 in range(0, nb, per):
        to_lanes(blocks, b0, 16, x)
        _qx_lanes(buf, 32)
        for b in range(min(per, nb - b0)):
            y = out[b0 + b]
            xb = blocks[b0 + b]
            s0 = 16 * b
            # max_scale: the first scale of largest magnitude (strict >, from 0)
            max_scale = ZERO
            max_abs_scale = ZERO
            for ib in range(16):
                abs_scale = abs(v[0, s0 + ib])
                if abs_scale > max_abs_scale:
                    max_abs_scale = abs_scale
                    max_scale = v[0, s0 + ib]
            if max_abs_scale < _GROUP_MAX_EPS:
                for k in range(210):  # memset(&y[i], 0, sizeof(block_q6_K))
                    y[k] = 0
                if vals is not None:  # read back: d = 0, scales 0, q = 0 - 32, so (0 * 0) * -32 = -0.0
                    for k in range(256):
                        L[k] = 0
                    for j in range(16):
                        _q6_values(vals[b0 + b], j, ZERO, L)
                continue
            iscale = _F32_M128 / max_scale
            d16 = fp32_to_fp16(ONE / iscale)  # GGML_FP32_TO_FP16(1/iscale)
            y[208] = d16 & 0xFF
            y[209] = d16 >> 8
            d_read = fp16_to_fp32(d16)
            for ib in range(16):
                q = min(127, nearest_int(iscale * v[0, s0 + ib])) & 0xFF  # stored as int8_t
                y[192 + ib] = q
                sc[ib] = q - 256 if q > 127 else q
            for j in range(16):
                s = s0 + j
                d = d_read * F32(sc[j])
                if d == 0:  # `if (!d) continue;`: keep make_qx_quants' L
                    for ii in range(16):
                        if v[2, s] != 0:
                            L[16 * j + ii] = 0
                        else:
                            L[16 * j + ii] = 32 + max(-32, min(31, nearest_int(v[1, s] * xb[16 * j + ii])))
                    if vals is not None:  # a compile-time branch, as in q4_k._k4_superblock
                        _q6_values(vals[b0 + b], j, d, L)
                elif vals is None:
                    for ii in range(16):
                        # nearest_int(x[i]/d): a true division
                        L[16 * j + ii] = max(-32, min(31, nearest_int(xb[16 * j + ii] / d))) + 32
                else:
                    vv = vals[b0 + b]
                    for ii in range(16):  # the value in the same loop, as _q6_values
                        q = max(-32, min(31, nearest_int(xb[16 * j + ii] / d)))
                        L[16 * j + ii] = q + 32
                        vv[16 * j + ii] = d * F32(np.int32(q))
            # ql[64h + l] = q[l] | q[l+64] << 4, ql[64h+32+l] = q[l+32] | q[l+96] << 4,
            # qh[32h + l] = hi2 of q[l], q[l+32], q[l+64], q[l+96]  (q relative to 128h)
            for h in range(2):
                for l in range(32):
                    j = 128 * h + l
                    y[64 * h + l] = (L[j] & 0xF) | ((L[j + 64] & 0xF) << 4)
                    y[64 * h + 32 + l] = (L[j + 32] & 0xF) | ((L[j + 96] & 0xF) << 4)
                    y[128 + 32 * h + l] = (
                        (L[j] >> 4) | ((L[j + 32] >> 4) << 2) | ((L[j + 64] >> 4) << 4) | ((L[j + 96] >> 4) << 6)
                    )
    return out


# Two dispatchers of the one function, each the kernel itself rather than a jitted wrapper
# around it: called through a wrapper, the plain kernel ran 5% slower (LLVM optimises the
# inlined body differently). q6_k is only ever called without ``vals``, so it keeps a single
# specialisation.
q6_k = jit(_q6)
q6_k_values = jit(_q6)
