"""Q3_K (quantize_row_q3_K_ref): 256-value super-blocks of sixteen 16-value sub-blocks,
each fitted with make_q3_quants(16, 4, x, L, do_rmse=true), then one fp16 super-block scale
and sixteen 6-bit signed sub-block scales; levels -4..3 stored as 2 low bits (qs) plus a
high bit (hmask).

Position-major layout as in q4_k.py / q6_k.py: ``x[i, s]`` = element i of sub-block s, so C's
loops over i are steps along axis 0, vectorised across all sub-blocks of the chunk.

make_q3_quants' do_rmse refinement is a coordinate search: up to 5 sweeps over i, each
position trying the level that is best given the others, accepted on a strict improvement of
sumlx^2/suml2. Each column's sweep only depends on its own state, and a sweep that changes
nothing leaves the state as it found it (so every later sweep would change nothing either):
once no column changes in a sweep, the loop stops; until then columns that have converged
are dropped from the working set.

When numba is available the compiled kernel in ``_numba/k_low.py`` runs instead (same bytes,
several times faster); this file is the fallback and the second, independent implementation
the tests hold the kernel against.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from .base import F32, BlockQuant, first_absmax, fp16_bytes, fp16_round, nearest_int, seq_sum
from .q6_k import GROUP_MAX_EPS, _first_absmax_scales

NMAX = 4


def _clip_level(v: np.ndarray) -> np.ndarray:
    # MAX(-nmax, MIN(nmax-1, nearest_int(v))) as float32. Literal nearest_int: v = x*sl2/slx
    # is unbounded (slx can be tiny), where the bit trick wraps and NaN gives 0.
    return np.clip(nearest_int(v), -NMAX, NMAX - 1).astype(np.float32)


def make_q3_quants(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """make_q3_quants(16, 4, x, L, do_rmse=true) for every column of the position-major ``x``.

    Returns (scale (ns,), L (n, ns) int32 in 0..7, or 0 for an all-zero column).
    """
    n = x.shape[0]
    amax, mx = first_absmax(x, axis=0)
    zero = amax < GROUP_MAX_EPS  # all zero: L = 0 (not nmax), scale 0
    mx_safe = np.where(zero, F32(1), mx)
    iscale = F32(-NMAX) / mx_safe  # float iscale = -nmax / max  (int -4 converted first)
    w = x * x  # float w = x[i]*x[i]
    wx = w * x  # the w*x[i] of `w*x[i]*l`, evaluated left to right
    L = _clip_level(x * iscale)
    # sumlx += w*x[i]*l; suml2 += w*l*l: sequential, from 0. (w*l)*l >= +0 (or NaN).
    sumlx = seq_sum(wx * L)
    suml2 = seq_sum((w * L) * L, nonneg=True)

    # The refinement runs on the columns still changing: `act` indexes them.
    act = np.flatnonzero(~zero)
    for _ in range(5):
        if act.size == 0:
            break
        xa, wa, wxa = x[:, act], w[:, act], wx[:, act]
        La = L[:, act]
        slx_all, sl2_all = sumlx[act], suml2[act]
        changed = np.zeros(act.size, bool)
        for i in range(n):
            Li = La[i]
            slx = slx_all - wxa[i] * Li  # float slx = sumlx - w*x[i]*L[i]
            try_it = slx > 0  # if (slx > 0)
            sl2 = sl2_all - (wa[i] * Li) * Li  # sl2 = suml2 - w*L[i]*L[i]
            new_l = _clip_level((xa[i] * sl2) / slx)  # nearest_int(x[i]*sl2/slx)
            try_it &= new_l != Li  # if (new_l != L[i])
            slx += wxa[i] * new_l  # slx += w*x[i]*new_l
            sl2 += (wa[i] * new_l) * new_l  # sl2 += w*new_l*new_l
            # if (sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2): left to right, no FMA
            acc = try_it & (sl2 > 0)
            acc &= ((slx * slx) * sl2_all) > ((slx_all * slx_all) * sl2)
            if acc.any():
                np.putmask(Li, acc, new_l)
                np.putmask(slx_all, acc, slx)
                np.putmask(sl2_all, acc, sl2)
                changed |= acc
        L[:, act] = La
        sumlx[act], suml2[act] = slx_all, sl2_all
        act = act[changed]

    scale = np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, F32(1)), F32(0))
    Li = L.astype(np.int32) + NMAX
    Li[:, zero] = 0
    return np.where(zero, F32(0), scale), Li


def pack_q3_scales(l: np.ndarray) -> np.ndarray:
    """12 bytes from the 6-bit codes l (nb, 16): byte j < 8 = lo4(l[j]) | lo4(l[j+8]) << 4;
    byte 8 + k = OR over q of hi2(l[4q + k]) << 2q."""
    out = np.empty((l.shape[0], 12), np.uint8)
    out[:, :8] = (l[:, :8] & 0xF) | ((l[:, 8:] & 0xF) << 4)
    hi = (l >> 4).reshape(-1, 4, 4)  # [block, q, k]
    out[:, 8:] = hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)
    return out


def pack_2bit(lo: np.ndarray) -> np.ndarray:
    """qs[32h + l] = L[128h+l] | L[128h+32+l] << 2 | L[128h+64+l] << 4 | L[128h+96+l] << 6,
    for levels (nb, 256) in 0..3 -> (nb, 64) (Q2_K and Q3_K's qs)."""
    q = lo.reshape(-1, 2, 4, 32).astype(np.uint8)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(-1, 64)


class Q3_K(BlockQuant, qtype=GGMLQuantizationType.Q3_K):
    chunk_values = 1 << 18
    numba_kernel = "q3_k"
    numpy_search = True

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        x = np.ascontiguousarray(blocks.reshape(nb * 16, 16).T)  # (16, ns)
        scale, L = make_q3_quants(x)
        scales = scale.reshape(nb, 16)

        # max_scale: the first scale of largest magnitude (strict >, from 0; skips NaN)
        _, max_scale = _first_absmax_scales(scales)
        live = max_scale != 0  # if (max_scale); else scales stay memset 0 and d = 0
        iscale = F32(-32) / np.where(live, max_scale, F32(1))  # -32.f/max_scale
        # int8_t l = nearest_int(iscale*scales[j]): the int -> int8 conversion wraps
        l8 = ((nearest_int(iscale[:, None] * scales) + 128) & 0xFF) - 128
        l = np.where(live[:, None], np.clip(l8, -32, 31) + 32, 0)
        d = np.where(live, F32(1) / iscale, F32(0))  # fp16(1/iscale): the reciprocal, literally

        # Requantize against the stored scale: d = fp16(d) * sc, sc = code - 32 (-32 for a
        # memset block, where fp16(d) = 0); nearest_int(x/d), a true division.
        dj = (fp16_round(d)[:, None] * (l - 32).astype(np.float32)).reshape(-1)
        Lq = np.clip(nearest_int(x / dj), -NMAX, NMAX - 1) + NMAX
        keep = dj == 0  # `if (!d) continue;` keeps make_q3_quants' L (NaN d requantizes)
        Lq[:, keep] = L[:, keep]

        Lb = Lq.T.reshape(nb, 256)
        hi = (Lb > 3).reshape(nb, 8, 32).astype(np.uint8)  # bit k of hmask[m]: value 32k + m
        hmask = np.bitwise_or.reduce(hi << np.arange(8, dtype=np.uint8)[None, :, None], axis=1)
        qs = pack_2bit(Lb & 3)  # L[j] -= 4 where L[j] > 3
        return np.concatenate([hmask, qs, pack_q3_scales(l.astype(np.uint8)), fp16_bytes(d)], axis=1)
