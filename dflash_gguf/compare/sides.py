"""The two sides of a pair, read row by row as ggml-encoded bytes and dequantized.

A safetensors BF16/F16/F32 tensor is stored exactly as ggml encodes that type, so a checkpoint
tensor and a GGUF tensor are the same kind of object here: a ggml type, a shape and a way to
read the bytes of a range of rows.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..errors import DflashError, GGUFFormatError, WeightsError
from ..fileio.bf16 import bf16_to_f32
from ..fileio.gguf_reader import GGUFFile
from ..fileio.safetensors import DTYPE_SIZES, SourceTensor
from ..fileio.types import TensorInfo

if TYPE_CHECKING:
    from ..convert.prequant import Dequant


@dataclass
class Side:
    """One tensor as ggml-encoded bytes."""

    name: str
    shape: tuple[int, ...]  # torch order, at least one dimension
    qtype: Q
    nbytes: int
    read: Callable[[int, int], np.ndarray]  # (row0, row1) -> flat uint8 bytes of those rows
    # the same bytes into the caller's buffer (the hot loop reuses one per thread); None: ``read``
    read_into: Callable[[int, int, np.ndarray], np.ndarray] | None = None

    def fetch(self, r0: int, r1: int, buf: np.ndarray | None) -> np.ndarray:
        """Rows r0..r1 as flat uint8, in ``buf`` (a big enough uint8 array) where the side can."""
        if buf is None or self.read_into is None:
            return self.read(r0, r1)
        return self.read_into(r0, r1, buf)

    @property
    def rows(self) -> int:
        return math.prod(self.shape[:-1])

    @property
    def cols(self) -> int:
        return self.shape[-1]

    def values(self) -> np.ndarray:
        return dequantize_rows(self.read(0, self.rows), self.qtype, self.rows, self.cols).reshape(self.shape)


class Files:
    """pread-based access to the input files: one descriptor per file, opened on first read and
    shared by the worker threads (pread has no file position, so concurrent reads do not
    interfere). GGUF tensors are read this way too rather than through ``GGUFFile.raw``'s memory
    map: touched map pages count in the process's RSS, so reading a 1 GB file through the map
    looks like 1 GB of memory."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}

    def __enter__(self) -> "Files":
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def pread(self, path: Path, offset: int, n: int, what: str, error: type[DflashError],
              out: np.ndarray | None = None) -> np.ndarray:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        buf = np.empty(n, dtype=np.uint8) if out is None else out[:n]
        got = os.preadv(fd, [memoryview(buf)], offset) if n else 0
        if got != n:
            raise error(f"{path}: tensor {what} ends early ({got:,} of {n:,} bytes read at offset {offset:,}); "
                        "the file is truncated, re-fetch it")
        return buf

    def source_side(self, t: SourceTensor) -> Side:
        """A checkpoint tensor of a float dtype (``FLOAT_DTYPES``: named like their ggml types)."""
        shape = t.shape or (1,)
        row_bytes = shape[-1] * DTYPE_SIZES[t.dtype]

        def read(r0: int, r1: int, out: np.ndarray | None = None) -> np.ndarray:
            return self.pread(t.file, t.offset + r0 * row_bytes, (r1 - r0) * row_bytes, t.name, WeightsError, out)

        return Side(t.name, shape, Q[t.dtype], t.nbytes, read, read)

    def gguf_side(self, f: GGUFFile, e: TensorInfo) -> Side:
        shape = e.shape or (1,)
        row_bytes = e.nbytes // max(math.prod(shape[:-1]), 1)

        def read(r0: int, r1: int, out: np.ndarray | None = None) -> np.ndarray:
            return self.pread(f.path, e.offset_abs + r0 * row_bytes, (r1 - r0) * row_bytes, e.name, GGUFFormatError,
                              out)

        return Side(e.name, shape, e.ggml_type, e.nbytes, read, read)


def dequant_side(t: SourceTensor, d: Dequant) -> Side:
    """A pre-quantized checkpoint weight as F32: the values convert writes from it
    (``convert.prequant.dequantize``, mainline's ``dequant_simple``). Dequantized whole on its
    first read, as convert does, and let go after its last row is read. An NVFP4 weight is not
    dequantized by convert but repacked: its side is those ggml NVFP4 blocks (``nvfp4_side``)."""
    from ..convert.prequant import dequantize

    if getattr(d, "nvfp4", False):
        return nvfp4_side(t, d)
    shape = t.shape or (1,)
    rows, cols = math.prod(shape[:-1]), shape[-1]
    lock, held = threading.Lock(), []

    def read(r0: int, r1: int, out: np.ndarray | None = None) -> np.ndarray:
        with lock:
            if not held:
                held.append(dequantize(t, d).reshape(rows, cols))
            x = held[0]
            if r1 >= rows:
                held.clear()
        b = np.ascontiguousarray(x[r0:r1]).reshape(-1).view(np.uint8)
        if out is None:
            return b
        out[:b.size] = b
        return out[:b.size]

    return Side(t.name, shape, Q.F32, rows * cols * 4, read, read)


def nvfp4_side(t: SourceTensor, d) -> Side:
    """An NVFP4 checkpoint weight as the ggml NVFP4 blocks convert writes from it
    (``convert.prequant_fp4.repack``, lossless): compared block for block with the GGUF's."""
    from ..convert.prequant_fp4 import repack

    rows, cols = d.shape
    held: list[np.ndarray] = []
    lock = threading.Lock()

    def read(r0: int, r1: int) -> np.ndarray:
        with lock:
            if not held:
                held.append(repack(d))
            x = held[0]
            if r1 >= rows:
                held.clear()
        return np.ascontiguousarray(x[r0:r1]).reshape(-1)

    return Side(t.name, (rows, cols), Q.NVFP4, rows * cols // 64 * 36, read)


def array_side(name: str, values: np.ndarray) -> Side:
    """Float32 values held in memory (an NVFP4 weight's per-tensor scales) as an F32 side."""
    x = np.ascontiguousarray(values, dtype=np.float32).reshape(1, -1)
    return Side(name, (x.size,), Q.F32, x.nbytes, lambda r0, r1: x[r0:r1].reshape(-1).view(np.uint8))


def neox_side(side: Side, head_dim: int) -> Side:
    """A checkpoint Q/K weight (rows) or norm (elements) seen in the NeoX order convert writes
    for ``rope_is_neox_style: false`` checkpoints (per head: even dims, then odd)."""
    from ..convert.checkpoint import neox_permute

    if len(side.shape) == 1:
        elem = side.nbytes // side.cols
        permuted = lambda: neox_permute(side.read(0, 1).reshape(side.cols, elem), head_dim).reshape(-1)  # noqa: E731
        return Side(side.name, side.shape, side.qtype, side.nbytes, lambda r0, r1: permuted())
    row_bytes = side.nbytes // side.rows

    def read(r0: int, r1: int) -> np.ndarray:
        idx = neox_permute(np.arange(side.rows), head_dim)[r0:r1]
        whole = side.read(0, side.rows).reshape(side.rows, row_bytes)  # one tensor: what convert holds too
        return whole[idx].reshape(-1)

    return Side(side.name, side.shape, side.qtype, side.nbytes, read)


def dequantize_rows(raw: np.ndarray, t: Q, rows: int, cols: int, out: np.ndarray | None = None) -> np.ndarray:
    """Bytes of ``rows`` rows -> float32 (rows, cols), with ggml's float operations (every type
    ``quantize`` writes is checked bit for bit against ggml's own to_float in
    tests/compare/test_sides.py); in ``out`` (float32, at least rows x cols) where the type's
    path can write there."""
    from .kernels import dequantize as fast

    y = fast(raw, t, rows, cols, out)  # Q8_0 / Q4_K / Q6_K kernels, F16 by table (same bits)
    if y is not None:
        return y
    if t == Q.BF16 and out is not None:
        return bf16_to_f32(raw, out[:rows * cols]).reshape(rows, cols)
    if t == Q.Q8_0:
        # the hot quantized type, inline: half the time of gguf-py's version (which
        # dflash_gguf.quants uses) for the same y = x * d per element
        b = raw.reshape(-1, 34)
        d = np.ascontiguousarray(b[:, :2]).view("<f2").astype(np.float32)  # (n, 1)
        y = b[:, 2:].view(np.int8).astype(np.float32)
        y *= d
        return y.reshape(rows, cols)
    from ..quants import QUANTIZE_TYPES, dequantize

    if t in QUANTIZE_TYPES:
        return dequantize(raw, t, (rows, cols))
    import gguf  # types we cannot write may still be read (IQ2/IQ3, TQ*, MXFP4: whatever gguf-py decodes)

    try:
        return np.asarray(gguf.dequantize(raw.reshape(rows, -1), t), dtype=np.float32).reshape(rows, cols)
    except NotImplementedError:
        raise GGUFFormatError(f"cannot dequantize ggml type {t.name}: neither dflash_gguf.quants nor gguf-py "
                              "implements it") from None
