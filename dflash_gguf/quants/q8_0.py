"""Q8_0: 32 values -> fp16 d + 32 int8 (quantize_row_q8_0_ref). With numba installed the
compiled kernel in ``_numba/q8_0.py`` runs instead (same bytes)."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from .base import F32, BlockQuant, fp16_bytes, reduce_rows, trunc_to_int8_bits

# roundf(v) == trunc(v + copysign(0.49999997f, v)): the largest float below 0.5 avoids the
# 0.49999997 + 0.5 -> 1.0 trap of floor(|v| + 0.5), and exact halves still round away from
# zero because k + 0.5 + 0.49999997 rounds up to k + 1. Checked for every float32 |v| < 256
# (Q8_0 never exceeds ~127.5 on this path).
_HALF_DOWN = np.nextafter(F32(0.5), F32(0))
_SIGN = np.uint32(0x80000000)
_HALF_DOWN_BITS = _HALF_DOWN.view(np.uint32)


class Q8_0(BlockQuant, qtype=GGMLQuantizationType.Q8_0):
    chunk_values = 1 << 18
    numba_kernel = "q8_0"

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        n = blocks.shape[0]
        a = np.abs(blocks)
        amax = reduce_rows(np.maximum, a)  # MAX(amax, |v|) from 0: order-free, never -0
        d = amax / F32(127)
        inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0))  # id = d ? 1/d : 0
        np.copyto(a, inv[:, None])  # tile id over the block, then x*id same-shape
        v = a
        np.multiply(v, blocks, out=v)
        h = np.empty_like(v).view(np.uint32)
        np.bitwise_and(v.view(np.uint32), _SIGN, out=h)
        h |= _HALF_DOWN_BITS  # copysign(0.49999997f, v), as bits
        v += h.view(np.float32)
        out = np.empty((n, 34), dtype=np.uint8)
        out[:, :2] = fp16_bytes(d)
        if np.isfinite(inv).all():  # then |v| <= ~127.5 and the cast truncates like C's
            out[:, 2:] = v.astype(np.int8).view(np.uint8)
        else:
            out[:, 2:] = trunc_to_int8_bits(np.trunc(v)).astype(np.uint8)
        return out
