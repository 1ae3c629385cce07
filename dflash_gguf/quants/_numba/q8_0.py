"""quantize_row_q8_0_ref, compiled (the numpy mirror is quants/q8_0.py).

The only float -> integer cast of C that can go out of range, Q8_0's ``(int8_t)roundf``, is
spelled out as x86-64 executes it.
"""
from __future__ import annotations

import numpy as np

from .common import F32, ONE, ZERO, bits_f32, f32_bits, fp32_to_fp16, jit

_F32_127 = F32(127.0)
_INT32_LIMIT = F32(2147483648.0)
_SIGN_BIT = np.int32(-2147483648)
# roundf(v) == trunc(v + copysign(0.49999997f, v)) for |v| < 256, and |x*id| <= ~127.5 here
# whenever id is finite (quants/q8_0.py has the argument)
_HALF_DOWN_BITS = np.int32(np.nextafter(F32(0.5), F32(0)).view(np.int32))


@jit
def q8_0(blocks):
    """quantize_row_q8_0_ref: (nb, 32) float32 C-contiguous -> (nb, 34) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 34), np.uint8)
    for i in range(nb):
        amax = ZERO
        for j in range(32):
            a = abs(blocks[i, j])
            amax = amax if amax > a else a  # amax = MAX(amax, fabsf(v))
        d = amax / _F32_127
        inv = ONE / d if d != 0 else ZERO  # id = d ? 1.0f/d : 0.0f
        h = fp32_to_fp16(d)
        out[i, 0] = h & 0xFF
        out[i, 1] = h >> 8
        for j in range(32):
            x0 = blocks[i, j] * inv
            r = x0 + bits_f32(np.int32((f32_bits(x0) & _SIGN_BIT) | _HALF_DOWN_BITS))
            # qs[j] = roundf(x0) as int8_t: x86-64 truncates to int32 (INT32_MIN, low byte 0,
            # when out of range or NaN -- reachable only when 1/d overflows) and keeps the low byte
            out[i, 2 + j] = np.int32(r) if abs(r) < _INT32_LIMIT else 0
    return out
