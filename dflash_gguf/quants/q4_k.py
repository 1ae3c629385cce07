"""Q4_K (quantize_row_q4_K_ref) and the machinery it shares with Q5_K.

256-value super-blocks of eight 32-value sub-blocks, each fitted with make_qkx2_quants.
Arrays are position-major, ``x[i, s]`` = element i of sub-block s: every per-position slice
is contiguous, C's loops over i become operations along axis 0 (sums in C's order, see
base.seq_sum) and everything is vectorised across the chunk's sub-blocks. The 21 trial steps
stay a Python loop, as they depend on each other through the live ``min``.

When numba is available the compiled kernels in ``_numba/q4_k.py`` run instead (same bytes,
several times faster); this file is the fallback and the second, independent implementation
the tests hold the kernels against.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from gguf import GGMLQuantizationType

from .base import F32, NEAREST_INT_LIMIT, BlockQuant, fp16_bytes, fp16_round, nearest_int, seq_sum


class Qkx2Fit(NamedTuple):
    scale: np.ndarray  # (ns,) the returned scale
    the_min: np.ndarray  # (ns,) *the_min = -min
    # make_qkx2_quants' L is only used when the stored scale reads back as 0 (rare), so
    # instead of keeping it we keep what regenerates it: the iscale and min of the accepted trial.
    l_iscale: np.ndarray
    l_min: np.ndarray
    flat: np.ndarray  # max == min: L = 0


def _levels_literal(x: np.ndarray, mn: np.ndarray, iscale: np.ndarray, nmax: int) -> np.ndarray:
    # MAX(0, MIN(nmax, nearest_int(iscale*(x[i] - min)))), wrap-around included.
    return np.clip(nearest_int((x - mn) * iscale), 0, nmax).astype(np.float32)


# Per-column vectors (ns,) broadcast over the rows of the position-major (n, ns) arrays: each
# row is one contiguous inner loop, as fast as a same-shape operation.
def _levels_into(
    t: np.ndarray, x: np.ndarray, mn: np.ndarray, iscale: np.ndarray,
    rng: np.ndarray, xmin: np.ndarray, nmax: int, num: np.float32,
) -> None:
    """t = clamp(nearest_int(iscale*(x - min)), 0, nmax) as float32, for
    iscale = num/rng, rng = max - min.

    Rounding is monotonic, so each column's t lies between its values at x = xmin (lo) and
    x = max (<= num*(1+u)^2 for iscale > 0). While that range is inside +-4194303,
    nearest_int == rint, the low clamp is max(x, min) - min (0 exactly where x < min), and
    the high clamp is applied only if it can trigger. Otherwise (tiny or subnormal ranges)
    the literal bit trick runs.
    """
    if not (rng.min() >= F32(1e-37) and ((xmin - mn) * iscale).min() >= -NEAREST_INT_LIMIT):
        t[...] = _levels_literal(x, mn, iscale, nmax)  # also every NaN/inf case
        return
    np.maximum(x, mn, out=t)
    np.subtract(t, mn, out=t)  # x[i] - min, or +0 where that is negative
    np.multiply(t, iscale, out=t)  # iscale*(x[i] - min)
    np.rint(t, out=t)
    if float(num) * (1 + 1e-6) >= nmax + 0.5:
        np.minimum(t, F32(nmax), out=t)


def _sq_error_inplace(t: np.ndarray, x: np.ndarray, w: np.ndarray, scale: np.ndarray, mn: np.ndarray) -> np.ndarray:
    # diff = scale*L[i] + min - x[i]; err += w*(diff*diff), from 0. Overwrites t (= L).
    # Every term is >= +0 (a square times a weight), so the zero-sign conventions agree.
    np.multiply(t, scale, out=t)
    np.add(t, mn, out=t)
    np.subtract(t, x, out=t)
    np.multiply(t, t, out=t)
    np.multiply(t, w, out=t)
    return seq_sum(t, nonneg=True)


def _mad_error_inplace(t: np.ndarray, x: np.ndarray, w: np.ndarray, scale: np.ndarray, mn: np.ndarray) -> np.ndarray:
    # use_mad: diff = fabsf(scale*L[i] + min - x[i]); err += w*diff, from 0. Overwrites t (= L).
    # Every term is >= +0 (a weight times an absolute value), so the zero-sign conventions agree.
    np.multiply(t, scale, out=t)
    np.add(t, mn, out=t)
    np.subtract(t, x, out=t)
    np.abs(t, out=t)
    np.multiply(t, w, out=t)
    return seq_sum(t, nonneg=True)


def make_qkx2_quants(
    x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int, use_mad: bool = False
) -> Qkx2Fit:
    """make_qkx2_quants(n, nmax, x, w, L, &the_min, Laux, rmin, rdelta, nstep, use_mad), for every
    sub-block (column) of the position-major ``x``, ``w`` at once. ``use_mad``: the trials'
    error is the absolute one (Q2_K), not the squared one (Q4_K, Q5_K)."""
    err = _mad_error_inplace if use_mad else _sq_error_inplace
    xmin = x.min(axis=0)
    mx = x.max(axis=0)
    sum_w = seq_sum(w, from_zero=False)  # sum_w = w[0]; sum_w += w[i]
    sum_x = seq_sum(w * x, from_zero=False)  # sum_x = sum_w*x[0]; sum_x += w[i]*x[i]
    mn = np.where(xmin > 0, F32(0), xmin)  # if (min > 0) min = 0
    flat = mx == mn  # all L = 0, scale 0
    if not flat.any():
        return Qkx2Fit(*_qkx2_trials(x, w, xmin, mx, mn, sum_w, sum_x, nmax, rmin, rdelta, nstep, err), flat)
    # Constant columns (e.g. all-zero rows) leave the trial loop, which then never divides by 0.
    live = np.flatnonzero(~flat)
    scale = np.zeros_like(mx)
    l_iscale = np.full_like(mx, F32(nmax))
    l_min = mn.copy()
    the_min = -mn
    if live.size:
        fit = _qkx2_trials(
            np.ascontiguousarray(x[:, live]), np.ascontiguousarray(w[:, live]), xmin[live], mx[live], mn[live],
            sum_w[live], sum_x[live], nmax, rmin, rdelta, nstep, err,
        )
        scale[live], the_min[live], l_iscale[live], l_min[live] = fit
    return Qkx2Fit(scale, the_min, l_iscale, l_min, flat)


def _trial_numerators(nmax: int, rmin: float, rdelta: float, nstep: int) -> list[np.float32]:
    # (rmin + rdelta*is) + nmax in float32, as C evaluates `rmin + rdelta*is + nmax`
    nmax_f, rmin_f, rdelta_f = F32(nmax), F32(rmin), F32(rdelta)
    return [(rmin_f + rdelta_f * F32(step)) + nmax_f for step in range(nstep + 1)]


def _qkx2_trials(x, w, xmin, mx, mn, sum_w, sum_x, nmax, rmin, rdelta, nstep, err=_sq_error_inplace):
    nmax_f = F32(nmax)
    t = np.empty_like(x)  # L, then the error terms
    p = np.empty_like(x)  # products

    rng = mx - mn
    iscale = nmax_f / rng
    scale = F32(1) / iscale
    _levels_into(t, x, mn, iscale, rng, xmin, nmax, nmax_f)
    best = err(t, x, w, scale, mn)
    # What regenerates the accepted L: per trial its iscale and min, and per column the last
    # accepted trial (0: the initial L). Cheaper than selecting three arrays every trial.
    hist_iscale = [iscale]
    hist_min = [mn]
    hist_scale = [scale]
    last = np.zeros(mx.shape, np.int8)

    for k, num in enumerate(_trial_numerators(nmax, rmin, rdelta, nstep), start=1):
        # iscale = (rmin + rdelta*is + nmax)/(max - min), with the *current* min: it is a live
        # variable that accepted trials overwrite.
        rng = mx - mn
        iscale = num / rng
        _levels_into(t, x, mn, iscale, rng, xmin, nmax, num)
        # Four (n, ns) buffers (x, w, t, p); w*l is recomputed rather than kept in a fifth
        # one (measured no slower).
        np.multiply(w, t, out=p)
        sum_l = seq_sum(p, nonneg=True)  # sum_l += w*l  (w >= 0, L >= +0)
        np.multiply(p, x, out=p)
        sum_xl = seq_sum(p)  # sum_xl += w*l*x[i]
        np.multiply(w, t, out=p)
        np.multiply(p, t, out=p)
        sum_l2 = seq_sum(p, nonneg=True)  # sum_l2 += w*l*l  (terms >= +0)
        D = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
        pos = this_min > 0
        if pos.any():  # if (this_min > 0) { this_min = 0; this_scale = sum_xl/sum_l2; }
            this_min = np.where(pos, F32(0), this_min)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
        cur = err(t, x, w, this_scale, this_min)
        acc = cur < best
        acc &= D > 0
        np.putmask(best, acc, cur)
        np.putmask(last, acc, k)
        hist_iscale.append(iscale)
        hist_min.append(mn)
        hist_scale.append(this_scale)
        mn = np.where(acc, this_min, mn)

    cols = np.arange(mx.size)
    pick = lambda h: np.stack(h)[last, cols]  # noqa: E731
    return pick(hist_scale), -mn, pick(hist_iscale), pick(hist_min)


def qkx2_levels(x: np.ndarray, fit: Qkx2Fit, cols: np.ndarray, nmax: int) -> np.ndarray:
    """make_qkx2_quants' own L for the sub-blocks ``cols`` (0 where max == min)."""
    L = _levels_literal(x[:, cols], fit.l_min[cols], fit.l_iscale[cols], nmax)
    L[:, fit.flat[cols]] = 0
    return L.astype(np.int32)


def k4_scales(scales: np.ndarray, mins: np.ndarray):
    """The super-block part shared by Q4_K/Q5_K: 6-bit sub-block scales and mins, fp16 d/dmin.

    ``scales``, ``mins`` are (nb, 8). Returns ls, lm (nb, 8) uint8, d, dmin (nb,) float32.
    """
    ms = np.fmax.reduce(scales, axis=1)  # `if (scale > max_scale)` skips a NaN, like fmax
    mm = np.fmax.reduce(mins, axis=1)
    max_scale = np.where(ms > 0, ms, F32(0))  # `if (scale > max_scale)` from 0
    max_min = np.where(mm > 0, mm, F32(0))
    inv_scale = np.where(max_scale > 0, F32(63) / np.where(max_scale > 0, max_scale, F32(1)), F32(0))
    inv_min = np.where(max_min > 0, F32(63) / np.where(max_min > 0, max_min, F32(1)), F32(0))
    # uint8_t ls = nearest_int(inv_scale*scales[j]); ls = MIN(63, ls);  (uint8 wrap first)
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63).astype(np.uint8)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63).astype(np.uint8)
    return ls, lm, max_scale / F32(63), max_min / F32(63)


def pack_k4_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """12 bytes: 0-3 ls[0:4] | hi2(ls[4:8]) << 6; 4-7 lm[0:4] | hi2(lm[4:8]) << 6;
    8-11 lo4(ls[4:8]) | lo4(lm[4:8]) << 4 (the inverse of get_scale_min_k4)."""
    out = np.empty((ls.shape[0], 12), np.uint8)
    out[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    out[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:] & 0x0F) | ((lm[:, 4:] & 0x0F) << 4)
    return out


def fit_k_subblocks(blocks: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """Steps shared by quantize_row_q4_K_ref / q5_K_ref up to the requantized levels.

    Returns (d16, dmin16, scale bytes (nb,12), L (32, nb*8) int32 position-major).
    """
    nb = blocks.shape[0]
    x = np.ascontiguousarray(blocks.reshape(nb * 8, 32).T)  # (32, ns)
    # weights[l] = av_x + fabsf(x[l]) with av_x = sqrtf(sum_x2/32)
    sum_x2 = seq_sum(x * x, nonneg=True)
    av_x = np.sqrt(sum_x2 / F32(32))
    w = np.abs(x)
    np.add(av_x, w, out=w)
    fit = make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep)
    del w

    ls, lm, d, dmin = k4_scales(fit.scale.reshape(nb, 8), fit.the_min.reshape(nb, 8))
    d16, dmin16 = fp16_bytes(d), fp16_bytes(dmin)
    # Requantize against the stored scales: d = fp16(d)*sc; dm = fp16(dmin)*m;
    # l = nearest_int((x + dm)/d) -- a true division, not a reciprocal multiply.
    dj = (fp16_round(d)[:, None] * ls.astype(np.float32)).reshape(-1)
    dmj = (fp16_round(dmin)[:, None] * lm.astype(np.float32)).reshape(-1)
    t = x + dmj
    np.divide(t, dj, out=t)
    L = np.clip(nearest_int(t), 0, nmax)
    keep = np.flatnonzero(dj == 0)  # `if (!d) continue;` keeps make_qkx2_quants' L
    if keep.size:
        L[:, keep] = qkx2_levels(x, fit, keep, nmax)
    return d16, dmin16, pack_k4_scales(ls, lm), L


class Q4_K(BlockQuant, qtype=GGMLQuantizationType.Q4_K):
    chunk_values = 1 << 18
    numba_kernel = "q4_k"
    numpy_search = True

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        d16, dmin16, scales, L = fit_k_subblocks(blocks, 15, -1.0, 0.1, 20)
        # byte 32g + l = L[64g + l] | L[64g + 32 + l] << 4: sub-block 2g low, 2g+1 high nibble
        Lb = L.T.reshape(nb, 4, 2, 32).astype(np.uint8)
        qs = (Lb[:, :, 0, :] | (Lb[:, :, 1, :] << 4)).reshape(nb, 128)
        return np.concatenate([d16, dmin16, scales, qs], axis=1)


class Q5_K(BlockQuant, qtype=GGMLQuantizationType.Q5_K):
    chunk_values = 1 << 18
    numba_kernel = "q5_k"
    numpy_search = True

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        d16, dmin16, scales, L = fit_k_subblocks(blocks, 31, -0.5, 0.1, 15)
        Lb = L.T.reshape(nb, 4, 2, 32).astype(np.uint8)  # chunk c of 64 values, half, l
        qs = ((Lb[:, :, 0, :] & 0x0F) | ((Lb[:, :, 1, :] & 0x0F) << 4)).reshape(nb, 128)
        # qh[l] bit 2c = bit 4 of L[64c + l], bit 2c+1 = bit 4 of L[64c + 32 + l]
        hi = (Lb >> 4) & 1  # (nb, 4, 2, 32)
        shifts = (2 * np.arange(4, dtype=np.uint8)[:, None] + np.arange(2, dtype=np.uint8)[None, :])
        qh = np.bitwise_or.reduce((hi << shifts[None, :, :, None]).reshape(nb, 8, 32), axis=1)
        return np.concatenate([d16, dmin16, scales, qh.astype(np.uint8), qs], axis=1)
