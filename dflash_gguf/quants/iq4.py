"""IQ4_NL (32-value blocks) and IQ4_XS (256-value super-blocks) without an importance matrix.

Restates ggml-quants.c as ``ggml_quantize_chunk`` runs it for these types with
``imatrix == NULL``: ``quantize_iq4_nl`` / ``quantize_iq4_xs`` -> ``quantize_row_iq4_nl_impl``
(``quant_weights == NULL``, ``ntry = 7``), ``best_index_int8`` and the ``kvalues_iq4nl``
table. (``quantize_row_iq4_nl_ref`` passes ``ntry = -1`` and gives other bytes: it is not
what llama-quantize writes. ``ggml_quantize_init`` does nothing for these types.)

What the NULL path does, per 32-value sub-block (``sigma2`` is computed but only read by the
imatrix branch, so it is skipped here):

* weights ``w[j] = x[j]*x[j]``; ``amax, max`` = first value of largest magnitude (strict ``>``);
  ``amax < GROUP_MAX_EPS`` (1e-15f) gives scale 0;
* a first fit from ``d = -max/values[0]``, then 15 trials ``id = (itry + values[0])/max`` for
  itry = -7..7, each accepted when ``sumq2 > 0 && sumqx*sumqx > best*sumq2``; only the scale
  survives (both callers recompute every level afterwards).

IQ4_NL stores fp16(scale) and levels ``best_index_int8(id*x)`` with the float32
``id = scale ? 1/scale : 0``. IQ4_XS takes ``max_scale`` (first scale of largest magnitude),
``d = -max_scale/32`` (stored as fp16, but the float32 ``d`` is what the levels use), 6-bit
scales ``l = clamp(nearest_int(id*scale), -32, 31)`` and levels against ``dl = d*l``.

Arrays are position-major as in q4_k.py: ``x[j, s]`` is value j of sub-block s, so C's loops
over j are operations along axis 0 and sums run in C's order (base.seq_sum).

Each class names its compiled kernel (``numba_kernel``, quants/_numba/iq4.py: the same bytes,
~20x faster), which runs instead of ``quantize_blocks`` while numba is enabled; this module
stays as the independent second implementation the kernels are tested against.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from .base import F32, BlockQuant, first_absmax, fp16_bytes, nearest_int, seq_sum

# kvalues_iq4nl (ggml-common.h), as the floats C's int8 -> float conversions give.
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
GROUP_MAX_EPS = F32(1e-15)  # the nearest float32 to 1e-15 (checked: the C literal 1e-15f)
NTRY = 7


# The search's bracket for every integer n = -127..112: the largest ml <= 14 with
# values[ml] <= n (the table is of integers, so values[k] <= x exactly when values[k] <= floor(x)).
_N = np.arange(-127, 113)
_ML = np.clip(np.searchsorted(KVALUES, _N, side="right") - 1, 0, 14)
_LO, _HI = KVALUES[_ML], KVALUES[_ML + 1]


def _bracket(x: np.ndarray) -> np.ndarray:
    """Row of the tables above for each x: floor(x) clamped to -127..112. ``maximum`` keeps a
    NaN, ``fmin`` then turns it into 112 (bracket 14), where C's search also ends for NaN."""
    t = np.maximum(x, F32(-127))
    np.fmin(t, F32(112), out=t)
    np.floor(t, out=t)
    f = t.astype(np.intp)
    f += 127
    return f


def best_index_int8(x: np.ndarray) -> np.ndarray:
    """``best_index_int8(16, kvalues_iq4nl, x)`` elementwise, as intp indices 0..15.

    The binary search ends with ``val[ml] <= x < val[mu]``, ``mu = ml + 1``; then
    ``x - val[mu-1] < val[mu] - x ? mu-1 : mu``: two rounded float32 subtractions (kept
    literal, though they are exact near every midpoint), an exact tie going up. With ml
    clamped to 0..14 the same test gives C's early returns: ``x <= -127`` -> 0 and
    ``x >= 113`` -> 15 (infinities included); NaN compares false, so it gives 15 as in C.
    """
    f = _bracket(x)
    ml = _ML[f]
    ml += ~(x - _LO[f] < _HI[f] - x)  # bool True (1) where mu wins
    return ml


def best_value(x: np.ndarray) -> np.ndarray:
    """``values[best_index_int8(16, values, x)]`` as float32 (what the search's q is)."""
    f = _bracket(x)
    lo, hi = _LO[f], _HI[f]
    return np.where(x - lo < hi - x, lo, hi)


def _sums(x: np.ndarray, w: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sumqx += w*q*xb[j]; sumq2 += w*q*q`` from 0, in j order: (w*q)*x and (w*q)*q.
    ``(w*q)*q`` is >= +0 for every finite term (w >= 0, q != 0), so sumq2 needs no zero-sign
    fix-up; sumqx can have -0 terms (w underflows to 0) and starts from +0 like C."""
    wq = w * q
    return seq_sum(wq * x), seq_sum(wq * q, nonneg=True)


def fit_scales(x: np.ndarray) -> np.ndarray:
    """The per-sub-block scale ``scales[ib]`` of quantize_row_iq4_nl_impl's search (NULL
    weights, ntry = 7) for every column of the position-major ``x`` (32, ns): (ns,) float32."""
    w = x * x  # weight[j] = xb[j]*xb[j]
    amax, mx = first_absmax(x, axis=0)  # `if (ax > amax) { amax = ax; max = xb[j]; }` from 0
    # Columns with amax < GROUP_MAX_EPS run the search too (max may be 0: inf/NaN ids) and are
    # set to 0 at the end, which is all C keeps of them.
    d = -mx / KVALUES[0]  # float d = -max/values[0]: (-max)/(-127.f)
    iscale = F32(1) / d
    sumqx, sumq2 = _sums(x, w, best_value(iscale * x))  # al = id*xb[j]
    d = np.where(sumq2 > 0, sumqx / sumq2, F32(0))
    best = d * sumqx
    for itry in range(-NTRY, NTRY + 1):
        # id = (itry + values[0])/max: an int sum, converted to float, divided by max.
        iscale = F32(itry + int(KVALUES[0])) / mx
        sumqx, sumq2 = _sums(x, w, best_value(iscale * x))
        # sumq2 > 0 && sumqx*sumqx > best*sumq2: each product rounded to float32; a NaN on
        # either side (huge inputs whose sums overflow) rejects the trial, as in C.
        acc = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        if acc.any():
            d = np.where(acc, sumqx / sumq2, d)
            best = np.where(acc, d * sumqx, best)  # best = d*sumqx with the new d
    return np.where(amax < GROUP_MAX_EPS, F32(0), d)


def pack_levels(L: np.ndarray, nb: int) -> np.ndarray:
    """``q4[16*i + j] = L[32*i + j] | L[32*i + 16 + j] << 4`` for position-major L (32, ns)."""
    Lt = L.T.astype(np.uint8)
    return (Lt[:, :16] | (Lt[:, 16:] << 4)).reshape(nb, -1)


def _inverse(d: np.ndarray) -> np.ndarray:
    # `d ? 1/d : 0.f` (a -0 d counts as false too)
    nz = d != 0
    return np.where(nz, F32(1) / np.where(nz, d, F32(1)), F32(0))


class IQ4_NL(BlockQuant, qtype=GGMLQuantizationType.IQ4_NL):
    numba_kernel = "iq4_nl"
    chunk_values = 1 << 18
    numpy_search = True

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        x = np.ascontiguousarray(blocks.T)  # (32, nb)
        scale = fit_scales(x)
        # super_block_size == block_size: dh = fp16(scales[0]); the levels use the float32
        # scale, id = scales[0] ? 1/scales[0] : 0 (an all-zero block: every level is
        # best_index_int8(0) = 8, value 1). A NaN scale (|x| beyond ~1e17 overflows the sums)
        # is x86's default NaN, which NumPy and ggml both store as fp16 0xFE00.
        L = best_index_int8(_inverse(scale) * x)
        return np.concatenate([fp16_bytes(scale), pack_levels(L, nb)], axis=1)


class IQ4_XS(BlockQuant, qtype=GGMLQuantizationType.IQ4_XS):
    numba_kernel = "iq4_xs"
    chunk_values = 1 << 18
    numpy_search = True

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        x = np.ascontiguousarray(blocks.reshape(nb * 8, 32).T)  # (32, nb*8), column 8*i + ib
        scales = fit_scales(x).reshape(nb, 8)
        # `if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }` from 0: a NaN scale
        # never wins, nor does a zero one, so NaN -> 0 changes nothing and keeps first_absmax's
        # max/min free of NaN. All-zero scales leave max_scale = +0.
        _, max_scale = first_absmax(np.where(np.isnan(scales), F32(0), scales), axis=1)
        d = -max_scale / F32(32)  # -0.0 when max_scale is +0: its fp16 is 0x8000
        iscale = _inverse(d)
        # l = nearest_int(id*scales[ib]); l = MAX(-32, MIN(31, l)); dl = d*l; idl = dl ? 1/dl : 0
        ls = np.clip(nearest_int(iscale[:, None] * scales), -32, 31)
        dl = d[:, None] * ls.astype(np.float32)
        L = best_index_int8(_inverse(dl).reshape(-1) * x)  # Lb[j] = best_index_int8(idl*xb[j])
        ls = (ls + 32).astype(np.uint16)  # 0..63
        scales_l = ((ls[:, 0::2] & 0xF) | ((ls[:, 1::2] & 0xF) << 4)).astype(np.uint8)
        # scales_h |= (l >> 4) << 2*(ib%8), a little-endian uint16
        scales_h = np.bitwise_or.reduce((ls >> 4) << (2 * np.arange(8, dtype=np.uint16)), axis=1)
        scales_h = scales_h.astype("<u2").view(np.uint8).reshape(nb, 2)
        return np.concatenate([fp16_bytes(d), scales_h, scales_l, pack_levels(L, nb)], axis=1)
