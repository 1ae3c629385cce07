"""make_qkx2_quants and quantize_row_q4_K_ref / q5_K_ref, compiled (the numpy mirror is
quants/q4_k.py). Sub-blocks are fitted in lockstep, see common.LANES."""
from __future__ import annotations

import numpy as np

from .common import F32, F32_01, LANES, ONE, ZERO, fp16_to_fp32, fp32_to_fp16, jit, nearest_int, to_lanes

_F32_32 = F32(32.0)
_F32_63 = F32(63.0)


@jit
def _qkx2_lanes(x, w, nmax, rmin, rdelta, nstep, v):
    """make_qkx2_quants(n, nmax, x, w, L, &the_min, Laux, rmin, rdelta, nstep, use_mad=false)
    for the columns of the position-major ``x``, ``w`` (n, lanes).

    Out in ``v`` (scratch, (18, lanes)): row 0 scale, 1 the_min, and what regenerates L
    (needed only where the stored scale reads back as 0): 2 the iscale and 3 the min of
    the accepted trial, 4 nonzero where max == min (L = 0).
    """
    n = x.shape[0]
    ns = x.shape[1]
    scale, the_min, l_iscale, l_min, flat = v[0], v[1], v[2], v[3], v[4]
    mn, mx, sum_w, sum_x, iscale, best = v[5], v[6], v[7], v[8], v[9], v[10]
    sum_l, sum_l2, sum_xl, t_scale, t_min, t_d, cur = v[11], v[12], v[13], v[14], v[15], v[16], v[17]
    nmax_f = F32(nmax)
    # min = max = x[0]; sum_w = weights[0]; sum_x = sum_w * x[0]; then i = 1..n-1
    for s in range(ns):
        mn[s] = x[0, s]
        mx[s] = x[0, s]
        sum_w[s] = w[0, s]
        sum_x[s] = w[0, s] * x[0, s]
    for i in range(1, n):
        for s in range(ns):
            xi = x[i, s]
            wi = w[i, s]
            m = mn[s]
            mn[s] = xi if xi < m else m
            m = mx[s]
            mx[s] = xi if xi > m else m
            sum_w[s] += wi
            sum_x[s] += wi * xi
    for s in range(ns):
        m = mn[s]
        m = ZERO if m > 0 else m  # if (min > 0) min = 0
        mn[s] = m
        flat[s] = ONE if mx[s] == m else ZERO  # C returns early: L = 0, scale 0
        isc = nmax_f / (mx[s] - m)
        iscale[s] = isc
        scale[s] = ONE / isc
        l_iscale[s] = isc
        l_min[s] = m
        best[s] = ZERO
    # initial L and best_error += w * (diff*diff), diff = scale*L[i] + min - x[i]
    for i in range(n):
        for s in range(ns):
            xi = x[i, s]
            lf = F32(max(0, min(nmax, nearest_int(iscale[s] * (xi - mn[s])))))
            diff = scale[s] * lf + mn[s] - xi
            best[s] += w[i, s] * (diff * diff)
    for step in range(nstep + 1):
        num = rmin + rdelta * F32(step) + nmax_f  # (rmin + rdelta*is + nmax), left to right
        for s in range(ns):
            iscale[s] = num / (mx[s] - mn[s])  # the live min: accepted trials move it
            sum_l[s] = ZERO
            sum_l2[s] = ZERO
            sum_xl[s] = ZERO
            cur[s] = ZERO
        for i in range(n):
            for s in range(ns):
                xi = x[i, s]
                lf = F32(max(0, min(nmax, nearest_int(iscale[s] * (xi - mn[s])))))
                wl = w[i, s] * lf  # sum_l += w*l; sum_l2 += w*l*l; sum_xl += w*l*x[i]
                sum_l[s] += wl
                sum_l2[s] += wl * lf
                sum_xl[s] += wl * xi
        for s in range(ns):
            D = sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s]
            ts = (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / D
            tm = (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / D
            if tm > 0:
                tm = ZERO
                ts = sum_xl[s] / sum_l2[s]
            t_scale[s] = ts
            t_min[s] = tm
            t_d[s] = D
        # cur_error over Laux, recomputed from iscale and min rather than stored
        for i in range(n):
            for s in range(ns):
                xi = x[i, s]
                lf = F32(max(0, min(nmax, nearest_int(iscale[s] * (xi - mn[s])))))
                diff = t_scale[s] * lf + t_min[s] - xi
                cur[s] += w[i, s] * (diff * diff)
        for s in range(ns):
            # `if (D > 0) { ... if (cur_error < best_error) {...} }`; lanes that returned
            # early (max == min) ran on inf/NaN and are never accepted
            if t_d[s] > 0 and cur[s] < best[s] and flat[s] == 0:
                best[s] = cur[s]
                scale[s] = t_scale[s]
                l_iscale[s] = iscale[s]
                l_min[s] = mn[s]
                mn[s] = t_min[s]
    for s in range(ns):
        if flat[s] != 0:
            scale[s] = ZERO
        the_min[s] = -mn[s]


@jit
def _k4_weights(x, w):
    # sum_x2 += x*x (from 0); av_x = sqrtf(sum_x2/32); weights[l] = av_x + fabsf(x[l])
    for s in range(x.shape[1]):
        sum_x2 = ZERO
        for i in range(32):
            sum_x2 += x[i, s] * x[i, s]
        av_x = np.sqrt(sum_x2 / _F32_32)
        for i in range(32):
            w[i, s] = av_x + abs(x[i, s])


@jit
def _k4_superblock(xb, v, s0, nmax, y, L):
    """The rest of quantize_row_q{4,5}_K_ref for one super-block ``xb`` (256,) whose
    eight sub-blocks were fitted in lanes s0..s0+7 of ``v``: d, dmin and the 12 scale bytes
    into y[0:16], the requantized levels into L (256,)."""
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
        if d == 0:  # `if (!d) continue;`: keep make_qkx2_quants' L
            for ii in range(32):
                if v[4, s] != 0:
                    L[32 * j + ii] = 0
                else:
                    L[32 * j + ii] = max(0, min(nmax, nearest_int(v[2, s] * (xb[32 * j + ii] - v[3, s]))))
            continue
        dm = dmin_read * F32(lm)
        for ii in range(32):
            # nearest_int((x + dm)/d): a true division, as in C
            L[32 * j + ii] = max(0, min(nmax, nearest_int((xb[32 * j + ii] + dm) / d)))


@jit
def _k4(blocks, nmax, rmin, rdelta, nstep, type_size):
    nb = blocks.shape[0]
    out = np.empty((nb, type_size), np.uint8)
    x = np.empty((32, LANES), np.float32)
    w = np.empty((32, LANES), np.float32)
    v = np.empty((18, LANES), np.float32)
    L = np.empty(256, np.int64)
    per = LANES // 8
    for b0 in range(0, nb, per):
        to_lanes(blocks, b0, 32, x)
        _k4_weights(x, w)
        _qkx2_lanes(x, w, nmax, rmin, rdelta, nstep, v)
        for b in range(min(per, nb - b0)):
            y = out[b0 + b]
            _k4_superblock(blocks[b0 + b], v, 8 * b, nmax, y, L)
            if type_size == 144:
                # Q4_K: byte 32g + l = L[64g + l] | L[64g + 32 + l] << 4
                for g in range(4):
                    for l in range(32):
                        y[16 + 32 * g + l] = L[64 * g + l] | (L[64 * g + 32 + l] << 4)
            else:
                # Q5_K: qh[j] bit 2c (2c+1) = bit 4 of L[64c + j] (L[64c + 32 + j]); qs as Q4_K
                for j in range(32):
                    y[16 + j] = 0
                m1 = 1
                m2 = 2
                for c in range(4):
                    for j in range(32):
                        l1 = L[64 * c + j]
                        if l1 > 15:
                            l1 -= 16
                            y[16 + j] |= m1
                        l2 = L[64 * c + j + 32]
                        if l2 > 15:
                            l2 -= 16
                            y[16 + j] |= m2
                        y[48 + 32 * c + j] = l1 | (l2 << 4)
                    m1 <<= 2
                    m2 <<= 2
    return out


@jit
def q4_k(blocks):
    """quantize_row_q4_K_ref: (nb, 256) float32 C-contiguous -> (nb, 144) uint8."""
    return _k4(blocks, 15, F32(-1.0), F32_01, 20, 144)


@jit
def q5_k(blocks):
    """quantize_row_q5_K_ref: (nb, 256) float32 C-contiguous -> (nb, 176) uint8."""
    return _k4(blocks, 31, F32(-0.5), F32_01, 15, 176)
