"""Shared block machinery for the ggml quantizers (gguf-py's ``__Quant`` idea).

A quant type is a small class: ``qtype``, ``block_size``, ``type_size`` and a
``quantize_blocks`` that maps ``(n_blocks, block_size)`` float32 to
``(n_blocks, type_size)`` uint8, plus optionally ``numba_kernel``. Everything else lives
here: the registry, the rows -> blocks reshape, chunking over blocks for bounded memory,
the thread pool, the NaN/inf guard, the choice between the numba kernel and
``quantize_blocks``, and the post-condition asserts.

Bit-exactness rules shared by every kernel (ggml/src/ggml-quants.c, the ``*_ref`` quantizers):
float32 only (NumPy scalars, never Python floats mixed into float32 arrays where
NEP 50 could promote), C's association order, and sequential sums where C sums
sequentially (``seq_sum``: rows added one after another, vectorised across blocks).
"""
from __future__ import annotations

import functools
import importlib
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..errors import QuantizationError
from .threads import default_threads

F32 = np.float32

# nearest_int's magic constant 1.5 * 2**23 (ggml-quants.c).
_MAGIC = F32(12582912.0)
# |f| up to this, nearest_int(f) == rint(f) (round half to even); beyond it the C trick wraps.
NEAREST_INT_LIMIT = F32(4194303.0)
# int8_t/uint8_t casts of floats compile to cvttss2si on x86-64: out of int32 range
# (and NaN/inf) gives INT32_MIN, whose low byte is 0.
_INT32_LIMIT = F32(2147483648.0)

_REGISTRY: dict[GGMLQuantizationType, type[BlockQuant]] = {}
# Values per thread-pool task, at most (a whole number of chunks).
_TASK_VALUES = 1 << 20


def nearest_int(f: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: add 1.5*2^23 in float32, keep the low 23 bits, as int32.

    Literal, so it also wraps like C outside |f| <= 4194303 and maps NaN to 0.
    """
    v = np.add(f, _MAGIC, dtype=np.float32)
    return (v.view(np.int32) & 0x7FFFFF) - 0x400000


def trunc_to_int8_bits(v: np.ndarray) -> np.ndarray:
    """C ``(int8_t)v`` / ``(uint8_t)v`` for a float32 ``v`` as the x86-64 reference build does it:
    truncate to int32 (INT32_MIN when out of range or NaN), keep the low byte. Returns int32 0..255.
    """
    ok = np.abs(v) < _INT32_LIMIT  # False for NaN/inf
    return np.where(ok, v, F32(0)).astype(np.int32) & 0xFF


def _seq_sum_loop(a: np.ndarray) -> np.ndarray:
    acc = a[0].copy()
    for i in range(1, a.shape[0]):
        np.add(acc, a[i], out=acc)
    return acc


@functools.cache  # asked on the first seq_sum, not on import (~15 ms with numpy.random)
def _reduce_is_sequential() -> bool:
    """Whether ``np.add.reduce(a, axis=0)`` on a C-contiguous 2-D float32 array adds the rows
    one after another (it does in NumPy: the reduced axis is the outer loop, so each column
    is a running sum; only a single column falls into the pairwise inner-loop reduction).
    Checked once on data where pairwise and sequential orders disagree; if this NumPy ever
    behaves otherwise we use the explicit loop."""
    rng = np.random.default_rng(12345)
    for n, ns in ((16, 2), (32, 3), (32, 17), (16, 1000), (32, 8193)):
        a = (rng.standard_normal((n, ns)) * np.exp(rng.uniform(-20, 20, (n, ns)))).astype(np.float32)
        if not np.array_equal(np.add.reduce(a, axis=0).view(np.uint32), _seq_sum_loop(a).view(np.uint32)):
            return False
    return True


def seq_sum(a: np.ndarray, *, from_zero: bool = True, nonneg: bool = False) -> np.ndarray:
    """Sequential float32 sum over axis 0, as a C ``for`` loop does it (never pairwise).

    ``from_zero=True`` mirrors ``float s = 0; s += a[i]``; ``from_zero=False`` mirrors
    ``float s = a[0]; s += a[i>0]``. The two differ only in the sign of a zero result: the
    first is never -0, the second is -0 exactly when every term is -0. ``nonneg=True``
    promises no term is -0 (squares, weights times non-negative levels), which makes the
    two conventions agree and skips that fix-up.
    """
    if a.ndim == 2 and a.shape[1] >= 2 and a.flags.c_contiguous and _reduce_is_sequential():
        acc = np.add.reduce(a, axis=0)  # NumPy may start from its identity +0 or from a[0]
    else:
        acc = _seq_sum_loop(a)  # starts from a[0]
    if nonneg:
        return acc
    if from_zero:
        acc += F32(0)  # 0 + s: turns a -0 into +0, changes nothing else
        return acc
    zero = acc == 0
    if zero.any():
        acc[zero] = np.where(np.signbit(a[:, zero] if a.ndim == 2 else a[zero]).all(axis=0), F32(-0.0), F32(0.0))
    return acc


def reduce_rows(ufunc: np.ufunc, a: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(a, axis=1)`` for an order-free ufunc (maximum/minimum) over short rows.

    NumPy reduces a short last axis one row at a time (~100 ns per row); halving the flat
    array with strided views runs each level as one long loop instead. Row length must be
    a power of two for the fast path.
    """
    n = a.shape[1]
    if n & (n - 1) or not a.flags.c_contiguous:
        return ufunc.reduce(a, axis=1)
    m = a.reshape(-1)
    while n > 1:
        v = m.reshape(-1, 2)
        m = ufunc(v[:, 0], v[:, 1])
        n //= 2
    return m


def first_absmax(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """``if (amax < |v|) { amax = |v|; max = v; }`` from amax = max = 0, along ``axis`` of a
    2-D array: the largest magnitude and the signed value that first reaches it (+0 when all
    are zero). From the max and the min; only where the largest positive and negative
    magnitudes tie is the first occurrence looked up. Finite input only.
    """
    if axis == 0:
        hi, lo = x.max(axis=0), x.min(axis=0)
    else:
        hi, lo = reduce_rows(np.maximum, x), reduce_rows(np.minimum, x)
    amax = np.maximum(hi, -lo)
    m = np.where(hi >= -lo, hi, lo)
    tie = np.flatnonzero((hi == -lo) & (hi > 0))
    if tie.size:
        sub = x[:, tie].T if axis == 0 else x[tie]  # (n_tie, n)
        first = np.argmax(np.abs(sub) == amax[tie][:, None], axis=1)
        m[tie] = sub[np.arange(tie.size), first]
    return amax, np.where(amax > 0, m, F32(0))


def fp16_bytes(v: np.ndarray) -> np.ndarray:
    """GGML_FP32_TO_FP16 as little-endian bytes, shape (..., 2).

    NumPy's float32->float16 cast is bit-identical to ggml's software conversion for every
    non-NaN input (RNE, subnormals, overflow to inf); NaN never reaches here (input guard).
    """
    return np.ascontiguousarray(v, dtype=np.float32).astype("<f2").view(np.uint8).reshape(*v.shape, 2)


def fp16_round(v: np.ndarray) -> np.ndarray:
    """GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(v)): the value a stored fp16 scale reads back as."""
    return v.astype(np.float16).astype(np.float32)


class BlockQuant:
    """One ggml type: subclasses set ``qtype=`` and write ``quantize_blocks``."""

    qtype: ClassVar[GGMLQuantizationType]
    block_size: ClassVar[int]
    type_size: ClassVar[int]
    # Values per chunk of the numpy path: bounds the temporaries (a few float32 arrays of this
    # size per worker). Smaller chunks keep them in L2 but pay NumPy's per-call overhead more
    # often: 2^18 measured fastest for Q8_0 and the K-quants (AVX2 EPYC, 512 KiB L2).
    chunk_values: ClassVar[int] = 1 << 20
    # The compiled kernel (``_numba.kernel`` name) that gives quantize_blocks' bytes faster and
    # runs instead of it while numba is enabled; None: numpy only.
    numba_kernel: ClassVar[str | None] = None
    # The numpy path fits each block by a search of many small NumPy calls (the K-quants): on
    # threads they wait on each other for the GIL, so a large job runs them in worker processes
    # (workers.py). A cheap one-pass type (Q8_0, Q5_0) stays on threads: the pipe costs more.
    numpy_search: ClassVar[bool] = False

    def __init_subclass__(cls, qtype: GGMLQuantizationType | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if qtype is None:
            return
        cls.qtype = qtype
        cls.block_size, cls.type_size = GGML_QUANT_SIZES[qtype]
        assert qtype not in _REGISTRY, qtype
        _REGISTRY[qtype] = cls

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        """(n_blocks, block_size) float32, finite -> (n_blocks, type_size) uint8."""
        raise NotImplementedError

    @classmethod
    def _kernel(cls):
        """The compiled kernel while numba is enabled and this type has one, else None."""
        if cls.numba_kernel is not None:
            from . import _numba  # here, not at import: importing numba costs ~0.3 s

            if _numba.enabled():
                return _numba.kernel(cls.numba_kernel)
        return None

    @classmethod
    def _quantize(cls, blocks: np.ndarray) -> np.ndarray:
        """The numba kernel while numba is enabled, else ``quantize_blocks``."""
        kernel = cls._kernel()
        if kernel is not None:
            from . import _numba

            return _numba.run(kernel, blocks)
        with np.errstate(all="ignore"):  # C's inf/NaN intermediates are reproduced, not warned about
            return cls.quantize_blocks(blocks)

    @classmethod
    def quantize_finite(cls, x: np.ndarray) -> np.ndarray:
        """Finite float32 values, C order, a whole number of blocks -> ``(n_blocks, type_size)``
        uint8. The caller has refused NaN/inf. One kernel call with numba (its working set is a
        few lanes whatever the size); ``chunk_values`` at a time on the numpy path, which bounds
        its temporaries."""
        blocks = x.reshape(-1, cls.block_size)
        step = blocks.shape[0] if cls._kernel() is not None else max(1, cls.chunk_values // cls.block_size)
        if blocks.shape[0] <= step:
            return cls._quantize_checked(blocks)
        out = np.empty((blocks.shape[0], cls.type_size), np.uint8)
        for i in range(0, blocks.shape[0], step):
            out[i : i + step] = cls._quantize_checked(blocks[i : i + step])
        return out

    @classmethod
    def has_values_kernel(cls) -> bool:
        """Whether ``numba_kernel + "_values"`` exists: the same bytes, and what they
        dequantize to (quantize_finite_with_values). The numpy path has no such variant."""
        from . import _numba  # the kernel table only: numba itself is not imported

        return cls.numba_kernel is not None and _numba.has_kernel(cls.numba_kernel + "_values")

    @classmethod
    def quantize_finite_with_values(cls, x: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """``quantize_finite(x)``, and into ``out`` (float32, C-contiguous, writable, ``x.size``
        values) the values its bytes dequantize to, bit for bit, from the same kernel pass;
        None (``out`` untouched) where this type has no such kernel or numba is off."""
        if not cls.has_values_kernel() or cls._kernel() is None:
            return None
        from . import _numba

        blocks = x.reshape(-1, cls.block_size)
        if not blocks.flags.writeable:  # as _numba.run: one specialisation, for writable arrays
            blocks = blocks.copy()
        q = _numba.kernel(cls.numba_kernel + "_values")(blocks, out.reshape(blocks.shape))
        assert q.shape == (blocks.shape[0], cls.type_size), (cls.qtype.name, q.shape)
        return q

    @classmethod
    def _quantize_checked(cls, blocks: np.ndarray) -> np.ndarray:
        out = cls._quantize(blocks)
        assert out.dtype == np.uint8, (cls.qtype.name, out.dtype)
        assert out.shape == (blocks.shape[0], cls.type_size), (cls.qtype.name, out.shape)
        return out


# The modules whose classes register a type (each on import, by subclassing BlockQuant).
_TYPE_MODULES = ("floats", "q8_0", "legacy", "q4_k", "q6_k", "q3_k", "q2_k", "iq4")


def registered() -> dict[GGMLQuantizationType, type[BlockQuant]]:
    """Every quantizer class by its ggml type. The type modules are imported on the first call,
    not with the package: a job that only copies tensors never loads them."""
    _import_type_modules()
    return _REGISTRY


@functools.cache
def _import_type_modules() -> None:
    for name in _TYPE_MODULES:
        importlib.import_module(f"{__package__}.{name}")


def _first_nonfinite(chunk: np.ndarray) -> int | None:
    # max/min propagate NaN and expose +-inf without allocating a mask for the common case.
    if np.isfinite(chunk.max()) and np.isfinite(chunk.min()):
        return None
    return int(np.flatnonzero(~np.isfinite(chunk.reshape(-1)))[0])


def _nonfinite_error(name: str | None, shape: tuple[int, ...], flat_index: int, value: float) -> QuantizationError:
    where = tuple(int(i) for i in np.unravel_index(flat_index, shape)) if shape else ()
    label = repr(name) if name else "<unnamed>"
    return QuantizationError(
        f"tensor {label} has a non-finite value ({value}) at index {where}; "
        "llama-quantize refuses NaN/inf weights (check the checkpoint for overflow/corruption)"
    )


def quantize_array(
    cls: type[BlockQuant], x: np.ndarray, *, name: str | None = None, threads: int | None = None
) -> np.ndarray:
    """Quantize ``x`` row-wise (last axis) to ``cls``'s ggml bytes, shape ``(..., bytes_per_row)``.

    Work is split into chunks of whole blocks (``cls.chunk_values`` values each), converted to
    float32 one chunk at a time, so peak memory is the output plus a few chunk-sized temporaries
    per worker. Chunks run on a thread pool (NumPy releases the GIL inside ufunc loops); the
    bytes do not depend on the chunking or the thread count (every ggml quant is block-local).
    """
    x = np.asarray(x)
    label = repr(name) if name else "<unnamed>"
    if x.dtype.kind not in "fiu":
        raise QuantizationError(f"tensor {label}: cannot quantize dtype {x.dtype} (expected a float array)")
    if x.ndim == 0:
        raise QuantizationError(f"tensor {label}: cannot quantize a 0-d array")
    shape = x.shape
    ncols = shape[-1]
    bs, ts = cls.block_size, cls.type_size
    if ncols % bs != 0:
        raise QuantizationError(
            f"tensor {label}: last dimension {ncols} (shape {shape}) is not a multiple of the "
            f"{cls.qtype.name} block size {bs}"
        )
    out_shape = (*shape[:-1], ncols // bs * ts)
    n_blocks = x.size // bs
    out = np.empty((n_blocks, ts), dtype=np.uint8)
    if n_blocks == 0:
        return out.reshape(out_shape)

    chunk_blocks = max(1, cls.chunk_values // bs)
    if x.flags.c_contiguous:
        flat = x.reshape(-1)

        def item(i0: int, i1: int) -> tuple[np.ndarray, int]:
            return flat[i0 * bs : i1 * bs], i0 * bs

        bounds = range(0, n_blocks, chunk_blocks)
        spans = [(b, min(b + chunk_blocks, n_blocks)) for b in bounds]
    else:
        # Non-contiguous input: chunk by whole rows so no full-size copy is ever made.
        rows = x.reshape(-1, ncols) if x.ndim > 1 else x[None, :]
        bpr = ncols // bs
        rows_per = max(1, chunk_blocks // bpr)

        def item(i0: int, i1: int) -> tuple[np.ndarray, int]:
            r0, r1 = i0 // bpr, i1 // bpr
            return np.ascontiguousarray(rows[r0:r1]).reshape(-1), i0 * bs

        spans = [
            (r * bpr, min(r + rows_per, rows.shape[0]) * bpr) for r in range(0, rows.shape[0], rows_per)
        ]
    n_threads = default_threads() if threads is None else max(1, int(threads))
    # A task (one thread-pool item) runs several chunks back to back: fewer futures and less
    # GIL traffic, the same memory bound (one chunk's temporaries per worker at a time), and
    # still about four tasks per thread so the threads finish together.
    chunk_vals = (spans[0][1] - spans[0][0]) * bs
    per_task = max(1, min(_TASK_VALUES // chunk_vals, len(spans) // (4 * n_threads)))
    tasks = [spans[i : i + per_task] for i in range(0, len(spans), per_task)]

    def work(task: list[tuple[int, int]]) -> None:
        for i0, i1 in task:
            src, offset = item(i0, i1)
            chunk = np.asarray(src, dtype=np.float32)
            bad = _first_nonfinite(chunk)
            if bad is not None:
                raise _nonfinite_error(name, shape, offset + bad, float(chunk.reshape(-1)[bad]))
            out[i0:i1] = cls._quantize_checked(chunk.reshape(i1 - i0, bs))

    if n_threads == 1 or len(tasks) == 1:
        for task in tasks:
            work(task)
    else:
        with ThreadPoolExecutor(max_workers=min(n_threads, len(tasks))) as pool:
            futures = [pool.submit(work, task) for task in tasks]
            # Re-raise the error of the earliest failing task: that holds the first bad index.
            first_error = None
            for f in futures:
                if f.cancelled():
                    continue
                exc = f.exception()
                if exc is not None and first_error is None:
                    first_error = exc
                    for g in futures:
                        g.cancel()
            if first_error is not None:
                raise first_error
    return out.reshape(out_shape)
