"""The numbers of one pair, computed chunk by chunk and reduced per tensor.

A chunk is about 1 MB of float32 rows. Per chunk the reference side x is re-encoded with our
bit-exact ggml quantizer into the other side's type and the bytes compared (equal bytes =
"bit-identical": exactly what ggml writes from x), then both sides are dequantized (for
Q4_K/Q6_K the quantizer hands over what its bytes dequantize to, see _reencode) and the
sums behind rel RMS, cosine and the norm ratio accumulated, with max |y - x| and the per-block
(quantized) or per-element (float) check against the band. Cache-sized chunks are also what
makes this faster than dequantizing whole tensors: every whole-tensor NumPy temporary is a
fresh, page-faulting allocation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..errors import QuantizationError
from ..quants.scratch import Scratch
from .bands import FLOAT_TYPES
from .kernels import block_check
from .report import TensorComparison
from .sides import Side, dequantize_rows


@dataclass(frozen=True)
class Job:
    """How one pair is compared (decided once per tensor, used by every chunk)."""

    ref: Side  # x: the more precise side
    other: Side  # y: the side whose bytes are checked
    exact_ref: bool  # x are the values ggml encodes (the checkpoint, or a float GGUF)
    requant: bool  # re-encode x into other's type and compare bytes
    bad_kind: str | None  # "block" | "elem" | None
    bad_limit: float  # block_err, or elem_rel
    bad_abs: float  # elem_abs
    block: int  # elements per block for the block check
    chunk_rows: int


@dataclass
class Stats:
    """Sums and extremes of one chunk, or of a whole tensor once merged (x: ref, y: other, d = y - x)."""

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
    # tensor differs, their share of ||x|| is added afterwards by reduce_stats
    shortcut_spans: list[tuple[int, int]] = field(default_factory=list)

    def merge(self, o: "Stats") -> None:
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


def chunk_stats(job: Job, r0: int, r1: int) -> Stats:
    # garbage data (a corrupted exponent, an inf scale) must become a verdict, not warnings
    with np.errstate(all="ignore"):
        return _chunk_stats(job, r0, r1)


_scratch = Scratch()


def _chunk_stats(job: Job, r0: int, r1: int) -> Stats:
    ref, oth = job.ref, job.other
    rows, cols = r1 - r0, ref.cols
    n = rows * cols
    s = Stats()
    xb = ref.fetch(r0, r1, _scratch.get("xb", ref.nbytes // max(ref.rows, 1) * rows))
    yb = oth.fetch(r0, r1, _scratch.get("yb", oth.nbytes // max(oth.rows, 1) * rows))
    # e: ggml's encoding of x in other's type, when re-encoded; xx: x.x; ye: e dequantized,
    # where the quantizer gave it along with e
    x = e = xx = d = ye = None
    if ref.qtype == oth.qtype:
        s.identical = bool(np.array_equal(xb, yb))
    else:
        x = dequantize_rows(xb, ref.qtype, rows, cols, _scratch.get("x", n, np.float32))
        if job.requant:
            e, xx, d, ye = _reencode(job, s, xb, x, yb)
        s.identical = e is not None and bool(np.array_equal(e, yb.view(e.dtype)))
    if s.identical and _lossless(ref.qtype, oth.qtype):  # y == x: no numbers to compute
        s.lossless = True
        s.any_nonzero = bool(xb.any())
        s.shortcut_spans.append((r0, r1))
        return s
    if x is None:
        x = dequantize_rows(xb, ref.qtype, rows, cols, _scratch.get("x", n, np.float32))
    xf = x.reshape(-1)
    y = None  # y is read back only where needed
    if s.identical and d is not None:  # the 16-bit re-encoding came with d = e read back - x = y - x
        buf = _scratch.get("d", n, np.float32)
        np.copyto(buf, d)  # contiguous, as the subtraction's: BLAS sums it the same way
        d = buf
    else:
        # yb == e: y is e read back, which the quantizer wrote (the same bits as dequantizing yb)
        y = ye if s.identical and ye is not None else \
            dequantize_rows(yb, oth.qtype, rows, cols, _scratch.get("y", n, np.float32)).reshape(-1)
        d = np.subtract(y, xf, out=_scratch.get("d", n, np.float32))
    # three dots, not four: x.y = x.x + x.d and y.y = x.x + 2 x.d + d.d (y = x + d)
    s.ss_x, s.ss_d, xd = _dot(xf, xf) if xx is None else xx, _dot(d, d), _dot(xf, d)
    if not math.isfinite(s.ss_d + s.ss_x + xd) and np.isfinite(d).all():
        # finite but huge values (a flipped exponent bit) overflow float32 products
        x64, d64 = xf.astype(np.float64), d.astype(np.float64)
        s.ss_x, s.ss_d, xd = float(x64 @ x64), float(d64 @ d64), float(x64 @ d64)
    s.xy, s.ss_y = s.ss_x + xd, s.ss_x + 2 * xd + s.ss_d
    s.any_nonzero = s.ss_x > 0
    s.max_abs, i = _absmax(d)
    s.max_idx = r0 * cols + i
    if not (math.isfinite(s.ss_y) and math.isfinite(s.ss_x)):
        if y is None:
            y = dequantize_rows(yb, oth.qtype, rows, cols, _scratch.get("y", n, np.float32)).reshape(-1)
        bad = ~np.isfinite(y) & np.isfinite(xf)
        s.nonfinite = int(np.count_nonzero(bad))
        if s.nonfinite:
            s.nonfinite_idx = r0 * cols + int(np.flatnonzero(bad)[0])
    if s.identical:
        # ggml's own encoding: the expected error is the error, and no block can be corrupt.
        s.has_expected, s.exp_ss_d, s.exp_max_abs = True, s.ss_d, s.max_abs
        return s
    if e is not None:
        e = e.view(np.uint8)
        if ye is None:
            ye = dequantize_rows(e, oth.qtype, rows, cols).reshape(-1)
        de = np.subtract(ye, xf)
        s.has_expected, s.exp_ss_d, s.exp_max_abs = True, _dot(de, de), _absmax(de)[0]
        np.subtract(y, ye, out=de)
        s.dev_ss = _dot(de, de)
        s.bytes_diff = int(np.count_nonzero(e != yb))
    elif ref.qtype == oth.qtype:
        s.bytes_diff = int(np.count_nonzero(xb != yb))
        if job.exact_ref:  # ggml's encoding of x in x's own type is x itself
            s.has_expected, s.dev_ss = True, s.ss_d
    if job.bad_kind == "block":
        # per-block max error relative to the block's own range: a corrupted byte is many steps
        # off in its block even when it barely moves the tensor's RMS
        s.bad, worst, at = block_check(d, xf, job.block, job.bad_limit)
        if s.bad:
            s.bad_worst, s.bad_idx = worst, r0 * cols + at
    elif job.bad_kind == "elem":
        ad = np.abs(d)
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


def _reencode(job: Job, s: Stats, xb: np.ndarray, x: np.ndarray, yb: np.ndarray
              ) -> tuple[np.ndarray | None, float | None, np.ndarray | None, np.ndarray | None]:
    """ggml's encoding e of the chunk's x in the other side's type (bytes, or uint16 for the
    16-bit float pairs, to compare with yb), with what came along: x.x, for the 16-bit pairs
    d = e read back - x, and for the types the quantizer dequantizes as it encodes (Q4_K,
    Q6_K: quantize_finite_with_values) e read back, flat (else None each). Those values are
    y wherever e == yb, and otherwise what the GGUF's values are measured against: either
    way a dequantization less, ~0.4 s of CPU per compare of a 470M-value Q4_K_M drafter. A
    NaN/inf in x (ggml refuses it) leaves e None and the quantizer's message in
    ``s.requant_error``."""
    from ..quants import quantize, quantize_finite, quantize_finite_with_values
    from .kernels import reencode16

    ref, oth = job.ref, job.other
    xf = x.reshape(-1)
    # x.x is needed anyway, and finite means every x is (an inf or NaN makes it inf or NaN):
    # then the encoders' own inf/NaN scans need not run
    xx = _dot(xf, xf)
    finite = math.isfinite(xx)
    if oth.qtype in (Q.F16, Q.BF16):  # the pairs reencode16 serves
        n = xb.size // 2
        hit = reencode16(xb, ref.qtype, oth.qtype, _scratch.get("packed", n, np.uint64),
                         _scratch.get("e", n, np.uint16), finite=finite or None)
        if hit is not None:
            e, d = hit
            return e, xx, d, None
    e = ye = None
    if finite:
        ye = _scratch.get("ye", xf.size, np.float32)
        e = quantize_finite_with_values(x, oth.qtype, ye)
        if e is None:
            e, ye = quantize_finite(x, oth.qtype), None
    if e is None:
        try:
            e = quantize(x, oth.qtype, name=ref.name, threads=1).reshape(-1)
        except QuantizationError as exc:  # NaN/inf in the reference: ggml would refuse it too
            s.requant_error = str(exc)
    return e, xx, None, ye


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


def _lossless(src: Q, dst: Q) -> bool:
    """Whether encoding values of type ``src`` as ``dst`` is exact (so identical bytes => zero error)."""
    return src == dst or (dst == Q.F32 and src in FLOAT_TYPES)


def reduce_stats(job: Job, chunks: Iterable[Stats]) -> Stats:
    """A tensor's chunk stats, merged in chunk order (so the float sums do not depend on
    scheduling). A tensor whose chunks are partly byte-identical (lossless shortcut) and partly
    not gets the shortcut chunks' x.x added (y == x there), so the relative errors use the whole
    tensor's norm; only partially damaged tensors re-read those chunks, which costs nothing
    overall."""
    st = Stats(lossless=True)
    for c in chunks:
        st.merge(c)
    if not st.lossless:
        for r0, r1 in st.shortcut_spans:
            x = dequantize_rows(job.ref.read(r0, r1), job.ref.qtype, r1 - r0, job.ref.cols).reshape(-1)
            xx = _dot(x, x)
            st.ss_x += xx
            st.ss_y += xx
            st.xy += xx
    st.shortcut_spans = []
    return st


def measure_chunk(r: TensorComparison, job: Job, st: Stats) -> None:
    """The reduced sums of a tensor -> its row's error metrics (the verdict comes after)."""
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
        r.max_abs_index = unravel(st.max_idx, job.ref.shape) if st.max_abs != 0 else None
        if st.has_expected:
            ref_ss = st.ss_x if st.ss_x > 0 else 1.0
            r.expected_rel_rms = math.sqrt(st.exp_ss_d / ref_ss) if st.ss_x > 0 else 0.0
            r.expected_max_abs = st.exp_max_abs
            r.deviation_from_ggml = math.sqrt(st.dev_ss / ref_ss) if st.ss_x > 0 else float(st.dev_ss > 0)
        if job.requant or job.ref.qtype == job.other.qtype:
            r.bytes_differing = st.bytes_diff


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if flat >= 0 else ()


def format_index(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, idx)) + "]"
