"""compare-weights: is a GGUF a faithful copy of a checkpoint (or of another GGUF), tensor by
tensor, and where does it lose precision?

Three stages, each answering one question:

1. Inventory. Every checkpoint tensor is paired with its GGUF tensor through the name map of
   the file's detected format (``Format.gguf_name``), and shapes are compared in torch order
   (the GGUF's ``ne`` reversed). Missing, extra and shape-mismatched tensors fail the verdict.
2. Numbers, streamed. Each pair is cut into row chunks (a few MB of float32) that a small
   thread pool works through (NumPy releases the GIL), so memory is bounded by chunks x
   workers, not by tensors. Per chunk: the reference side is re-encoded with our bit-exact
   ggml quantizer into the GGUF tensor's type and the bytes are compared (equal bytes =
   "bit-identical": exactly what ggml writes from this checkpoint), then both sides are
   dequantized and the error metrics accumulated. Cache-sized chunks are also what makes
   this faster than dequantizing whole tensors: every whole-tensor NumPy temporary is a
   fresh, page-faulting allocation.
3. Diagnosis, only for tensors that failed: the tensor is re-read whole and tested against
   explanations (transposed, swapped with another tensor, scaled, shape spelled in the wrong
   convention, or uncorrelated = a different checkpoint), so a failure names its cause.

The library never prints; the CLI renders ``CompareReport``. Thresholds: ``BANDS`` below,
documented (with how they were measured) in docs/compare-weights.md.
"""
from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from ..errors import DflashError, GGUFFormatError, OutputError, QuantizationError, UsageError, WeightsError
from ..formats import Format, meta_from_gguf
from ..formats.names import DROPPED_TENSORS, OPTIONAL_TENSORS
from ..fileio.gguf_reader import GGUFFile, read_gguf
from ..fileio.types import TensorInfo
from ..convert.plan import ROPE_FREQS
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor, read_inventory

BIT_IDENTICAL, WITHIN, OUT = "bit-identical", "within", "out"
MISSING, EXTRA, SHAPE_MISMATCH = "missing", "extra", "shape-mismatch"
STATUSES = (BIT_IDENTICAL, WITHIN, OUT, MISSING, EXTRA, SHAPE_MISMATCH)
PASSING = (BIT_IDENTICAL, WITHIN)


# --- thresholds ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Band:
    """What a faithful encoding of a tensor in one ggml type may deviate from its source.

    rel_rms:   upper band on ||y - x|| / ||x||.
    block_err: quantized types: max |y - x| inside one ggml block / max |x| of that block.
               A legitimate quantizer (rounding, clipping, scale search, imatrix) stays within
               a step or so of the block's scale; a corrupted byte does not.
    elem_rel, elem_abs: float types ("exact or last ulp"): every element must satisfy
               |y - x| <= elem_rel * |x| + elem_abs (one ulp of the storage type, with the
               subnormal spacing as the floor).
    """

    rel_rms: float
    block_err: float | None = None
    elem_rel: float | None = None
    elem_abs: float | None = None


# Float types: one ulp (2^-mantissa_bits) relative, subnormal spacing absolute. Their rel_rms
# band is the same ulp: a tensor whose every element is within one ulp is within it in RMS.
# Quantized types: rel_rms band = 1.5 x the worst relative RMS error, block_err = 2 x the worst
# block error, each rounded up to the next 0.005, measured with our ggml-exact quantizer on six
# weight-like distributions
# (bench/bench_compare.py --bands reproduces the measurement; docs/compare-weights.md has the
# numbers). Types without an entry get FALLBACK_BAND.
BANDS: dict[str, Band] = {
    "F32": Band(2.0 ** -23, elem_rel=2.0 ** -23, elem_abs=2.0 ** -149),
    "F16": Band(2.0 ** -10, elem_rel=2.0 ** -10, elem_abs=2.0 ** -24),
    "BF16": Band(2.0 ** -7, elem_rel=2.0 ** -7, elem_abs=2.0 ** -133),
    "Q8_0": Band(0.015, block_err=0.01),
    "Q6_K": Band(0.045, block_err=0.045),
    "Q5_K": Band(0.075, block_err=0.11),
    "Q5_1": Band(0.075, block_err=0.07),
    "Q5_0": Band(0.115, block_err=0.125),
    "Q4_K": Band(0.14, block_err=0.19),
    "Q4_1": Band(0.15, block_err=0.135),
    "Q4_0": Band(0.22, block_err=0.25),
}
FALLBACK_BAND = Band(0.25)
# A file whose error is within this factor of what ggml's own encoding of the same data gives
# is "within" even when the data is harder than the band's distributions (heavy tails).
EXPECTED_FACTOR = 1.5
ALL_TYPES = "*"
_FLOATS = (Q.F32, Q.F16, Q.BF16)
_SOURCE_QTYPES = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16}


def band(qtype: Q) -> Band:
    return BANDS.get(qtype.name, FALLBACK_BAND)


def parse_tolerances(specs: Iterable[str]) -> dict[str, float]:
    """``["q4_K=0.05", "0.01"]`` -> ``{"Q4_K": 0.05, "*": 0.01}`` (a bare number: every type).

    Raises:
        UsageError: an unknown type name, or a value that is not a positive number.
    """
    from ..quants import resolve_qtype

    out: dict[str, float] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep:
            key, value = ALL_TYPES, spec
        else:
            try:
                key = resolve_qtype(key).name
            except QuantizationError:
                raise UsageError(f"--tolerance {spec!r}: unknown ggml type {key!r}; "
                                 f"use e.g. q4_K=0.05, Q8_0=0.01, bf16=0.004 or a bare number for every type") from None
        try:
            v = float(value)
        except ValueError:
            v = float("nan")
        if not (math.isfinite(v) and v > 0):
            raise UsageError(f"--tolerance {spec!r}: {value!r} is not a positive number (a relative RMS error, "
                             "e.g. 0.05)")
        out[key] = v
    return out


# --- results -----------------------------------------------------------------------------------
@dataclass
class TensorComparison:
    """One checkpoint tensor (or tensor of GGUF A) against its GGUF tensor (of B).

    Error metrics are of the lossier side against the more precise one (the checkpoint; in
    GGUF-vs-GGUF mode the side with more bits per weight, see ``reference``), relative to the
    reference's values. ``shape`` / ``gguf_shape`` are torch order; ``ne`` is ggml order.
    """

    source: str | None  # checkpoint name as stored (or A's tensor name)
    gguf_name: str | None  # name in the GGUF (or B's tensor name)
    type: str | None  # ggml type of the GGUF (B) tensor
    shape: tuple[int, ...] | None  # torch order, source / A
    status: str  # one of STATUSES
    source_type: str | None = None  # safetensors dtype, or A's ggml type
    gguf_shape: tuple[int, ...] | None = None  # torch order, GGUF / B
    rel_rms: float | None = None  # ||y - x|| / ||x||
    max_abs: float | None = None  # max |y - x|
    max_abs_index: tuple[int, ...] | None = None  # where (torch order, reference layout)
    cosine: float | None = None
    norm_ratio: float | None = None  # ||y|| / ||x||
    expected_rel_rms: float | None = None  # error of ggml's own encoding of the reference
    expected_max_abs: float | None = None
    deviation_from_ggml: float | None = None  # ||y - ggml(x)|| / ||x||; 0 when bit-identical
    bytes_differing: int | None = None  # bytes that differ from ggml's encoding
    limit: float | None = None  # the rel_rms limit applied
    limit_source: str | None = None  # "band", "expected", "--tolerance"
    flags: list[str] = field(default_factory=list)
    detail: str = ""  # why, for anything that is not bit-identical / within
    reference: str = "a"  # GGUF-vs-GGUF: the side used as x ("a" or "b")
    nbytes: int = 0  # bytes of the GGUF (B) tensor

    @property
    def name(self) -> str:
        return self.gguf_name or self.source or "?"

    @property
    def ne(self) -> list[int] | None:
        return None if self.gguf_shape is None else list(reversed(self.gguf_shape))

    @property
    def passed(self) -> bool:
        return self.status in PASSING

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("shape", "gguf_shape", "max_abs_index"):
            if d[k] is not None:
                d[k] = list(d[k])
        d["ne"] = self.ne
        d["source_ne"] = None if self.shape is None else list(reversed(self.shape))
        for k, v in d.items():  # JSON has no NaN/inf: spell them as strings
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = str(v)
        return d


@dataclass
class CompareReport:
    mode: str  # "safetensors-gguf" | "gguf-gguf"
    a: Path  # drafter dir or GGUF A
    b: Path  # the GGUF
    format: str | None  # detected format of the GGUF (B)
    a_format: str | None  # GGUF-vs-GGUF: format of A
    tensors: list[TensorComparison]
    notes: list[str] = field(default_factory=list)
    requantized: bool = True
    tolerances: dict[str, float] = field(default_factory=dict)  # user overrides
    seconds: float = 0.0
    bytes_compared: int = 0  # reference + GGUF bytes read in the main pass

    @property
    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for t in self.tensors:
            c[t.status] += 1
        return c

    @property
    def verdict(self) -> str:
        return "pass" if self.tensors and all(t.passed for t in self.tensors) else "fail"

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def summary(self) -> str:
        """``N tensors: X bit-identical, Y within tolerance, Z out of tolerance, M missing``.

        A shape mismatch counts as out of tolerance; extra GGUF tensors are appended as
        ``, E extra`` only when there are some, so N always equals the sum."""
        c = self.counts
        line = (f"{len(self.tensors)} tensors: {c[BIT_IDENTICAL]} bit-identical, {c[WITHIN]} within tolerance, "
                f"{c[OUT] + c[SHAPE_MISMATCH]} out of tolerance, {c[MISSING]} missing")
        if c[EXTRA]:
            line += f", {c[EXTRA]} extra"
        return line

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "a": str(self.a),
            "b": str(self.b),
            "format": self.format,
            "a_format": self.a_format,
            "verdict": self.verdict,
            "summary": {"line": self.summary, "tensors": len(self.tensors), **self.counts},
            "requantized": self.requantized,
            "tolerance_overrides": self.tolerances,
            "default_bands": {k: {"rel_rms": b.rel_rms, "block_err": b.block_err, "elem_rel": b.elem_rel,
                                  "elem_abs": b.elem_abs} for k, b in BANDS.items()},
            "expected_factor": EXPECTED_FACTOR,
            "seconds": round(self.seconds, 4),
            "bytes_compared": self.bytes_compared,
            "notes": self.notes,
            "tensors": [t.to_json() for t in self.tensors],
        }


# --- the two sides of a pair -----------------------------------------------------------------
@dataclass
class _Side:
    """One tensor as ggml-encoded bytes: safetensors BF16/F16/F32 storage is already the ggml
    encoding of that type, so both sides read the same way."""

    name: str
    shape: tuple[int, ...]  # torch order
    qtype: Q
    nbytes: int
    read: Callable[[int, int], np.ndarray]  # (row0, row1) -> flat uint8 bytes of those rows

    @property
    def rows(self) -> int:
        return math.prod(self.shape[:-1]) if len(self.shape) > 1 else 1

    @property
    def cols(self) -> int:
        return self.shape[-1] if self.shape else 1

    def values(self) -> np.ndarray:
        return _deq(self.read(0, self.rows), self.qtype, self.rows, self.cols).reshape(self.shape)


class _Files:
    """pread-based access to the input files: one descriptor per file, shared by the worker
    threads (pread has no file position, so concurrent reads do not interfere). GGUF tensors
    are read this way too rather than through GGUFReader's memory map: touched map pages count
    in the process's RSS, so reading a 1 GB file through the map looks like 1 GB of memory."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def pread(self, path: Path, offset: int, n: int, what: str, error: type[DflashError]) -> np.ndarray:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        buf = np.empty(n, dtype=np.uint8)
        got = os.preadv(fd, [memoryview(buf)], offset) if n else 0
        if got != n:
            raise error(f"{path}: tensor {what} ends early ({got:,} of {n:,} bytes read at offset {offset:,}); "
                        "the file is truncated, re-fetch it")
        return buf

    def source_side(self, t: SourceTensor) -> _Side:
        qtype = _SOURCE_QTYPES[t.dtype]
        shape = t.shape or (1,)
        cols = shape[-1]
        item = 4 if qtype == Q.F32 else 2

        def read(r0: int, r1: int) -> np.ndarray:
            return self.pread(t.file, t.offset + r0 * cols * item, (r1 - r0) * cols * item, t.name, WeightsError)

        return _Side(t.name, shape, qtype, t.nbytes, read)

    def gguf_side(self, f: GGUFFile, e: TensorInfo) -> _Side:
        shape = e.shape or (1,)
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        row_bytes = e.nbytes // max(rows, 1)

        def read(r0: int, r1: int) -> np.ndarray:
            return self.pread(f.path, e.offset_abs + r0 * row_bytes, (r1 - r0) * row_bytes, e.name, GGUFFormatError)

        return _Side(e.name, shape, e.ggml_type, e.nbytes, read)


# --- dequantization (ggml's float order) ---------------------------------------------------
def _deq(raw: np.ndarray, t: Q, rows: int, cols: int) -> np.ndarray:
    """Bytes of ``rows`` rows -> float32 (rows, cols). F32/F16/BF16/Q8_0 inline (the hot
    types; the same float operations as ggml's and gguf-py's, checked bit for bit in
    tests/test_compare.py); every other type through dflash_gguf.quants / gguf-py."""
    if t == Q.F32:
        return raw.view("<f4").reshape(rows, cols)
    if t == Q.F16:
        return raw.view("<f2").astype(np.float32).reshape(rows, cols)
    if t == Q.BF16:
        v = raw.view("<u2").astype(np.uint32)
        v <<= 16  # in place: one temporary fewer than (v << 16)
        return v.view(np.float32).reshape(rows, cols)
    if t == Q.Q8_0:
        b = raw.reshape(-1, 34)
        d = np.ascontiguousarray(b[:, :2]).view("<f2").astype(np.float32)  # (n, 1)
        y = b[:, 2:].view(np.int8).astype(np.float32)  # then y *= d: dequantize_row_q8_0's x*d
        y *= d
        return y.reshape(rows, cols)
    from ..quants import QUANTIZE_TYPES, dequantize

    if t in QUANTIZE_TYPES:
        return dequantize(raw, t, (rows, cols))
    import gguf

    try:
        return np.asarray(gguf.dequantize(raw.reshape(rows, -1), t), dtype=np.float32).reshape(rows, cols)
    except NotImplementedError:
        raise GGUFFormatError(f"cannot dequantize ggml type {t.name}: neither dflash_gguf.quants nor gguf-py "
                              "implements it") from None


def _bpw(t: Q) -> float:
    bs, ts = GGML_QUANT_SIZES[t]
    return ts * 8 / bs


def _lossless(src: Q, dst: Q) -> bool:
    """Whether encoding values of type ``src`` as ``dst`` is exact (so identical bytes => zero error)."""
    return src == dst or (dst == Q.F32 and src in _FLOATS)


# --- per-chunk statistics ----------------------------------------------------------------------
@dataclass
class _Stats:
    n: int = 0
    ss_x: float = 0.0
    ss_y: float = 0.0
    ss_d: float = 0.0
    xy: float = 0.0
    max_abs: float = 0.0
    max_idx: int = -1  # flat index in the reference
    nonfinite: int = 0
    nonfinite_idx: int = -1
    bad: int = 0  # blocks (quantized) or elements (floats) beyond the band
    bad_worst: float = 0.0
    bad_idx: int = -1
    identical: bool = True
    lossless: bool = False  # identical and exact: no numbers were computed, they are 0 / 1
    any_nonzero: bool = False
    has_expected: bool = False
    exp_ss_d: float = 0.0
    exp_max_abs: float = 0.0
    dev_ss: float = 0.0
    bytes_diff: int = 0
    requant_error: str | None = None
    # chunks that took the lossless shortcut (no numbers computed): if another chunk of the
    # tensor differs, their share of ||x|| is added afterwards by _complete
    shortcut_spans: list[tuple[int, int]] = field(default_factory=list)

    def merge(self, o: "_Stats") -> None:
        self.n += o.n
        self.ss_x += o.ss_x
        self.ss_y += o.ss_y
        self.ss_d += o.ss_d
        self.xy += o.xy
        if o.max_abs > self.max_abs or (math.isnan(o.max_abs) and not math.isnan(self.max_abs)):
            self.max_abs, self.max_idx = o.max_abs, o.max_idx
        elif self.max_idx < 0:
            self.max_idx = o.max_idx
        if o.nonfinite and not self.nonfinite:
            self.nonfinite_idx = o.nonfinite_idx
        self.nonfinite += o.nonfinite
        if o.bad and o.bad_worst > self.bad_worst:
            self.bad_worst, self.bad_idx = o.bad_worst, o.bad_idx
        self.bad += o.bad
        self.identical = self.identical and o.identical
        self.lossless = self.lossless and o.lossless
        self.any_nonzero |= o.any_nonzero
        self.has_expected |= o.has_expected
        self.exp_ss_d += o.exp_ss_d
        self.exp_max_abs = max(self.exp_max_abs, o.exp_max_abs)
        self.dev_ss += o.dev_ss
        self.bytes_diff += o.bytes_diff
        self.requant_error = self.requant_error or o.requant_error
        self.shortcut_spans += o.shortcut_spans


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    # float32 BLAS dot on a cache-sized chunk, accumulated across chunks in Python float64
    return float(np.dot(a, b))


def _absmax(d: np.ndarray) -> tuple[float, int]:
    """max |d| and its flat index without materialising |d| (argmax + argmin)."""
    i, j = int(np.argmax(d)), int(np.argmin(d))
    a, b = float(d[i]), float(d[j])
    if math.isnan(a):
        return a, i
    return (a, i) if a >= -b else (-b, j)


@dataclass(frozen=True)
class _Job:
    """How one pair is compared (decided once per tensor, used by every chunk)."""

    ref: _Side  # x: the more precise side
    other: _Side  # y: the side whose bytes are checked
    exact_ref: bool  # x are the values ggml encodes (the checkpoint, or a float GGUF)
    requant: bool  # re-encode x into other's type and compare bytes
    bad_kind: str | None  # "block" | "elem" | None
    bad_limit: float  # block_err, or elem_rel
    bad_abs: float  # elem_abs
    block: int  # elements per block for the block check
    chunk_rows: int


def _chunk(job: _Job, r0: int, r1: int) -> _Stats:
    # garbage data (a corrupted exponent, an inf scale) must become a verdict, not warnings
    with np.errstate(all="ignore"):
        return _chunk_stats(job, r0, r1)


def _chunk_stats(job: _Job, r0: int, r1: int) -> _Stats:
    ref, oth = job.ref, job.other
    rows, cols = r1 - r0, ref.cols
    s = _Stats(n=rows * cols)
    xb = ref.read(r0, r1)
    yb = oth.read(r0, r1)
    if ref.qtype == oth.qtype:
        s.identical = bool(np.array_equal(xb, yb))
        if s.identical:
            s.lossless = True
            s.any_nonzero = bool(xb.any())
            s.shortcut_spans.append((r0, r1))
            return s
        x = _deq(xb, ref.qtype, rows, cols)
        e = None
    else:
        x = _deq(xb, ref.qtype, rows, cols)
        e = None
        if job.requant:
            from ..quants import quantize

            try:
                e = quantize(x, oth.qtype, name=ref.name, threads=1).reshape(-1)
            except QuantizationError as exc:  # NaN/inf in the reference: ggml would refuse it too
                s.requant_error = str(exc)
        s.identical = e is not None and bool(np.array_equal(e, yb))
        if s.identical and _lossless(ref.qtype, oth.qtype):
            s.lossless = True
            s.any_nonzero = bool(xb.any())
            s.shortcut_spans.append((r0, r1))
            return s
    y = _deq(yb, oth.qtype, rows, cols)
    xf, yf = x.reshape(-1), y.reshape(-1)
    d = np.subtract(yf, xf)
    # three dots, not four: x.y = x.x + x.d and y.y = x.x + 2 x.d + d.d (y = x + d)
    s.ss_x, s.ss_d, xd = _dot(xf, xf), _dot(d, d), _dot(xf, d)
    if not math.isfinite(s.ss_d + s.ss_x + xd) and np.isfinite(d).all():
        # finite but huge values (a flipped exponent bit) overflow float32 products
        x64, d64 = xf.astype(np.float64), d.astype(np.float64)
        s.ss_x, s.ss_d, xd = float(x64 @ x64), float(d64 @ d64), float(x64 @ d64)
    s.xy, s.ss_y = s.ss_x + xd, s.ss_x + 2 * xd + s.ss_d
    s.any_nonzero = s.ss_x > 0
    s.max_abs, i = _absmax(d)
    s.max_idx = r0 * cols + i
    if not (math.isfinite(s.ss_y) and math.isfinite(s.ss_x)):
        bad = ~np.isfinite(yf) & np.isfinite(xf)
        s.nonfinite = int(np.count_nonzero(bad))
        if s.nonfinite:
            s.nonfinite_idx = r0 * cols + int(np.flatnonzero(bad)[0])
    if s.identical:
        # ggml's own encoding: the expected error is the error, and no block can be corrupt.
        s.has_expected, s.exp_ss_d, s.exp_max_abs = True, s.ss_d, s.max_abs
        return s
    if e is not None:
        ye = _deq(e, oth.qtype, rows, cols).reshape(-1)
        de = np.subtract(ye, xf)
        s.has_expected, s.exp_ss_d, s.exp_max_abs = True, _dot(de, de), _absmax(de)[0]
        np.subtract(yf, ye, out=de)
        s.dev_ss = _dot(de, de)
        s.bytes_diff = int(np.count_nonzero(e != yb))
    elif ref.qtype == oth.qtype:
        s.bytes_diff = int(np.count_nonzero(xb != yb))
        if job.exact_ref:  # ggml's encoding of x in x's own type is x itself
            s.has_expected, s.dev_ss = True, s.ss_d
    ad = np.abs(d)
    if job.bad_kind == "block":
        # per-block max error relative to the block's own range: a corrupted byte is many steps
        # off in its block even when it barely moves the tensor's RMS
        bs = job.block
        num = ad.reshape(-1, bs).max(axis=1)
        den = np.abs(xf).reshape(-1, bs).max(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(den > 0, num / np.where(den > 0, den, 1), np.where(num > 0, np.inf, 0))
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
        over = ratio > job.bad_limit
        s.bad = int(np.count_nonzero(over))
        if s.bad:
            k = int(np.argmax(ratio))
            within_block = int(np.argmax(ad[k * bs:(k + 1) * bs]))
            s.bad_worst, s.bad_idx = float(ratio[k]), r0 * cols + k * bs + within_block
    elif job.bad_kind == "elem":
        lim = np.abs(xf) * np.float32(job.bad_limit) + np.float32(job.bad_abs)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = ad / lim
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
        over = ratio > 1
        s.bad = int(np.count_nonzero(over))
        if s.bad:
            k = int(np.argmax(ratio))
            s.bad_worst, s.bad_idx = float(ratio[k]), r0 * cols + k
    return s


# --- the comparison engine -------------------------------------------------------------------
CHUNK_VALUES = 1 << 18  # ~1 MB of float32 per temporary: stays in L2, so NumPy passes are cheap


def _default_workers() -> int:
    from ..quants import default_threads

    return max(1, min(4, default_threads()))


@dataclass
class _Pair:
    row: TensorComparison
    job: _Job | None  # None: nothing to compute numerically (shape mismatch)
    a: _Side  # A / source side
    b: _Side  # B / GGUF side
    override: float | None
    band: Band


def _make_pair(row: TensorComparison, a: _Side, b: _Side, overrides: Mapping[str, float], requantize: bool,
               a_exact: bool, a_is_truth: bool = False) -> _Pair:
    """Choose the reference (the checkpoint; between two GGUFs the side with more bits per
    weight, A on ties), the band and the checks."""
    ref, oth = (a, b) if a_is_truth or _bpw(a.qtype) >= _bpw(b.qtype) else (b, a)
    row.reference = "a" if ref is a else "b"
    ref_exact = a_exact if ref is a else False
    if ref is b and ref.qtype in _FLOATS:
        ref_exact = True
    ref_lossy = ref.qtype not in _FLOATS
    ob = band(oth.qtype)
    override = overrides.get(oth.qtype.name, overrides.get(ALL_TYPES))
    if a_is_truth:  # the checkpoint is exact: only the GGUF's encoding loses anything
        bd = ob
    elif ref_lossy:  # both quantized: the errors of both encodings add (in quadrature for RMS)
        rb = band(ref.qtype)
        bd = Band(math.hypot(rb.rel_rms, ob.rel_rms),
                  block_err=None if ob.block_err is None else ob.block_err + (rb.block_err or 0))
    elif ref.qtype == oth.qtype or oth.qtype not in _FLOATS:
        bd = ob
    else:  # two float types: one ulp of the coarser, with the larger subnormal floor
        rb = band(ref.qtype)
        bd = Band(ob.rel_rms, elem_rel=max(ob.elem_rel or 0, rb.elem_rel or 0),
                  elem_abs=max(ob.elem_abs or 0, rb.elem_abs or 0))
    if bd.elem_rel is not None and oth.qtype in _FLOATS:
        kind, lim, absf, block = "elem", bd.elem_rel, bd.elem_abs or 0.0, 1
    elif bd.block_err is not None:
        kind, lim, absf, block = "block", bd.block_err, 0.0, GGML_QUANT_SIZES[oth.qtype][0]
    else:
        kind, lim, absf, block = None, 0.0, 0.0, 1
    from ..quants import QUANTIZE_TYPES

    # float targets are re-encoded even with requantize=False: a cast costs nothing
    requant = ref_exact and oth.qtype in QUANTIZE_TYPES and (requantize or oth.qtype in _FLOATS)
    cols = ref.cols
    chunk_rows = max(1, CHUNK_VALUES // max(cols, 1))
    job = _Job(ref, oth, ref_exact, requant, kind, lim, absf, block, chunk_rows)
    return _Pair(row, job, a, b, override, bd)


def _run(pairs: list[_Pair], workers: int, progress: Callable[[int], None] | None) -> int:
    """Main pass: chunk jobs on a thread pool, reduced per tensor in chunk order (so the
    float sums do not depend on scheduling). Returns the bytes read."""
    numeric = [p for p in pairs if p.job is not None]
    total = 0

    def spans(p: _Pair) -> list[tuple[int, int]]:
        rows, step = p.job.ref.rows, p.job.chunk_rows
        return [(r, min(r + step, rows)) for r in range(0, rows, step)] or [(0, 0)]

    if workers <= 1:
        for p in numeric:
            st = _Stats(lossless=True)
            for r0, r1 in spans(p):
                st.merge(_chunk(p.job, r0, r1))
            _complete(p.job, st)
            _finish(p, st)
            total += p.a.nbytes + p.b.nbytes
            if progress:
                progress(p.b.nbytes)
        return total
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="compare") as pool:
        # Data lives only inside a running chunk job (memory: chunk temporaries x workers); a
        # future holds a few numbers. Tensors are still submitted only a window ahead so the
        # queue stays short, and results are reduced strictly in order.
        pending: list[tuple[_Pair, list]] = []
        window = 4 * workers
        it = iter(numeric)
        queued = 0

        def fill() -> None:
            nonlocal queued
            while queued < window:
                p = next(it, None)
                if p is None:
                    return
                futs = [pool.submit(_chunk, p.job, r0, r1) for r0, r1 in spans(p)]
                pending.append((p, futs))
                queued += len(futs)

        fill()
        while pending:
            p, futs = pending.pop(0)
            st = _Stats(lossless=True)
            for fu in futs:
                st.merge(fu.result())
            queued -= len(futs)
            fill()
            _complete(p.job, st)
            _finish(p, st)
            total += p.a.nbytes + p.b.nbytes
            if progress:
                progress(p.b.nbytes)
    return total


def _complete(job: _Job, st: _Stats) -> None:
    """A tensor whose chunks are partly byte-identical (lossless shortcut) and partly not: add
    the shortcut chunks' x.x (where y == x) so the relative errors use the whole tensor's norm.
    Only partially damaged tensors get here, so re-reading those chunks costs nothing overall."""
    if st.lossless or not st.shortcut_spans:
        return
    for r0, r1 in st.shortcut_spans:
        x = _deq(job.ref.read(r0, r1), job.ref.qtype, r1 - r0, job.ref.cols).reshape(-1)
        xx = _dot(x, x)
        st.ss_x += xx
        st.ss_y += xx
        st.xy += xx
    st.shortcut_spans = []


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if flat >= 0 else ()


def _fmt_idx(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, idx)) + "]"


def _finish(p: _Pair, st: _Stats) -> None:
    r, job = p.row, p.job
    shape = job.ref.shape
    if st.lossless:
        r.rel_rms, r.max_abs, r.norm_ratio = 0.0, 0.0, 1.0
        r.cosine = 1.0 if st.any_nonzero else None
        r.max_abs_index = None
        r.expected_rel_rms, r.expected_max_abs, r.deviation_from_ggml, r.bytes_differing = 0.0, 0.0, 0.0, 0
    else:
        if st.ss_x > 0:
            r.rel_rms = math.sqrt(st.ss_d / st.ss_x)
            r.norm_ratio = math.sqrt(st.ss_y / st.ss_x)
            r.cosine = max(-1.0, min(1.0, st.xy / math.sqrt(st.ss_x * st.ss_y))) if st.ss_y > 0 else None
        else:
            r.rel_rms = 0.0 if st.ss_d == 0 else math.inf
            r.norm_ratio = None
            r.cosine = None
        r.max_abs = st.max_abs
        r.max_abs_index = _unravel(st.max_idx, shape) if st.max_abs != 0 else None
        if st.has_expected:
            ref_ss = st.ss_x if st.ss_x > 0 else 1.0
            r.expected_rel_rms = math.sqrt(st.exp_ss_d / ref_ss) if st.ss_x > 0 else 0.0
            r.expected_max_abs = st.exp_max_abs
            r.deviation_from_ggml = math.sqrt(st.dev_ss / ref_ss) if st.ss_x > 0 else float(st.dev_ss > 0)
        if job.requant or job.ref.qtype == job.other.qtype:
            r.bytes_differing = st.bytes_diff
    # the limit: an explicit --tolerance wins; otherwise the type's band, widened to
    # EXPECTED_FACTOR x ggml's own error on this data when that is larger
    if p.override is not None:
        r.limit, r.limit_source = p.override, "--tolerance"
    elif r.expected_rel_rms is not None and EXPECTED_FACTOR * r.expected_rel_rms > p.band.rel_rms:
        r.limit, r.limit_source = EXPECTED_FACTOR * r.expected_rel_rms, "expected"
    else:
        r.limit, r.limit_source = p.band.rel_rms, "band"
    reasons: list[str] = []
    if st.requant_error:
        r.flags.append("source-nonfinite")
        reasons.append(st.requant_error)
    if st.nonfinite:
        r.flags.append("nonfinite")
        reasons.append(f"{st.nonfinite} non-finite value(s) where the reference is finite, first at "
                       f"{_fmt_idx(_unravel(st.nonfinite_idx, shape))}")
    if st.bad:
        what = "block(s)" if job.bad_kind == "block" else "value(s)"
        r.flags.append("bad-blocks" if job.bad_kind == "block" else "bad-values")
        if job.bad_kind == "block":
            reasons.append(f"{st.bad} {what} with a max error above {job.bad_limit:g} x the block's max |x| "
                           f"(worst {st.bad_worst:.3g} x, at {_fmt_idx(_unravel(st.bad_idx, shape))})")
        else:
            reasons.append(f"{st.bad} {what} off by more than one {job.other.qtype.name} ulp "
                           f"(worst {st.bad_worst:.3g} ulp at {_fmt_idx(_unravel(st.bad_idx, shape))})")
    within = r.rel_rms is not None and math.isfinite(r.rel_rms) and r.rel_rms <= r.limit
    if not within:
        reasons.insert(0, f"relative RMS error {r.rel_rms:.4g} > limit {r.limit:.4g} ({r.limit_source})")
    if st.identical and (within or p.override is None):
        r.status = BIT_IDENTICAL  # ggml's own encoding can only be failed by an explicit --tolerance
    elif within and not st.bad and not st.nonfinite and not st.requant_error:
        r.status = WITHIN
    else:
        r.status = OUT
    if r.status == OUT:
        r.detail = "; ".join(reasons)
    elif r.status == WITHIN and job.requant and r.bytes_differing:
        r.detail = f"{r.bytes_differing:,} bytes differ from ggml's encoding"


# --- diagnosis of failures ---------------------------------------------------------------------
_SAMPLES = 16384  # values compared per tensor by the swap / correlation tests


_BLOCK = 1 << 16  # values per step of the diagnosis helpers: no full-size temporaries


def _row_blocks(*arrays: np.ndarray):
    """Matching row blocks of same-shape arrays (2-D views, possibly transposed/strided)."""
    a0 = arrays[0]
    views = [a.reshape(1, -1) if a.ndim < 2 else a for a in arrays]
    rows = views[0].shape[0]
    step = max(1, _BLOCK // max(1, a0.size // max(rows, 1)))
    for r in range(0, rows, step):
        yield [np.array(v[r:r + step], dtype=np.float64).reshape(-1) for v in views]  # copies: callers write


def _rel(y: np.ndarray, x: np.ndarray, scale: float = 1.0) -> float:
    """||y - scale*x|| / ||scale*x|| in float64, block by block (x may be a transposed view)."""
    nd = nx = 0.0
    for u, v in _row_blocks(y, x):
        v *= scale
        nx += float(v @ v)
        u -= v
        nd += float(u @ u)
    return math.sqrt(nd / nx) if nx > 0 else (0.0 if nd == 0 else math.inf)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    n = sa = sb = saa = sbb = sab = 0.0
    for u, v in _row_blocks(a, b):
        n += u.size
        sa, sb = sa + float(u.sum()), sb + float(v.sum())
        saa, sbb, sab = saa + float(u @ u), sbb + float(v @ v), sab + float(u @ v)
    if not n:
        return 0.0
    cov, va, vb = sab - sa * sb / n, saa - sa * sa / n, sbb - sb * sb / n
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else 0.0


def _diagnose(failed: list[_Pair], candidates: list[_Side], notes: list[str], n_pairs: int) -> None:
    """Re-read each failed tensor whole and test explanations; flags name the cause."""
    with np.errstate(all="ignore"):  # failed tensors may hold inf/NaN/huge garbage
        _diagnose_each(failed, candidates, notes, n_pairs)


def _sample(side: _Side, rows: np.ndarray) -> np.ndarray:
    """Whole rows at evenly spaced row indices (quantized data is only readable by rows),
    thinned to at most _SAMPLES values with a fixed stride, as float32."""
    vals = np.concatenate([_deq(side.read(int(r), int(r) + 1), side.qtype, 1, side.cols).reshape(-1) for r in rows])
    step = max(1, vals.size // _SAMPLES)
    return vals[::step]


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation: unlike Pearson, one garbage block of huge values cannot make a
    damaged tensor look uncorrelated."""
    ra = np.empty(a.size)
    rb = np.empty(b.size)
    ra[np.argsort(a, kind="stable")] = np.arange(a.size)
    rb[np.argsort(b, kind="stable")] = np.arange(b.size)
    return _pearson(ra, rb)


def _diagnose_each(failed: list[_Pair], candidates: list[_Side], notes: list[str], n_pairs: int) -> None:
    sample_cache: dict[str, np.ndarray] = {}
    n_uncorrelated = 0
    for p in failed:
        r = p.row
        a, b = p.a, p.b
        if math.prod(a.shape) != math.prod(b.shape):
            n_uncorrelated += 1  # a different architecture / size: counts towards "different checkpoint"
            continue
        limit = max(r.limit or p.band.rel_rms, 1e-6)  # float noise floor for the exact types
        explained = False
        if a.shape == b.shape and r.cosine is not None and r.norm_ratio is not None:
            # wrong scale: y is (nearly) s * x with s != 1; s = x.y / x.x from the main pass
            s = r.cosine * r.norm_ratio
            if abs(s - 1) > limit and _rel(b.values(), a.values(), s) <= limit:
                r.flags.append(f"scaled:x{s:.4g}")
                r.detail = f"values are the source's times {s:.4g}; " + r.detail
                explained = True
        if not explained and len(a.shape) == 2 and (a.shape[0] == a.shape[1] or b.shape == a.shape[::-1]):
            # transposes need whole tensors (memory: both as float32); everything else reads rows
            x, y = a.values(), b.values()
            if y.shape == x.T.shape and _rel(y, x.T) <= EXPECTED_FACTOR * limit:
                r.flags.append("transposed")
                r.detail = f"holds the transpose of {a.name}; " + r.detail
                explained = True
            elif x.shape != y.shape and _rel(y.reshape(x.shape), x) <= EXPECTED_FACTOR * limit:
                r.flags.append("shape-convention")
                r.detail = ("data is in the source's order but the shape is spelled differently (ne not reversed?); "
                            + r.detail)
                explained = True
            del x, y
        if a.shape != b.shape:
            if not explained:
                n_uncorrelated += 1
            continue
        rows = np.unique(np.linspace(0, b.rows - 1, min(b.rows, 64)).astype(np.int64))
        ys = _sample(b, rows)
        if not explained:
            best, best_rel = None, math.inf
            for c in candidates:
                if c.name == a.name or c.shape != b.shape:
                    continue
                if c.name not in sample_cache:
                    sample_cache[c.name] = _sample(c, rows)
                rel = _rel(ys, sample_cache[c.name])
                if rel < best_rel:
                    best, best_rel = c, rel
            if best is not None and best_rel <= EXPECTED_FACTOR * limit:
                r.flags.append(f"swapped-with:{best.name}")
                r.detail = f"holds the values of {best.name}; " + r.detail
                explained = True
        # independent data gives |rho| ~ N(0, 1/sqrt(n)): for tiny tensors (a 16-value norm) 0.5
        # is within chance, so the bar rises to 3 sigma there
        if not explained and abs(_spearman(_sample(a, rows), ys)) < max(0.5, min(0.9, 3 / math.sqrt(ys.size))):
            r.flags.append("uncorrelated")
            r.detail = f"uncorrelated with {a.name} (different checkpoint?); " + r.detail
            n_uncorrelated += 1
    if n_uncorrelated >= 2 and n_uncorrelated * 2 >= n_pairs:
        notes.append(f"{n_uncorrelated} tensors are uncorrelated with their counterparts: the GGUF was probably "
                     "converted from a different checkpoint")


def _flag_outliers(rows: list[TensorComparison]) -> None:
    """Informational: a tensor losing > 3x the median error of its type's tensors."""
    by_type: dict[str, list[TensorComparison]] = {}
    for r in rows:
        if r.rel_rms is not None and math.isfinite(r.rel_rms) and r.type:
            by_type.setdefault(r.type, []).append(r)
    for group in by_type.values():
        if len(group) < 3:
            continue
        m = median(r.rel_rms for r in group)
        for r in group:
            if m > 0 and r.rel_rms > 3 * m:
                r.flags.append("outlier")


# --- public entry points -------------------------------------------------------------------------
def _open_drafter_gguf(path: str | Path) -> tuple[GGUFFile, Format | None]:
    f = read_gguf(path)
    try:
        fmt, _ = meta_from_gguf(f.kvs, f.shapes(), path)
    except GGUFFormatError:
        return f, None
    return f, fmt


def compare_weights(
    drafter_dir: str | Path,
    gguf_path: str | Path,
    *,
    tolerances: Mapping[str, float] | None = None,
    requantize: bool = True,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> CompareReport:
    """Compare a drafter checkpoint (safetensors dir) with a GGUF converted from it.

    Raises:
        OutputError: the dir has no weights, or the GGUF does not exist.
        WeightsError: the safetensors files are corrupt or truncated.
        GGUFFormatError: the GGUF is corrupt, or is not a DFlash drafter.
    """
    t0 = time.perf_counter()
    overrides = dict(tolerances or {})
    d = Path(drafter_dir)
    if not d.is_dir():
        raise OutputError(f"{d}: not a directory; pass the drafter checkpoint dir (config.json + model.safetensors)")
    inventory = read_inventory(d)
    f, fmt = _open_drafter_gguf(gguf_path)
    if fmt is None:
        meta_from_gguf(f.kvs, f.shapes(), gguf_path)  # raises the precise "not a drafter" error
    by_gguf = {e.name: e for e in f.tensors}
    used: set[str] = set()
    rows: list[TensorComparison] = []
    pairs: list[_Pair] = []
    notes: list[str] = []
    files = _Files()
    sources: list[_Side] = []
    try:
        for t in inventory:
            short = t.name.removeprefix("model.")
            g = fmt.gguf_name(t.name)
            if g is None:
                if short in DROPPED_TENSORS or short.endswith("rotary_emb.inv_freq"):
                    notes.append(f"{t.name}: not converted by design ({DROPPED_TENSORS.get(short, 'rotary buffer')})")
                    continue
                rows.append(TensorComparison(t.name, None, None, t.shape, MISSING, source_type=t.dtype,
                                             detail=f"no {fmt.name} GGUF name for this tensor"))
                continue
            if short in OPTIONAL_TENSORS and fmt.name == "lucebox" and g not in by_gguf:
                notes.append(f"{t.name}: not converted by design (Lucebox borrows the target's)")
                continue
            e = by_gguf.get(g)
            if e is None:
                rows.append(TensorComparison(t.name, g, None, t.shape, MISSING, source_type=t.dtype,
                                             detail=f"expected as {g} in the GGUF ({fmt.name} format)"))
                continue
            used.add(g)
            row = TensorComparison(t.name, g, e.ggml_type.name, t.shape, OUT, source_type=t.dtype,
                                   gguf_shape=e.shape, nbytes=e.nbytes)
            rows.append(row)
            if t.dtype not in FLOAT_DTYPES:
                row.detail = f"source dtype {t.dtype} is not a float type; cannot compare values"
                continue
            a = files.source_side(t)
            sources.append(a)
            b = files.gguf_side(f, e)
            pair = _make_pair(row, a, b, overrides, requantize, a_exact=True, a_is_truth=True)
            if tuple(t.shape or (1,)) != tuple(e.shape or (1,)):
                row.status = SHAPE_MISMATCH
                row.detail = _shape_detail(t.shape, e.shape)
                pair.job = None
            pairs.append(pair)
        for e in f.tensors:
            if e.name in used:
                continue
            if e.name == ROPE_FREQS:
                notes.append(f"{ROPE_FREQS}: generated by the converter from config.json (llama3 rope); not compared")
                continue
            src = fmt.source_name(e.name)
            why = (f"its checkpoint tensor {src} is not in {d}" if src is not None
                   else f"no checkpoint tensor maps to it ({fmt.name} format)")
            rows.append(TensorComparison(None, e.name, e.ggml_type.name, None, EXTRA, gguf_shape=e.shape,
                                         nbytes=e.nbytes, detail=why))
        nbytes = _run(pairs, workers or _default_workers(), progress)
        failed = [p for p in pairs if p.row.status in (OUT, SHAPE_MISMATCH)]
        if failed:
            _diagnose(failed, sources, notes, len(pairs))
    finally:
        files.close()
    _flag_outliers(rows)
    return CompareReport("safetensors-gguf", d, Path(gguf_path), fmt.name, None, rows, notes, requantize, overrides,
                         time.perf_counter() - t0, nbytes)


def compare_ggufs(
    a_path: str | Path,
    b_path: str | Path,
    *,
    tolerances: Mapping[str, float] | None = None,
    requantize: bool = True,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> CompareReport:
    """Compare two GGUFs of the same drafter (two formats, or two quant levels).

    Tensors are paired through each file's format (A's name -> checkpoint name -> B's name);
    for files that are not DFlash drafters, by identical names. Each pair is measured against
    its more precise side; when that side is F32/F16/BF16 the other's bytes are checked
    against ggml's encoding of those values ("bit-identical").
    """
    t0 = time.perf_counter()
    overrides = dict(tolerances or {})
    fa, fmt_a = _open_drafter_gguf(a_path)
    fb, fmt_b = _open_drafter_gguf(b_path)
    notes: list[str] = []
    if (fmt_a is None) != (fmt_b is None):
        which = a_path if fmt_a is None else b_path
        notes.append(f"{which} is not a DFlash drafter; tensors are paired by identical names")
    by_b = {e.name: e for e in fb.tensors}
    used: set[str] = set()
    rows: list[TensorComparison] = []
    pairs: list[_Pair] = []
    sides_a: list[_Side] = []

    def b_name(name: str) -> str:
        if fmt_a is None or fmt_b is None:
            return name
        src = fmt_a.source_name(name)
        return name if src is None else (fmt_b.gguf_name(src) or name)

    files = _Files()
    try:
        for e in fa.tensors:
            g = b_name(e.name)
            eb = by_b.get(g)
            if eb is None:
                rows.append(TensorComparison(e.name, g, None, e.shape, MISSING, source_type=e.ggml_type.name,
                                             detail=f"{g} is not in {b_path}"))
                continue
            used.add(g)
            row = TensorComparison(e.name, g, eb.ggml_type.name, e.shape, OUT, source_type=e.ggml_type.name,
                                   gguf_shape=eb.shape, nbytes=eb.nbytes)
            rows.append(row)
            a = files.gguf_side(fa, e)
            sides_a.append(a)
            pair = _make_pair(row, a, files.gguf_side(fb, eb), overrides, requantize,
                              a_exact=e.ggml_type in _FLOATS)
            if tuple(e.shape) != tuple(eb.shape):
                row.status = SHAPE_MISMATCH
                row.detail = _shape_detail(e.shape, eb.shape)
                pair.job = None
            pairs.append(pair)
        for e in fb.tensors:
            if e.name not in used:
                rows.append(TensorComparison(None, e.name, e.ggml_type.name, None, EXTRA, gguf_shape=e.shape,
                                             nbytes=e.nbytes, detail=f"no tensor of {a_path} maps to it"))
        nbytes = _run(pairs, workers or _default_workers(), progress)
        failed = [p for p in pairs if p.row.status in (OUT, SHAPE_MISMATCH)]
        if failed:
            _diagnose(failed, sides_a, notes, len(pairs))
    finally:
        files.close()
    _flag_outliers(rows)
    return CompareReport("gguf-gguf", Path(a_path), Path(b_path), fmt_b.name if fmt_b else None,
                         fmt_a.name if fmt_a else None, rows, notes, requantize, overrides,
                         time.perf_counter() - t0, nbytes)


def compare(a: str | Path, b: str | Path, **kwargs) -> CompareReport:
    """``compare_weights`` when ``a`` is a directory, ``compare_ggufs`` when it is a file."""
    pa = Path(a)
    if Path(b).is_dir():
        raise UsageError(f"{b} is a directory: pass the checkpoint dir first and the GGUF second "
                         "(compare-weights DRAFTER_DIR FILE.gguf)")
    if pa.is_dir():
        return compare_weights(pa, b, **kwargs)
    if pa.is_file():
        return compare_ggufs(pa, b, **kwargs)
    raise OutputError(f"{pa}: no such file or directory; pass a drafter checkpoint dir or a GGUF")


def _shape_detail(src: Sequence[int], gg: Sequence[int]) -> str:
    s, g = list(src), list(gg)
    hint = " (reversed: transposed, or ne written in torch order)" if s == g[::-1] and s != g else ""
    return f"shape {s} (ne {s[::-1]}) vs GGUF shape {g} (ne {g[::-1]}){hint}"


__all__ = ["BANDS", "Band", "CompareReport", "EXPECTED_FACTOR", "FALLBACK_BAND", "STATUSES", "TensorComparison",
           "compare", "compare_ggufs", "compare_weights", "parse_tolerances"]
