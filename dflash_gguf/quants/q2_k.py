"""Q2_K (quantize_row_q2_K_ref): 256-value super-blocks of sixteen 16-value sub-blocks, each
fitted with make_qkx2_quants(16, nmax=3, weights=|x|, rmin=-0.5, rdelta=0.1, nstep=15,
use_mad=true); 4-bit sub-block scales and mins under fp16 d and dmin; 2-bit levels.

Position-major layout (``x[i, s]`` = element i of sub-block s) and q4_k.py's vectorised
make_qkx2_quants, with use_mad (the trials' error is absolute, not squared as for Q4_K/Q5_K).
When numba is available the compiled kernel in ``_numba/k_low.py`` runs instead (same bytes,
faster); this file is the fallback and the independent implementation the tests hold it against.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from .base import F32, BlockQuant, fp16_bytes, fp16_round, nearest_int
from .q3_k import pack_2bit
from .q4_k import make_qkx2_quants, qkx2_levels

NMAX = 3


def _codes(v: np.ndarray, vmax: np.ndarray) -> np.ndarray:
    """nearest_int((15.f/vmax)*v[j]) per block where vmax > 0, else 0 (int32, not clamped:
    the C stores it through a uint8, so only the caller's masking applies)."""
    live = vmax > 0
    iscale = F32(15) / np.where(live, vmax, F32(1))  # float iscale = q4scale/max_scale
    return np.where(live[:, None], nearest_int(iscale[:, None] * v), 0)


class Q2_K(BlockQuant, qtype=GGMLQuantizationType.Q2_K):
    chunk_values = 1 << 18
    numba_kernel = "q2_k"
    numpy_search = True

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        x = np.ascontiguousarray(blocks.reshape(nb * 16, 16).T)  # (16, ns)
        with np.errstate(all="ignore"):  # D = 0 trials divide by zero, as in C (never accepted)
            fit = make_qkx2_quants(x, np.abs(x), NMAX, -0.5, 0.1, 15, use_mad=True)  # weights[l] = fabsf(x)
        scales = fit.scale.reshape(nb, 16)
        mins = fit.the_min.reshape(nb, 16)
        # `if (scale > max_scale) max_scale = scale` from 0: fmax skips a NaN as the compare does
        ms, mm = np.fmax.reduce(scales, axis=1), np.fmax.reduce(mins, axis=1)
        max_scale = np.where(ms > 0, ms, F32(0))
        max_min = np.where(mm > 0, mm, F32(0))
        # y.scales[j] = l (int -> uint8); y.scales[j] |= (l << 4) (truncated to the byte)
        sc = (_codes(scales, max_scale) & 0xFF) | ((_codes(mins, max_min) << 4) & 0xFF)
        d, dmin = max_scale / F32(15), max_min / F32(15)  # fp16(max/q4scale); fp16(0) otherwise

        # Requantize against the stored values: d = fp16(d)*(sc & 0xF); dm = fp16(dmin)*(sc >> 4);
        # l = nearest_int((x + dm)/d), an add then a true division.
        dj = (fp16_round(d)[:, None] * (sc & 0xF).astype(np.float32)).reshape(-1)
        dmj = (fp16_round(dmin)[:, None] * (sc >> 4).astype(np.float32)).reshape(-1)
        t = x + dmj
        np.divide(t, dj, out=t)
        L = np.clip(nearest_int(t), 0, NMAX)
        keep = np.flatnonzero(dj == 0)  # `if (!d) continue;` keeps make_qkx2_quants' L
        if keep.size:
            L[:, keep] = qkx2_levels(x, fit, keep, NMAX)

        qs = pack_2bit(L.T.reshape(nb, 256))
        return np.concatenate([sc.astype(np.uint8), qs, fp16_bytes(d), fp16_bytes(dmin)], axis=1)
