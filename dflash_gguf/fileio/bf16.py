"""bfloat16 → float32, exactly as ggml does it (``ggml_compute_bf16_to_fp32``): a value's 16 bits
become the top half of its float32, the low half zero. Every BF16 read in the package goes
through here (the numba kernel ``quants._numba.decode.bf16_to_f32`` is the same shift, fused
with the NaN/inf scan of a quantize task).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported on use: ``bf16_bytes_to_f32_bytes`` callers must not pay for it
    import numpy as np


def bf16_to_f32(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 values of bf16 bit patterns: ``bits`` as uint16, or as their little-endian bytes
    (uint8, contiguous), any shape. Written into ``out`` (float32, same shape: a reused scratch
    buffer) when given; no temporaries either way."""
    import numpy as np

    if bits.dtype == np.uint8:
        bits = bits.view("<u2")
    u = np.empty(bits.shape, np.uint32) if out is None else out.view(np.uint32)
    # widen, then shift in place: ~1.4x faster than one left_shift(..., dtype=uint32), whose
    # mixed-type loop runs through a cast buffer
    np.copyto(u, bits)
    u <<= 16
    return u.view(np.float32)


def bf16_bytes_to_f32_bytes(raw: bytes) -> bytearray:
    """``bf16_to_f32`` on bytes, without numpy: the little-endian float32 bytes of bf16 ``raw``.
    A separate function because it serves another purpose: ``convert`` turns a bf16 checkpoint's
    small tensors (the norms it stores as F32) into F32 with it, so a conversion that keeps the
    big tensors bf16 never imports numpy (~0.15 s of its start; convert/checkpoint.py ``SMALL_BYTES``)."""
    out = bytearray(2 * len(raw))
    out[2::4] = raw[0::2]
    out[3::4] = raw[1::2]
    return out
