"""make_qkx2_quants and quantize_row_q4_K_ref / q5_K_ref, compiled (the numpy mirror is
quants/q4_k.py). Sub-blocks are fitted in lockstep, see common.LANES.

The fit is built by qkx2_lanes for a sub-block size, lane count and error kind; k_low.py builds
Q2_K's from it. numba keys a cached kernel on its own file's content: after editing the fit
here, delete __pycache__/k_low*.nb[ci] too."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .common import (
    F32,
    F32_01,
    LANES,
    NEAREST_INT_LIMIT,
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

_F32_32 = F32(32.0)
_F32_63 = F32(63.0)

# The fit's buffer (common.lane_layout): x and the weights w, position-major (n x lanes), the
# trial's levels Laux, and 19 rows of one value per lane. Rows 0-4 are what the super-block needs
# (see qkx2_lanes), and _MX, _XLO (each lane's largest and smallest x, which bound its
# requantized levels), the rest the fit's own state.
_NV = 19


class Qkx2Lanes(NamedTuple):
    fit: object  # the jitted fit(b, nmax, rmin, rdelta, nstep) on a buffer of `size` floats
    x: int  # offsets of the x, w, Laux (scratch once fitted) and value-row regions
    w: int
    lv: int
    v: int
    size: int
    mx_row: int  # value rows of each lane's largest and smallest x
    xlo_row: int


@jit
def _fast_levels(b, lanes, iscale, xlo, mn, mx, flat):
    """Whether every live lane's iscale*(x[i] - min) is within NEAREST_INT_LIMIT, so that
    round_clamp gives nearest_int's levels: the product is monotonic in x, so each lane's
    smallest and largest x decide (lanes that returned early, max == min, are never accepted).
    Counted without an early exit, so that the lanes are checked as vectors (every trial).
    The offsets are the fit's constants (inlined)."""
    slow = 0
    for s in range(lanes):
        isc = b[iscale + s]
        lo = abs(isc * (b[xlo + s] - b[mn + s]))
        hi = abs(isc * (b[mx + s] - b[mn + s]))
        ok = (lo <= NEAREST_INT_LIMIT) & (hi <= NEAREST_INT_LIMIT)
        slow += 0 if (b[flat + s] != 0) | ok else 1
    return slow == 0


def qkx2_lanes(n: int, lanes: int, use_mad: bool) -> Qkx2Lanes:
    """make_qkx2_quants for sub-blocks of ``n`` values, ``lanes`` at a time, compiled: the
    region offsets, ``n``, ``lanes`` and ``use_mad`` are closure constants (numba freezes them,
    and keys its cache on them), so the loops see compile-time bounds and non-overlapping
    regions as with module globals. Q4_K/Q5_K: (32, LANES, False); Q2_K (k_low.py): use_mad.
    Only ints and bools may be closed over: numba pickles them into the cache key, and a jitted
    function's pickle differs in every process (the fit calls them as module globals)."""
    (_X, _W, _LV, _V), size = lane_layout(n, n, n, _NV, lanes=lanes)
    (_SCALE, _THE_MIN, _L_ISCALE, _L_MIN, _FLAT, _MN, _MX, _SUM_W, _SUM_X, _ISCALE, _BEST, _SUM_L, _SUM_L2, _SUM_XL,
     _T_SCALE, _T_MIN, _T_D, _CUR, _XLO) = [_V + r * lanes for r in range(_NV)]

    @jit
    def _qkx2_lanes(b, nmax, rmin, rdelta, nstep):
        """make_qkx2_quants(n, nmax, x, w, L, &the_min, Laux, rmin, rdelta, nstep, use_mad)
        for the lanes' sub-blocks in the buffer's x, w regions.

        Out in the value rows: _SCALE the scale, _THE_MIN the_min, and what regenerates L
        (needed only where the stored scale reads back as 0): _L_ISCALE the iscale and _L_MIN
        the min of the accepted trial, _FLAT nonzero where max == min (L = 0).

        Levels are nearest_int's, computed in float by round_clamp wherever every lane's
        products are within its range (always, but for sub-blocks of tiny or subnormal range),
        else literally; positions go four at a time, each lane's sums taking the four terms in
        C's order in registers. The error term is w*(diff*diff), or w*fabsf(diff) with use_mad.
        """
        L = lanes
        nmax_f = F32(nmax)
        # min = max = x[0]; sum_w = weights[0]; sum_x = sum_w * x[0]; then i = 1..n-1
        for s in range(L):
            b[_MN + s] = b[_X + s]
            b[_MX + s] = b[_X + s]
            b[_SUM_W + s] = b[_W + s]
            b[_SUM_X + s] = b[_W + s] * b[_X + s]
        for i in range(1, n):
            for s in range(L):
                xi = b[_X + i * L + s]
                wi = b[_W + i * L + s]
                m = b[_MN + s]
                b[_MN + s] = xi if xi < m else m
                m = b[_MX + s]
                b[_MX + s] = xi if xi > m else m
                b[_SUM_W + s] += wi
                b[_SUM_X + s] += wi * xi
        for s in range(L):
            m = b[_MN + s]
            b[_XLO + s] = m
            m = ZERO if m > 0 else m  # if (min > 0) min = 0
            b[_MN + s] = m
            b[_FLAT + s] = ONE if b[_MX + s] == m else ZERO  # C returns early: L = 0, scale 0
            isc = nmax_f / (b[_MX + s] - m)
            b[_ISCALE + s] = isc
            b[_SCALE + s] = ONE / isc
            b[_L_ISCALE + s] = isc
            b[_L_MIN + s] = m
            b[_BEST + s] = ZERO
        # initial L and best_error += w * diff, diff = scale*L[i] + min - x[i], squared or fabsf
        fast = _fast_levels(b, L, _ISCALE, _XLO, _MN, _MX, _FLAT)
        for i in range(n):
            for s in range(L):
                xi = b[_X + i * L + s]
                v = b[_ISCALE + s] * (xi - b[_MN + s])
                lf = round_clamp(v, ZERO, nmax_f) if fast else F32(max(0, min(nmax, nearest_int(v))))
                diff = b[_SCALE + s] * lf + b[_MN + s] - xi
                b[_BEST + s] += b[_W + i * L + s] * (abs(diff) if use_mad else diff * diff)
        for step in range(nstep + 1):
            num = rmin + rdelta * F32(step) + nmax_f  # (rmin + rdelta*is + nmax), left to right
            for s in range(L):
                b[_ISCALE + s] = num / (b[_MX + s] - b[_MN + s])  # the live min: accepted trials move it
                b[_SUM_L + s] = ZERO
                b[_SUM_L2 + s] = ZERO
                b[_SUM_XL + s] = ZERO
                b[_CUR + s] = ZERO
            # Laux, kept for the error pass; sum_l += w*l; sum_l2 += w*l*l; sum_xl += w*l*x[i]
            if _fast_levels(b, L, _ISCALE, _XLO, _MN, _MX, _FLAT):
                for i in range(0, n, 4):
                    for s in range(L):
                        isc = b[_ISCALE + s]
                        m = b[_MN + s]
                        o = i * L + s
                        x0 = b[_X + o]
                        x1 = b[_X + o + L]
                        x2 = b[_X + o + 2 * L]
                        x3 = b[_X + o + 3 * L]
                        l0 = round_clamp(isc * (x0 - m), ZERO, nmax_f)
                        l1 = round_clamp(isc * (x1 - m), ZERO, nmax_f)
                        l2 = round_clamp(isc * (x2 - m), ZERO, nmax_f)
                        l3 = round_clamp(isc * (x3 - m), ZERO, nmax_f)
                        b[_LV + o] = l0
                        b[_LV + o + L] = l1
                        b[_LV + o + 2 * L] = l2
                        b[_LV + o + 3 * L] = l3
                        w0 = b[_W + o] * l0
                        w1 = b[_W + o + L] * l1
                        w2 = b[_W + o + 2 * L] * l2
                        w3 = b[_W + o + 3 * L] * l3
                        b[_SUM_L + s] = (((b[_SUM_L + s] + w0) + w1) + w2) + w3
                        b[_SUM_L2 + s] = (((b[_SUM_L2 + s] + w0 * l0) + w1 * l1) + w2 * l2) + w3 * l3
                        b[_SUM_XL + s] = (((b[_SUM_XL + s] + w0 * x0) + w1 * x1) + w2 * x2) + w3 * x3
            else:
                for i in range(n):
                    for s in range(L):
                        o = i * L + s
                        xi = b[_X + o]
                        lf = F32(max(0, min(nmax, nearest_int(b[_ISCALE + s] * (xi - b[_MN + s])))))
                        b[_LV + o] = lf
                        wl = b[_W + o] * lf
                        b[_SUM_L + s] += wl
                        b[_SUM_L2 + s] += wl * lf
                        b[_SUM_XL + s] += wl * xi
            for s in range(L):
                sw, sl, sl2, sxl, sx = b[_SUM_W + s], b[_SUM_L + s], b[_SUM_L2 + s], b[_SUM_XL + s], b[_SUM_X + s]
                D = sw * sl2 - sl * sl
                ts = (sw * sxl - sx * sl) / D
                tm = (sl2 * sx - sl * sxl) / D
                if tm > 0:
                    tm = ZERO
                    ts = sxl / sl2
                b[_T_SCALE + s] = ts
                b[_T_MIN + s] = tm
                b[_T_D + s] = D
            # cur_error += w * diff over Laux, diff = this_scale*Laux[i] + this_min - x[i]
            for i in range(0, n, 4):
                for s in range(L):
                    ts = b[_T_SCALE + s]
                    tm = b[_T_MIN + s]
                    o = i * L + s
                    d0 = ts * b[_LV + o] + tm - b[_X + o]
                    d1 = ts * b[_LV + o + L] + tm - b[_X + o + L]
                    d2 = ts * b[_LV + o + 2 * L] + tm - b[_X + o + 2 * L]
                    d3 = ts * b[_LV + o + 3 * L] + tm - b[_X + o + 3 * L]
                    if use_mad:  # a closure constant: compiled as one branch or the other
                        c = b[_CUR + s] + b[_W + o] * abs(d0)
                        c = c + b[_W + o + L] * abs(d1)
                        c = c + b[_W + o + 2 * L] * abs(d2)
                        b[_CUR + s] = c + b[_W + o + 3 * L] * abs(d3)
                    else:
                        c = b[_CUR + s] + b[_W + o] * (d0 * d0)
                        c = c + b[_W + o + L] * (d1 * d1)
                        c = c + b[_W + o + 2 * L] * (d2 * d2)
                        b[_CUR + s] = c + b[_W + o + 3 * L] * (d3 * d3)
            for s in range(L):
                # `if (D > 0) { ... if (cur_error < best_error) {...} }`; lanes that returned
                # early (max == min) ran on inf/NaN and are never accepted. Selects, not a branch
                # around the stores: the lanes are then updated as vectors.
                acc = (b[_T_D + s] > 0) & (b[_CUR + s] < b[_BEST + s]) & (b[_FLAT + s] == 0)
                b[_BEST + s] = b[_CUR + s] if acc else b[_BEST + s]
                b[_SCALE + s] = b[_T_SCALE + s] if acc else b[_SCALE + s]
                b[_L_ISCALE + s] = b[_ISCALE + s] if acc else b[_L_ISCALE + s]
                b[_L_MIN + s] = b[_MN + s] if acc else b[_L_MIN + s]
                b[_MN + s] = b[_T_MIN + s] if acc else b[_MN + s]
        for s in range(L):
            if b[_FLAT + s] != 0:
                b[_SCALE + s] = ZERO
            b[_THE_MIN + s] = -b[_MN + s]

    return Qkx2Lanes(_qkx2_lanes, _X, _W, _LV, _V, size, (_MX - _V) // lanes, (_XLO - _V) // lanes)


_N = 32
_FIT = qkx2_lanes(_N, LANES, False)
_qkx2_lanes = _FIT.fit
_X, _W, _V, _SIZE, _MX_ROW, _XLO_ROW = _FIT.x, _FIT.w, _FIT.v, _FIT.size, _FIT.mx_row, _FIT.xlo_row


@jit
def _k4_weights(x, w, acc):
    """weights[l] = av_x + fabsf(x[l]), av_x = sqrtf(sum_x2/32), sum_x2 += x*x from 0, for
    the lanes of x (32, lanes) into w; ``acc`` (lanes,) is scratch. Positions outer, lanes
    inner (each lane's sum in C's order), so the lanes run as vectors: lane by lane this was
    1/8 of the kernel."""
    S = x.shape[1]
    for s in range(S):
        acc[s] = ZERO
    for i in range(32):
        for s in range(S):
            acc[s] += x[i, s] * x[i, s]
    for s in range(S):
        acc[s] = np.sqrt(acc[s] / _F32_32)
    for i in range(32):
        for s in range(S):
            w[i, s] = acc[s] + abs(x[i, s])


@jit
def _k4_superblock(xb, v, s0, nmax, y, L, vals, vb):
    """The rest of quantize_row_q{4,5}_K_ref for one super-block ``xb`` (256,) whose
    eight sub-blocks were fitted in lanes s0..s0+7 of ``v``: d, dmin and the 12 scale bytes
    into y[0:16], the requantized levels into L (256,) int32; unless ``vals`` is None, the
    values the block's bytes dequantize to into vals[vb] (see _k4)."""
    max_scale = ZERO
    max_min = ZERO
    for j in range(8):
        if v[0, s0 + j] > max_scale:
            max_scale = v[0, s0 + j]
        if v[1, s0 + j] > max_min:
            max_min = v[1, s0 + j]
    inv_scale = _F32_63 / max_scale if max_scale > 0 else ZERO
    inv_min = _F32_63 / max_min if max_min > 0 else ZERO
    d16 = fp32_to_fp16(max_scale / _F32_63)
    dmin16 = fp32_to_fp16(max_min / _F32_63)
    y[0] = d16 & 0xFF
    y[1] = d16 >> 8
    y[2] = dmin16 & 0xFF
    y[3] = dmin16 >> 8
    d_read = fp16_to_fp32(d16)  # GGML_FP16_TO_FP32(y[i].d): the stored scale read back
    nmax_f = F32(nmax)
    dmin_read = fp16_to_fp32(dmin16)
    for j in range(12):
        y[4 + j] = 0
    for j in range(8):
        s = s0 + j
        ls = min(63, nearest_int(inv_scale * v[0, s]) & 0xFF)  # uint8_t ls = ...; MIN(63, ls)
        lm = min(63, nearest_int(inv_min * v[1, s]) & 0xFF)
        if j < 4:
            y[4 + j] = ls
            y[8 + j] = lm
        else:
            y[8 + j] = (ls & 0xF) | ((lm & 0xF) << 4)
            y[j] |= (ls >> 4) << 6
            y[4 + j] |= (lm >> 4) << 6
        # get_scale_min_k4(j) reads back exactly ls, lm (both <= 63)
        d = d_read * F32(ls)
        dm = dmin_read * F32(lm)
        if d == 0:  # `if (!d) continue;`: keep make_qkx2_quants' L
            for ii in range(32):
                if v[4, s] != 0:
                    L[32 * j + ii] = 0
                else:
                    L[32 * j + ii] = max(0, min(nmax, nearest_int(v[2, s] * (xb[32 * j + ii] - v[3, s]))))
        else:
            # nearest_int((x + dm)/d): a true division, as in C. d > 0, so it is monotonic in x
            # and the sub-block's smallest and largest x bound it: within NEAREST_INT_LIMIT
            # (always, but where d is tiny, or inf from an fp16 overflow) the levels are rounded
            # in float, which vectorises; the int64 route ran lane by lane.
            lo = (v[_XLO_ROW, s] + dm) / d
            hi = (v[_MX_ROW, s] + dm) / d
            if abs(lo) <= NEAREST_INT_LIMIT and abs(hi) <= NEAREST_INT_LIMIT:
                if vals is None:  # compile-time branches: the plain kernel is compiled without vals
                    for ii in range(32):
                        L[32 * j + ii] = np.int32(round_clamp((xb[32 * j + ii] + dm) / d, ZERO, nmax_f))
                else:
                    # the level in float (+0 or a whole number <= nmax: F32(L) exactly) gives
                    # the value in the same vector loop (see _k4_values)
                    vv = vals[vb]
                    for ii in range(32):
                        lf = round_clamp((xb[32 * j + ii] + dm) / d, ZERO, nmax_f)
                        L[32 * j + ii] = np.int32(lf)
                        vv[32 * j + ii] = d * lf - dm
                continue
            for ii in range(32):
                L[32 * j + ii] = max(0, min(nmax, nearest_int((xb[32 * j + ii] + dm) / d)))
        if vals is not None:
            _k4_values(L, j, d, dm, vals[vb])


@jit
def _k4_values(L, j, d, dm, vv):
    """dequantize_row_q{4,5}_K's y = d1 * q - m1 for sub-block j into vv: ``d`` is d1 =
    GGML_FP16_TO_FP32(d) * sc, ``dm`` m1 = dmin * m (both scales read back exactly ls and lm),
    q the level L (<= nmax, kept whole by the packing): the same float32 operations on the
    same operands, so the bits of dequantizing the block."""
    for ii in range(32):
        vv[32 * j + ii] = d * F32(L[32 * j + ii]) - dm


@jit
def _k4(blocks, nmax, rmin, rdelta, nstep, type_size, vals):
    """quantize_row_q{4,5}_K_ref of ``blocks`` (nb, 256); unless ``vals`` is None, also the
    values the bytes dequantize to, bit for bit, into ``vals`` (nb, 256) float32 (a compare's
    dequantization, fused: the block's scales and levels are at hand here). numba compiles one
    specialisation per argument type and drops the ``vals`` branches from the None one, so
    the plain quantizer pays nothing for them (timed: the same speed)."""
    nb = blocks.shape[0]
    out = np.empty((nb, type_size), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * LANES].reshape((_N, LANES))
    w = buf[_W:_W + _N * LANES].reshape((_N, LANES))
    v = buf[_V:_V + _NV * LANES].reshape((_NV, LANES))
    acc = np.empty(LANES, np.float32)
    L = np.empty(256, np.int32)
    per = LANES // 8
    for b0 in range(0, nb, per):
        to_lanes(blocks, b0, 32, x)
        _k4_weights(x, w, acc)
        _qkx2_lanes(buf, nmax, rmin, rdelta, nstep)
        for b in range(min(per, nb - b0)):
            y = out[b0 + b]
            _k4_superblock(blocks[b0 + b], v, 8 * b, nmax, y, L, vals, b0 + b)
            if type_size == 144:
                # Q4_K: byte 32g + l = L[64g + l] | L[64g + 32 + l] << 4
                for g in range(4):
                    for l in range(32):
                        y[16 + 32 * g + l] = L[64 * g + l] | (L[64 * g + 32 + l] << 4)
            else:
                # Q5_K: qh[j] bit 2c (2c+1) = bit 4 of L[64c + j] (L[64c + 32 + j]); qs as Q4_K
                # with those bits dropped (C's `if (l > 15) { l -= 16; qh |= m; }`, as bit
                # operations on L <= 31: with the branches this packing was 2/5 of Q5_K's time).
                for j in range(32):
                    y[16 + j] = 0
                for c in range(4):
                    for j in range(32):
                        l1 = L[64 * c + j]
                        l2 = L[64 * c + j + 32]
                        y[16 + j] |= (((l1 >> 4) & 1) | ((l2 >> 3) & 2)) << (2 * c)
                        y[48 + 32 * c + j] = (l1 & 0xF) | ((l2 & 0xF) << 4)
    return out


@jit
def q4_k(blocks):
    """quantize_row_q4_K_ref: (nb, 256) float32 C-contiguous -> (nb, 144) uint8."""
    return _k4(blocks, 15, F32(-1.0), F32_01, 20, 144, None)


@jit
def q4_k_values(blocks, vals):
    """q4_k, and into ``vals`` (nb, 256) float32 what dequantize_row_q4_K makes of its bytes."""
    return _k4(blocks, 15, F32(-1.0), F32_01, 20, 144, vals)


@jit
def q5_k(blocks):
    """quantize_row_q5_K_ref: (nb, 256) float32 C-contiguous -> (nb, 176) uint8."""
    return _k4(blocks, 31, F32(-0.5), F32_01, 15, 176, None)


@jit
def q5_k_values(blocks, vals):
    """q5_k, and into ``vals`` (nb, 256) float32 what dequantize_row_q5_K makes of its bytes."""
    return _k4(blocks, 31, F32(-0.5), F32_01, 15, 176, vals)
