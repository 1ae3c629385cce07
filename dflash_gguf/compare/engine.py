"""The main pass: how each pair is measured (reference side, band, checks), the chunks of every
pair on a small thread pool, and the verdict of each tensor.

NumPy releases the GIL, so threads work through the chunks in parallel; memory is bounded by
chunks x workers, not by tensors.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from .bands import FLOAT_TYPES, ALL_TYPES, EXPECTED_FACTOR, Band, pair_band
from .report import BIT_IDENTICAL, OUT, SHAPE_MISMATCH, WITHIN, TensorComparison
from .sides import Side
from .stats import chunk_stats, format_index, Job, measure_chunk, reduce_stats, Stats, unravel

CHUNK_VALUES = 1 << 18  # ~1 MB of float32 per temporary: stays in L2, so NumPy passes are cheap


def default_workers() -> int:
    from ..quants import default_threads

    return max(1, min(4, default_threads()))


@dataclass
class Pair:
    row: TensorComparison
    job: Job | None  # None: nothing to compute numerically (shape mismatch)
    a: Side  # A / source side
    b: Side  # B / GGUF side
    override: float | None
    band: Band


def _bpw(t: Q) -> float:
    bs, ts = GGML_QUANT_SIZES[t]
    return ts * 8 / bs


def make_pair(row: TensorComparison, a: Side, b: Side, overrides: Mapping[str, float], requantize: bool,
               a_is_checkpoint: bool) -> Pair:
    """Choose the reference (the checkpoint; between two GGUFs the side with more bits per
    weight, A on ties), the band and the checks. Sides of different shapes are only
    diagnosed, not measured."""
    ref, oth = (a, b) if a_is_checkpoint or _bpw(a.qtype) >= _bpw(b.qtype) else (b, a)
    row.reference = "a" if ref is a else "b"
    bd = pair_band(ref.qtype, oth.qtype, a_is_checkpoint)
    if a_is_checkpoint and a.qtype == b.qtype and a.qtype not in FLOAT_TYPES:
        bd = replace(bd, lossless=True)  # checkpoint blocks convert repacks (NVFP4, MXFP4): copied, not encoded
    override = overrides.get(oth.qtype.name, overrides.get(ALL_TYPES))
    if _ggml_core(a.shape) != _ggml_core(b.shape):
        row.status, row.detail = SHAPE_MISMATCH, _shape_detail(row.shape, row.gguf_shape)
        return Pair(row, None, a, b, override, bd)
    if bd.elem_rel is not None and oth.qtype in FLOAT_TYPES:
        kind, lim, absf, block = "elem", bd.elem_rel, bd.elem_abs or 0.0, 1
    elif bd.block_err is not None:
        kind, lim, absf, block = "block", bd.block_err, 0.0, GGML_QUANT_SIZES[oth.qtype][0]
    else:
        kind, lim, absf, block = None, 0.0, 0.0, 1
    from ..quants import QUANTIZE_TYPES

    # x are the values ggml encodes when they are stored exactly (a checkpoint, or a float GGUF)
    ref_exact = ref.qtype in FLOAT_TYPES
    # float targets are re-encoded even with requantize=False: a cast costs nothing
    requant = ref_exact and oth.qtype in QUANTIZE_TYPES and (requantize or oth.qtype in FLOAT_TYPES)
    chunk_rows = max(1, CHUNK_VALUES // max(ref.cols, 1))
    job = Job(ref, oth, ref_exact, requant, kind, lim, absf, block, chunk_rows)
    return Pair(row, job, a, b, override, bd)


def _ggml_core(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape as ggml compares it: outer dimensions of 1 do not count (llama-quantize writes a
    [1, n] tensor, e.g. DSpark's conf_proj.weight, as [n])."""
    shape = tuple(shape)
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return shape


def _shape_detail(src: Sequence[int], gg: Sequence[int]) -> str:
    s, g = list(src), list(gg)
    hint = " (reversed: transposed, or ne written in torch order)" if s == g[::-1] and s != g else ""
    return f"shape {s} (ne {s[::-1]}) vs GGUF shape {g} (ne {g[::-1]}){hint}"


def run_pairs(pairs: list[Pair], workers: int, progress: Callable[[int], None] | None) -> int:
    """Measure every pair with a job, chunk jobs on a thread pool, each tensor reduced in chunk
    order. Returns the bytes read."""
    numeric = [p for p in pairs if p.job is not None]
    total = 0

    def spans(p: Pair) -> list[tuple[int, int]]:
        rows, step = p.job.ref.rows, p.job.chunk_rows
        return [(r, min(r + step, rows)) for r in range(0, rows, step)] or [(0, 0)]

    def settle(p: Pair, st: Stats) -> None:
        nonlocal total
        measure_chunk(p.row, p.job, st)
        _verdict(p, st)
        total += p.a.nbytes + p.b.nbytes
        if progress:
            progress(p.b.nbytes)

    if workers <= 1:
        for p in numeric:
            settle(p, reduce_stats(p.job, (chunk_stats(p.job, r0, r1) for r0, r1 in spans(p))))
        return total
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="compare") as pool:
        # Data lives only inside a running chunk job (memory: chunk temporaries x workers); a
        # future holds a few numbers. Tensors are still submitted only a window ahead so the
        # queue stays short, and results are reduced strictly in order.
        pending: list[tuple[Pair, list]] = []
        window = 4 * workers
        it = iter(numeric)
        queued = 0

        def fill() -> None:
            nonlocal queued
            while queued < window:
                p = next(it, None)
                if p is None:
                    return
                futs = [pool.submit(chunk_stats, p.job, r0, r1) for r0, r1 in spans(p)]
                pending.append((p, futs))
                queued += len(futs)

        fill()
        while pending:
            p, futs = pending.pop(0)
            parts = [fu.result() for fu in futs]
            queued -= len(futs)
            fill()
            settle(p, reduce_stats(p.job, parts))
    return total


def _verdict(p: Pair, st: Stats) -> None:
    """The limit, status, flags and detail of a measured tensor."""
    r, job = p.row, p.job
    shape = job.ref.shape
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
                       f"{format_index(unravel(st.nonfinite_idx, shape))}")
    if st.bad:
        at = format_index(unravel(st.bad_idx, shape))
        if job.bad_kind == "block":
            r.flags.append("bad-blocks")
            reasons.append(f"{st.bad} block(s) with a max error above {job.bad_limit:g} x the block's max |x| "
                           f"(worst {st.bad_worst:.3g} x, at {at})")
        else:
            r.flags.append("bad-values")
            reasons.append(f"{st.bad} value(s) off by more than one {job.other.qtype.name} ulp "
                           f"(worst {st.bad_worst:.3g} ulp at {at})")
    within = r.rel_rms is not None and math.isfinite(r.rel_rms) and r.rel_rms <= r.limit
    if p.band.lossless and not st.identical:
        within = False
        reasons.insert(0, f"{r.bytes_differing or 0:,} byte(s) differ from the checkpoint's {job.ref.qtype.name} "
                          f"blocks, which convert copies losslessly (relative RMS error {r.rel_rms:.4g})")
    elif not within:
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
