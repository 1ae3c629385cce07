"""The compare hot loop's conversions and checks, fast and bit-identical to the library's own.

Measured on a 470M-value Q4_K_M drafter, a compare spent a quarter of its time in gguf-py's
NumPy dequantizers (each K-quant block unpacked through a dozen whole-array temporaries), most
of an F16 compare in NumPy's float16 casts (~300-400M values/s), and with --no-requantize half
of a Q4_K_M compare in the per-block maxima. Here:

* Q8_0, Q4_K and Q6_K are dequantized by numba kernels that do ggml's ``dequantize_row_*``
  float operations in the same order (float32 only, no fused multiply-add: the quantizer's
  ``JIT_OPTIONS``), so every value has the same bits as gguf-py's (tests/compare).
* F16 values read back, and 16-bit values re-encoded into the other 16-bit float type (the
  checkpoint's BF16 checked against an F16 GGUF), go through 65536-entry tables built with
  NumPy's cast and the library's own quantizer, so each entry *is* their answer. NumPy's
  ``take`` runs them as fast as a compiled loop, so a float-only compare never starts numba
  (~1 s).
* The per-block check (each block's max error against its max |x|) is one compiled pass
  where the quantized types already run numba; ``block_check_numpy`` is the same check in
  NumPy, the reference the kernel is tested against and the path without numba.

The kernels are used where the quantizer uses its numba kernels (``quants._numba.enabled()``);
without them callers keep their NumPy path (``None`` here).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..fileio.bf16 import bf16_to_f32

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
        y = np.empty(n, np.float32) if out is None else out[:n]
        # mode="clip" skips take's per-index bounds check (a uint16 is always in range)
        np.take(f16_table(), raw.view(np.uint16), out=y, mode="clip")
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


def reencode16(raw: np.ndarray, src: Q, dst: Q, out: np.ndarray | None = None, e_out: np.ndarray | None = None,
               finite: bool | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """ggml's encoding in ``dst`` (F16 or BF16) of the 16-bit float values ``raw`` (flat
    uint8) of type ``src`` (BF16 or F16), and the error of each value read back from it.

    Returns (e, d): e the encoded uint16 values (in ``e_out``, uint16, when given), d =
    float32(e read back) - float32(value), the bits NumPy's subtraction gives, a strided view
    into ``out`` (uint64, one per value) when given. One table lookup gives both (each entry
    packs the encoding and its error): the lookups are most of an F16 compare, and this is
    half of them. None for any other pair, or when a value is inf/NaN (the quantizer refuses
    those, and its error names the first one); ``finite=True``: the caller knows every value
    is finite (no check)."""
    if (src, dst) not in ((Q.BF16, Q.F16), (Q.F16, Q.BF16)):
        return None
    u, mask = raw.view(np.uint16), _EXP_MASK[src]
    if not finite and np.any((u & mask) == mask):
        return None
    packed = np.empty(u.size, np.uint64) if out is None else out[:u.size]
    # mode="clip" skips take's per-index bounds check (a uint16 is always in range)
    np.take(_reencode_table(src, dst), u, out=packed, mode="clip")
    e = np.empty(u.size, np.uint16) if e_out is None else e_out[:u.size]
    np.copyto(e, packed, casting="unsafe")  # the low 16 bits, contiguous: compared at full speed
    return e, packed.view(np.float32)[1::2]


def block_check(d: np.ndarray, x: np.ndarray, bs: int, limit: float) -> tuple[int, float, int]:
    """Blocks of ``bs`` values whose max |d| exceeds ``limit`` x their max |x|: (count, worst
    ratio, flat index in ``d`` of the worst block's largest |d|), worst/index only when count > 0.

    A block with max |x| = 0 has ratio inf when any d != 0, else 0; a NaN ratio counts as inf.
    The first block of the largest ratio, and its first largest |d| (or first NaN), are named."""
    if _numba_on() and d.size % bs == 0:
        n, worst, at = _kernels().block_check(d, x, bs, np.float32(limit))
        return int(n), float(worst), int(at)
    return block_check_numpy(d, x, bs, limit)


def block_check_numpy(d: np.ndarray, x: np.ndarray, bs: int, limit: float) -> tuple[int, float, int]:
    """``block_check`` with NumPy (the reference for the kernel, and the path without numba)."""
    from ..quants.base import reduce_rows

    ad = np.abs(d)
    # max over each block's values: NumPy reduces short rows one at a time (~100 ns each);
    # the quantizer's halving helper does it as a few long passes (same maxima, NaN kept)
    num = reduce_rows(np.maximum, ad.reshape(-1, bs))
    den = reduce_rows(np.maximum, np.abs(x).reshape(-1, bs))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den > 0, num / np.where(den > 0, den, 1), np.where(num > 0, np.inf, 0))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    bad = int(np.count_nonzero(ratio > limit))  # limit is a weak scalar: compared as float32
    if not bad:
        return 0, 0.0, -1
    k = int(np.argmax(ratio))
    return bad, float(ratio[k]), k * bs + int(np.argmax(ad[k * bs:(k + 1) * bs]))


@lru_cache(maxsize=None)
def f16_table() -> np.ndarray:
    """float32 value of every float16 bit pattern: NumPy's cast (which gguf-py uses)."""
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


def values16(bits: np.ndarray, t: Q) -> np.ndarray:
    """float32 values of 16-bit float bit patterns of type ``t`` (F16 or BF16)."""
    if t == Q.F16:
        return f16_table()[bits]
    return bf16_to_f32(bits)


@lru_cache(maxsize=None)
def _reencode_table(src: Q, dst: Q) -> np.ndarray:
    """Per ``src`` bit pattern: the ``dst`` bits the library's quantizer gives its value (low
    16 bits) and, as float32 bits in the high 32, the value read back minus the value (0
    entries for inf/NaN patterns, which callers never look up)."""
    from ..quants import quantize

    bits = np.arange(1 << 16, dtype=np.uint16)
    values = values16(bits, src)
    finite = np.isfinite(values)
    enc = np.zeros(1 << 16, dtype=np.uint16)
    enc[finite] = quantize(values[finite], dst, threads=1).view("<u2")
    err = np.zeros(1 << 16, dtype=np.float32)
    with np.errstate(over="ignore"):  # a BF16 value beyond F16's range encodes as inf: inf - x
        err[finite] = values16(enc[finite], dst) - values[finite]
    return enc.astype(np.uint64) | (err.view(np.uint32).astype(np.uint64) << np.uint64(32))


@lru_cache(maxsize=None)
def _kernels():
    """The numba kernels, compiled (or loaded from numba's cache) on first use."""
    from . import _kernels_numba

    return _kernels_numba
