"""Input decoding, compiled: BF16 -> float32 with the non-finite check in the same pass.

Integer-only (a bf16 value is the top half of its float32), so there is no rounding to get
wrong; the check looks at the exponent bits, which are all ones exactly for inf and NaN.
"""
from __future__ import annotations

import numpy as np

from .common import jit

_EXP_BITS = np.uint16(0x7F80)


@jit
def bf16_to_f32(src, dst):
    """ggml_compute_bf16_to_fp32 of every value of ``src`` (uint16 bits) into ``dst`` (uint32
    view of the float32 output, same length). Returns the index of the first inf/NaN, or -1."""
    bad = False
    for i in range(src.size):
        h = src[i]
        dst[i] = np.uint32(h) << 16
        bad |= (h & _EXP_BITS) == _EXP_BITS
    if bad:
        for i in range(src.size):
            if (src[i] & _EXP_BITS) == _EXP_BITS:
                return i
    return -1
