"""Q6_K (quantize_row_q6_K_ref): 256-value super-blocks of sixteen 16-value sub-blocks,
each fitted with make_qx_quants(16, 32, rmse_type=1, qw=NULL).

Position-major layout as in q4_k.py: ``x[i, s]`` = element i of sub-block s. With numba
installed the compiled kernel in ``_numba/q6_k.py`` runs instead (same bytes).
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from .base import F32, BlockQuant, first_absmax, fp16_bytes, fp16_round, nearest_int, seq_sum

GROUP_MAX_EPS = F32(1e-15)


def _first_absmax_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # `abs_scale = fabsf(scale); if (abs_scale > max_abs_scale) {...}` from 0, literally: a NaN
    # scale (possible once x*x overflows) is skipped by the comparison, as in C.
    amax = np.zeros(scales.shape[0], np.float32)
    mx = np.zeros(scales.shape[0], np.float32)
    for j in range(scales.shape[1]):
        a = np.abs(scales[:, j])
        upd = a > amax
        amax = np.where(upd, a, amax)
        mx = np.where(upd, scales[:, j], mx)
    return amax, mx


def make_qx_quants(x: np.ndarray, nmax: int):
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL) for every column of ``x``.

    Returns (scale, l_iscale, zero): the scale, the iscale that regenerates the chosen L
    (L = nmax + clamp(nearest_int(iscale*x), -nmax, nmax-1)), and the all-zero mask (L = 0).
    """
    amax, mx = first_absmax(x, axis=0)
    zero = amax < GROUP_MAX_EPS
    live = ~zero
    mx_safe = np.where(zero, F32(1), mx)  # all-zero columns return early in C
    w = x * x  # rmse_type 1: w = x*x
    wx = w * x  # w*x[i], the left factor of sumlx's w*x[i]*l
    t = np.empty_like(x)
    p = np.empty_like(x)  # products
    lo_clip, hi_clip = F32(-nmax), F32(nmax - 1)
    # Which clamp sides can trigger. t = iscale*x[i] with |iscale| = (nmax + 0.1*is)/amax, so
    # (monotonic rounding) t >= -(nmax + 0.1*is)(1+u)^2 at the column's extreme, and on the
    # other side t <= (nmax + 0.1*is) * opp (1+u)^2, opp = largest |x| of the opposite sign
    # over amax. |t| <= ~nmax + 1 keeps rint == nearest_int. Deciding from these bounds only
    # skips a clamp that provably changes nothing.
    with np.errstate(all="ignore"):
        opposite = np.maximum(x * -np.sign(mx_safe), F32(0)).max(axis=0)  # largest opposite-sign |x|
        ratio = np.where(live, opposite / np.where(live, amax, F32(1)), F32(0))
    opp = float(ratio.max())

    def sums(iscale: np.ndarray, num: float) -> tuple[np.ndarray, np.ndarray]:
        # l = MAX(-nmax, MIN(nmax-1, nearest_int(iscale*x[i])))
        np.multiply(x, iscale, out=t)  # (ns,) broadcast over the rows
        np.rint(t, out=t)
        low = num * (1 + 1e-6) >= -float(lo_clip) + 0.5
        high = num * opp * (1 + 1e-6) >= float(hi_clip) + 0.5
        if low and high:
            np.clip(t, lo_clip, hi_clip, out=t)
        elif low:
            np.maximum(t, lo_clip, out=t)
        elif high:
            np.minimum(t, hi_clip, out=t)
        np.multiply(wx, t, out=p)
        sumlx = seq_sum(p)  # sumlx += w*x[i]*l
        np.multiply(w, t, out=p)
        np.multiply(p, t, out=p)
        suml2 = seq_sum(p, nonneg=True)  # suml2 += w*l*l  (terms >= +0)
        return sumlx, suml2

    iscale = F32(-nmax) / mx_safe  # float iscale = -nmax / max
    sumlx, suml2 = sums(iscale, float(nmax))
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F32(1)), F32(0))
    best = scale * sumlx
    any_zero = bool(zero.any())
    hist = [iscale]
    last = np.zeros(x.shape[1], np.int8)
    for k, num in enumerate(_QX_NUMS[nmax], start=1):
        iscale = -num / mx_safe  # -(nmax + 0.1f*is) / max
        sumlx, suml2 = sums(iscale, float(num))
        # if (suml2 > 0 && sumlx*sumlx > best*suml2) { scale = sumlx/suml2; best = scale*sumlx; }
        acc = sumlx * sumlx > best * suml2
        acc &= suml2 > 0
        if any_zero:
            acc &= live
        if acc.any():
            np.putmask(scale, acc, sumlx / suml2)
            np.putmask(best, acc, scale * sumlx)
            np.putmask(last, acc, k)
        hist.append(iscale)
    l_iscale = np.stack(hist)[last, np.arange(x.shape[1])]
    return np.where(zero, F32(0), scale), l_iscale, zero


# nmax + 0.1f*is for is = -9..9 without 0, in float32 (the C expression's order)
_QX_NUMS = {32: [F32(32) + F32(0.1) * F32(i) for i in (*range(-9, 0), *range(1, 10))]}


class Q6_K(BlockQuant, qtype=GGMLQuantizationType.Q6_K):
    chunk_values = 1 << 18
    numba_kernel = "q6_k"
    numpy_search = True

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        x = np.ascontiguousarray(blocks.reshape(nb * 16, 16).T)  # (16, ns)
        scale, l_iscale, zero = make_qx_quants(x, 32)
        scales = scale.reshape(nb, 16)

        # max_scale: the first scale of largest magnitude (strict >, from 0)
        max_abs, max_scale = _first_absmax_scales(scales)
        empty = max_abs < GROUP_MAX_EPS  # whole block stored as zeros
        ms = np.where(empty, F32(-1), max_scale)
        iscale = F32(-128) / ms
        d = F32(1) / iscale  # d = fp16(1/iscale), literally the reciprocal
        # scales[ib] = MIN(127, nearest_int(iscale*scales[ib])), stored as int8
        sc = np.minimum(nearest_int(iscale[:, None] * scales), 127).astype(np.int8)
        sc[empty] = 0

        dk = (fp16_round(d)[:, None] * sc.astype(np.float32)).reshape(-1)  # (ns,)
        dk[np.repeat(empty, 16)] = 0
        q = x / dk  # nearest_int(x[i]/d): a true division
        L = np.clip(nearest_int(q), -32, 31) + 32
        keep = np.flatnonzero(dk == 0)  # `if (!d) continue;` keeps make_qx_quants' L
        if keep.size:
            xk = x[:, keep]
            Lk = np.clip(nearest_int(xk * l_iscale[keep]), -32, 31) + 32
            Lk[:, zero[keep]] = 0  # all-zero sub-block: L = 0, not 32
            L[:, keep] = Lk

        # ql/qh: half h (values 128h..), l < 32: ql[64h+l] = q[l] | q[l+64] << 4,
        # ql[64h+32+l] = q[l+32] | q[l+96] << 4, qh[32h+l] = hi2 of q[l], q[l+32], q[l+64], q[l+96]
        Lb = L.T.reshape(nb, 2, 4, 32).astype(np.uint8)
        lo = Lb & 0x0F
        ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=2)
        hi = Lb >> 4
        qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)
        out = np.concatenate(
            [ql.reshape(nb, 128), qh.reshape(nb, 64), sc.view(np.uint8), fp16_bytes(np.where(empty, F32(0), d))],
            axis=1,
        )
        out[empty] = 0  # memset(&y[i], 0, sizeof(block_q6_K))
        return out
