"""The compare hot loop's conversions, fast and bit-identical to the library's own.

Measured on a 470M-value Q4_K_M drafter, a compare spent a quarter of its time in gguf-py's
NumPy dequantizers (each K-quant block unpacked through a dozen whole-array temporaries) and
most of an F16 compare in NumPy's float16 casts (~300-400M values/s). Here:

* Q8_0, Q4_K and Q6_K are dequantized by numba kernels that do ggml's ``dequantize_row_*``
  float operations in the same order (float32 only, no fused multiply-add: the quantizer's
  ``JIT_OPTIONS``), so every value has the same bits as gguf-py's (tests/compare).
* F16 values read back, and 16-bit values re-encoded into the other 16-bit float type (the
  checkpoint's BF16 checked against an F16 GGUF), go through 65536-entry tables built with
  NumPy's cast and the library's own quantizer, so each entry *is* their answer.

The kernels are used where the quantizer uses its numba kernels (``quants._numba.enabled()``);
without them the tables still serve (``np.take``), and for every other type callers keep their
NumPy path (``None`` here).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from gguf import GGMLQuantizationType as Q

# bytes per block, values per block of the types with a kernel
_BLOCKS = {Q.Q8_0: (34, 32), Q.Q4_K: (144, 256), Q.Q6_K: (210, 256)}
_EXP_MASK = {Q.BF16: 0x7F80, Q.F16: 0x7C00}  # all exponent bits set: inf or NaN


def _numba_on() -> bool:
    from ..quants import _numba

    return _numba.enabled()


def dequantize(raw: np.ndarray, t: Q, rows: int, cols: int, out: np.ndarray | None = None) -> np.ndarray | None:
    """ggml block bytes (flat uint8) of ``rows`` x ``cols`` values -> float32 (rows, cols), in
    ``out`` (float32, at least rows x cols) when given; None when there is no fast path for ``t``."""
    n = rows * cols
    if t == Q.F16:
        u = raw.view(np.uint16)
        y = np.empty(n, np.float32) if out is None else out[:n]
        if _numba_on():
            _kernels().lut_u16(u, f16_table(), y)
        else:
            np.take(f16_table(), u, out=y)
        return y.reshape(rows, cols)
    if t not in _BLOCKS or not _numba_on():
        return None
    ts, bs = _BLOCKS[t]
    if raw.size != n // bs * ts or cols % bs:
        return None  # let the generic path raise its precise error
    k = _kernels()
    y = np.empty(n, np.float32) if out is None else out[:n]
    {Q.Q8_0: k.q8_0, Q.Q4_K: k.q4_k, Q.Q6_K: k.q6_k}[t](raw, f16_table(), y)
    return y.reshape(rows, cols)


def reencode16(raw: np.ndarray, src: Q, dst: Q, out: np.ndarray | None = None) -> np.ndarray | None:
    """ggml's encoding in ``dst`` (F16 or BF16) of the 16-bit float values ``raw`` of type
    ``src`` (BF16 or F16), as flat uint8 (in ``out``, uint8, when given); None for any other
    pair, or when a value is inf/NaN (the quantizer refuses those, and its error names the first one)."""
    if (src, dst) not in ((Q.BF16, Q.F16), (Q.F16, Q.BF16)):
        return None
    u, table, mask = raw.view(np.uint16), _reencode_table(src, dst), _EXP_MASK[src]
    e = np.empty(u.size, np.uint16) if out is None else out[:raw.size].view(np.uint16)
    if _numba_on():
        ok = _kernels().lut_u16_finite(u, table, mask, e)
    else:
        ok = not np.any((u & mask) == mask)
        np.take(table, u, out=e)
    return e.view(np.uint8) if ok else None


@lru_cache(maxsize=None)
def f16_table() -> np.ndarray:
    """float32 value of every float16 bit pattern: NumPy's cast (which gguf-py uses)."""
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


@lru_cache(maxsize=None)
def _reencode_table(src: Q, dst: Q) -> np.ndarray:
    """``dst`` bits of every finite ``src`` bit pattern, from the library's quantizer itself."""
    from ..quants import quantize

    bits = np.arange(1 << 16, dtype=np.uint16)
    values = f16_table() if src == Q.F16 else (bits.astype(np.uint32) << 16).view(np.float32)
    finite = np.isfinite(values)
    table = np.zeros(1 << 16, dtype=np.uint16)
    table[finite] = quantize(values[finite], dst, threads=1).view("<u2")
    return table


@lru_cache(maxsize=None)
def _kernels():
    """The numba kernels, compiled (or loaded from numba's cache) on first use."""
    from . import _kernels_numba

    return _kernels_numba
