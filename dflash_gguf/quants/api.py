"""The quantizers' public functions: ``quantize``, ``dequantize`` and the ggml type helpers
(re-exported by :mod:`dflash_gguf.quants`, which imports this module on first use)."""
from __future__ import annotations

from math import prod
from typing import Sequence

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..errors import QuantizationError
from ..fileio.bf16 import bf16_to_f32
from .base import quantize_array, registered

#: Types ``quantize`` can produce, byte-exact with ggml.
QUANTIZE_TYPES: frozenset[GGMLQuantizationType] = frozenset(registered())

# gguf-py 0.19's dequantizers reproduce ggml's to_float bit for bit for these (checked
# against ggml's own output in tests/test_quants.py).
_DEQUANTIZE_TYPES = QUANTIZE_TYPES


def resolve_qtype(qtype: str | int | GGMLQuantizationType) -> GGMLQuantizationType:
    """A ggml type from a case-insensitive name (``"q4_K"``, ``"Q8_0"``, ``"bf16"``), an id,
    or a :class:`gguf.GGMLQuantizationType`.

    Raises:
        QuantizationError: unknown name or id (file types such as ``Q4_K_M`` are not ggml types).
    """
    if isinstance(qtype, GGMLQuantizationType):
        return qtype
    if isinstance(qtype, (int, np.integer)) and not isinstance(qtype, bool):
        try:
            return GGMLQuantizationType(int(qtype))
        except ValueError:
            raise QuantizationError(f"unknown ggml type id {int(qtype)}") from None
    if isinstance(qtype, str):
        key = qtype.strip().upper()
        if key in GGMLQuantizationType.__members__:
            return GGMLQuantizationType[key]
        hint = ""
        if key.endswith(("_M", "_S", "_L")) and key[:-2] in GGMLQuantizationType.__members__:
            hint = f" ({qtype!r} is a file type / mix; see dflash_gguf.quants.policy.plan_types)"
        supported = ", ".join(sorted(t.name for t in QUANTIZE_TYPES))
        raise QuantizationError(f"unknown ggml type {qtype!r}{hint}; quantize supports: {supported}")
    raise QuantizationError(f"cannot interpret {qtype!r} as a ggml type")


def block_size(qtype: str | int | GGMLQuantizationType) -> int:
    """Values per block (1 for F32/F16/BF16, 32 for Q8_0/Q4_0/Q5_0, 256 for K-quants)."""
    return GGML_QUANT_SIZES[resolve_qtype(qtype)][0]


def type_size(qtype: str | int | GGMLQuantizationType) -> int:
    """Bytes per block."""
    return GGML_QUANT_SIZES[resolve_qtype(qtype)][1]


def row_nbytes(qtype: str | int | GGMLQuantizationType, n_cols: int) -> int:
    """Bytes of one row of ``n_cols`` values (``ggml_row_size``).

    Raises:
        QuantizationError: ``n_cols`` is not a multiple of the block size.
    """
    t = resolve_qtype(qtype)
    bs, ts = GGML_QUANT_SIZES[t]
    if n_cols % bs != 0:
        raise QuantizationError(f"row of {n_cols} values is not a multiple of the {t.name} block size {bs}")
    return n_cols // bs * ts


def quantize(
    x: np.ndarray,
    qtype: str | int | GGMLQuantizationType,
    *,
    name: str | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """Quantize ``x`` row-wise (last axis) to ggml block bytes.

    Returns uint8 of shape ``(..., row_nbytes(qtype, x.shape[-1]))`` in C order, also for
    F32/F16/BF16 (their raw little-endian bytes), ready for ``GGUFWriter.add_tensor(...,
    raw_dtype=qtype)``. Input: any float array (converted to float32 chunk by chunk).
    ``threads`` defaults to the CPUs this process may use.

    Raises:
        QuantizationError: NaN/inf in ``x`` (naming ``name`` and the first bad index), last
            dimension not a multiple of the block size, or a type with no quantizer here.
    """
    t = resolve_qtype(qtype)
    cls = registered().get(t)
    if cls is None:
        supported = ", ".join(sorted(q.name for q in QUANTIZE_TYPES))
        raise QuantizationError(f"quantizing to {t.name} is not supported; supported: {supported}")
    return quantize_array(cls, x, name=name, threads=threads)


def quantize_finite(x: np.ndarray, qtype: str | int | GGMLQuantizationType) -> np.ndarray | None:
    """``quantize(x, qtype, threads=1).reshape(-1)`` for float32 C-contiguous ``x`` that the
    caller knows is finite (a compare has x.x already: finite only if every x is), without the
    NaN/inf scan; None where ``quantize`` must decide (a type it lacks, a partial block)."""
    cls = registered().get(resolve_qtype(qtype))
    if cls is None or not _whole_blocks(x, cls.block_size):
        return None
    return cls.quantize_finite(x).reshape(-1)


def _whole_blocks(x: np.ndarray, bs: int) -> bool:
    """Whether ``x`` is what the finite paths take: float32, C order, rows of whole blocks."""
    if x.dtype != np.float32 or not x.flags.c_contiguous or x.size % bs:
        return False
    return not (x.ndim and x.shape[-1] % bs)


def quantize_finite_with_values(
    x: np.ndarray, qtype: str | int | GGMLQuantizationType, out: np.ndarray
) -> np.ndarray | None:
    """``quantize_finite(x, qtype)``, and into ``out`` (float32, C-contiguous, writable, at
    least ``x.size`` values; its first ``x.size``) what ``dequantize`` makes of those bytes, bit
    for bit: the quantizer has each block's scales and levels in hand, so the values come with
    the bytes for a few float32 operations each instead of a second pass over them (a compare
    needs both). None, ``out`` untouched, where there is no such fused path: types other than
    Q4_K, Q5_K and Q6_K, the numpy path (numba disabled or absent), and wherever
    ``quantize_finite`` says None.

    Raises:
        ValueError: ``out`` is not such a buffer.
    """
    cls = registered().get(resolve_qtype(qtype))
    if cls is None or not cls.has_values_kernel():
        return None
    if out.dtype != np.float32 or out.ndim != 1 or out.size < x.size or not out.flags.c_contiguous \
            or not out.flags.writeable:
        raise ValueError("out must be a writable, C-contiguous 1-d float32 buffer of at least x.size values")
    if not _whole_blocks(x, cls.block_size):
        return None
    q = cls.quantize_finite_with_values(x, out[:x.size])
    return None if q is None else q.reshape(-1)


def dequantize(data: np.ndarray | bytes, qtype: str | int | GGMLQuantizationType, shape: Sequence[int]) -> np.ndarray:
    """ggml block bytes -> float32 array of ``shape`` (NumPy order, last axis = row), with
    ggml's own float operation order (``dequantize_row_*``).

    Raises:
        QuantizationError: the byte count does not match ``shape`` for ``qtype``, or the type
            is not supported.
    """
    t = resolve_qtype(qtype)
    shape = tuple(int(s) for s in shape)
    if not shape:
        raise QuantizationError("dequantize needs a shape with at least one dimension")
    nbytes = row_nbytes(t, shape[-1]) * prod(shape[:-1])
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else np.asarray(data)
    raw = raw.reshape(-1).view(np.uint8) if raw.dtype != np.uint8 else raw.reshape(-1)
    if raw.size != nbytes:
        raise QuantizationError(
            f"{raw.size} bytes of {t.name} data cannot hold shape {shape} (needs {nbytes} bytes)"
        )
    if t == GGMLQuantizationType.F32:
        return raw.view("<f4").astype(np.float32).reshape(shape)
    if t == GGMLQuantizationType.F16:
        return raw.view("<f2").astype(np.float32).reshape(shape)
    if t == GGMLQuantizationType.BF16:
        return bf16_to_f32(raw).reshape(shape)
    if t not in _DEQUANTIZE_TYPES:
        raise QuantizationError(f"dequantizing {t.name} is not supported")
    if nbytes == 0:  # a zero-element tensor: no blocks to decode (and no row length to split by)
        return np.zeros(shape, np.float32)
    import gguf

    rows = raw.reshape(-1, row_nbytes(t, shape[-1]))
    return np.asarray(gguf.dequantize(rows, t), dtype=np.float32).reshape(shape)

