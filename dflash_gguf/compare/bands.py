"""How far a faithful encoding may deviate from its source: one band per ggml type, the band of
a pair of encodings, and ``--tolerance`` overrides.

The numbers are documented (with how they were measured) in docs/compare-weights.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from ..errors import QuantizationError, UsageError
from ..fileio.gguf_constants import GGMLQuantizationType as Q


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
    lossless:  the GGUF must hold the reference's bytes exactly (a checkpoint's NVFP4 or MXFP4
               blocks, which convert repacks without loss): any differing byte fails.
    """

    rel_rms: float
    block_err: float | None = None
    elem_rel: float | None = None
    elem_abs: float | None = None
    lossless: bool = False


# Float types: one ulp (2^-mantissa_bits) relative, subnormal spacing absolute. Their rel_rms
# band is the same ulp: a tensor whose every element is within one ulp is within it in RMS.
# Quantized types: rel_rms band = 1.5 x the worst relative RMS error, block_err = 2 x the worst
# block error, each rounded up to the next 0.005, measured with our ggml-exact quantizer on six
# weight-like distributions
# (benchmarks/bench_compare.py --bands reproduces the measurement; docs/compare-weights.md has the
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
    "IQ4_XS": Band(0.17, block_err=0.25),
    "IQ4_NL": Band(0.17, block_err=0.255),
    "Q3_K": Band(0.285, block_err=0.46),
    "Q2_K": Band(0.525, block_err=0.825),
}
FALLBACK_BAND = Band(0.25)
# A file whose error is within this factor of what ggml's own encoding of the same data gives
# is "within" even when the data is harder than the band's distributions (heavy tails).
EXPECTED_FACTOR = 1.5
ALL_TYPES = "*"
# The types that hold values exactly (a checkpoint's storage types): judged element by element.
FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)


def band(qtype: Q) -> Band:
    return BANDS.get(qtype.name, FALLBACK_BAND)


def pair_band(ref: Q, other: Q, ref_is_checkpoint: bool) -> Band:
    """The band for ``other``'s values measured against ``ref``'s."""
    ob = band(other)
    if ref_is_checkpoint:  # the checkpoint is exact: only the GGUF's encoding loses anything
        return ob
    if ref not in FLOAT_TYPES:  # both quantized: the errors of both encodings add (in quadrature for RMS)
        rb = band(ref)
        return Band(math.hypot(rb.rel_rms, ob.rel_rms),
                    block_err=None if ob.block_err is None else ob.block_err + (rb.block_err or 0))
    if ref == other or other not in FLOAT_TYPES:
        return ob
    # two float types: one ulp of the coarser, with the larger subnormal floor
    rb = band(ref)
    return Band(ob.rel_rms, elem_rel=max(ob.elem_rel or 0, rb.elem_rel or 0),
                elem_abs=max(ob.elem_abs or 0, rb.elem_abs or 0))


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
