"""make_qx_quants and quantize_row_q6_K_ref, compiled (the numpy mirror is quants/q6_k.py).
Sub-blocks are fitted in lockstep, see common.LANES."""
from __future__ import annotations

import numpy as np

from .common import F32, F32_01, LANES, ONE, ZERO, fp16_to_fp32, fp32_to_fp16, jit, nearest_int, to_lanes

_F32_M128 = F32(-128.0)
_GROUP_MAX_EPS = F32(1e-15)


@jit
def _qx_lanes(x, nmax, v):
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL) for the columns of the
    position-major x (n, lanes), in lockstep as q4_k._qkx2_lanes.

    Out in ``v`` ((9, lanes) scratch): row 0 the scale, 1 the iscale of the accepted trial
    (regenerates L where the stored scale reads back as 0), 2 nonzero where every |x| < eps
    (C returns early with L = 0).
    """
    n = x.shape[0]
    ns = x.shape[1]
    scale, l_iscale, zero, mx, amax = v[0], v[1], v[2], v[3], v[4]
    iscale, sumlx, suml2, best = v[5], v[6], v[7], v[8]
    for s in range(ns):
        amax[s] = ZERO
        mx[s] = ZERO
    for i in range(n):
        for s in range(ns):
            ax = abs(x[i, s])
            up = ax > amax[s]  # if (ax > amax) { amax = ax; max = x[i]; }
            amax[s] = ax if up else amax[s]
            mx[s] = x[i, s] if up else mx[s]
    for s in range(ns):
        zero[s] = ONE if amax[s] < _GROUP_MAX_EPS else ZERO  # C returns 0 early, L = 0
        iscale[s] = F32(-nmax) / mx[s]  # float iscale = -nmax / max
        sumlx[s] = ZERO
        suml2[s] = ZERO
    for i in range(n):
        for s in range(ns):
            xi = x[i, s]
            lf = F32(max(-nmax, min(nmax - 1, nearest_int(iscale[s] * xi))))
            w = xi * xi  # rmse_type 1
            sumlx[s] += w * xi * lf  # sumlx += w*x[i]*l
            suml2[s] += w * lf * lf  # suml2 += w*l*l
    for s in range(ns):
        sc = sumlx[s] / suml2[s] if suml2[s] != 0 else ZERO
        scale[s] = sc
        best[s] = sc * sumlx[s]
        l_iscale[s] = iscale[s]
    for step in range(-9, 10):
        if step == 0:
            continue
        num = F32(nmax) + F32_01 * F32(step)
        for s in range(ns):
            iscale[s] = -num / mx[s]  # iscale = -(nmax + 0.1f*is) / max
            sumlx[s] = ZERO
            suml2[s] = ZERO
        for i in range(n):
            for s in range(ns):
                xi = x[i, s]
                lf = F32(max(-nmax, min(nmax - 1, nearest_int(iscale[s] * xi))))
                w = xi * xi
                sumlx[s] += w * xi * lf
                suml2[s] += w * lf * lf
        for s in range(ns):
            # if (suml2 > 0 && sumlx*sumlx > best*suml2) { L = ...; scale = sumlx/suml2; best = scale*sumlx; }
            if suml2[s] > 0 and sumlx[s] * sumlx[s] > best[s] * suml2[s] and zero[s] == 0:
                sc = sumlx[s] / suml2[s]
                scale[s] = sc
                best[s] = sc * sumlx[s]
                l_iscale[s] = iscale[s]
    for s in range(ns):
        if zero[s] != 0:
            scale[s] = ZERO


@jit
def q6_k(blocks):
    """quantize_row_q6_K_ref: (nb, 256) float32 C-contiguous -> (nb, 210) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 210), np.uint8)
    x = np.empty((16, LANES), np.float32)
    v = np.empty((9, LANES), np.float32)
    L = np.empty(256, np.int64)
    sc = np.empty(16, np.int64)
    per = LANES // 16
    for b0 in range(0, nb, per):
        to_lanes(blocks, b0, 16, x)
        _qx_lanes(x, 32, v)
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
                    continue
                for ii in range(16):
                    # nearest_int(x[i]/d): a true division
                    L[16 * j + ii] = max(-32, min(31, nearest_int(xb[16 * j + ii] / d))) + 32
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
