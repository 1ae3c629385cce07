"""``check --deep``: stream every tensor's bytes once for NaN/inf, all-zero tensors, and
quantized blocks whose scales are inf/NaN (what llama.cpp's ggml_validate_row_data rejects).
Every finding here has category ``data``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..fileio.gguf_constants import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from ..fileio.gguf_header import GGUFHeader, show
from ..fileio.header_errors import TruncatedError
from ..fileio.types import TensorInfo
from ..formats.names import D2T
from .dspark_checks import check_d2t_data
from .findings import Finding, Severity, finding
from .shards import check_shards

# Per quant type: (byte offset inside the block, kind) of each scale llama.cpp validates
# (ggml_validate_row_data in ggml-quants.c). Block layouts follow gguf-py's quants.py.
SCALES: dict[Q, tuple[tuple[int, str], ...]] = {
    Q.Q4_0: ((0, "f16"),), Q.Q5_0: ((0, "f16"),), Q.Q8_0: ((0, "f16"),), Q.Q8_1: ((0, "f16"),),
    Q.Q4_1: ((0, "f16"), (2, "f16")), Q.Q5_1: ((0, "f16"), (2, "f16")),
    Q.Q2_K: ((80, "f16"), (82, "f16")), Q.Q3_K: ((108, "f16"),),
    Q.Q4_K: ((0, "f16"), (2, "f16")), Q.Q5_K: ((0, "f16"), (2, "f16")), Q.Q6_K: ((208, "f16"),),
    Q.Q8_K: ((0, "f32"),), Q.TQ1_0: ((52, "f16"),), Q.TQ2_0: ((64, "f16"),),
    Q.IQ2_XXS: ((0, "f16"),), Q.IQ2_XS: ((0, "f16"),), Q.IQ2_S: ((0, "f16"),), Q.IQ3_XXS: ((0, "f16"),),
    Q.IQ3_S: ((0, "f16"),), Q.IQ1_S: ((0, "f16"),), Q.IQ4_NL: ((0, "f16"),), Q.IQ4_XS: ((0, "f16"),),
    Q.IQ1_M: ((48, "iq1m"),), Q.MXFP4: ((0, "e8m0"),),
    **({Q.Q1_0: ((0, "f16"),)} if hasattr(Q, "Q1_0") else {}),
}
FLOATS = {Q.F32: "<f4", Q.F64: "<f8", Q.F16: "<u2", Q.BF16: "<u2"}
_CHUNK = 8 << 20


def _bad_f16(u: np.ndarray) -> np.ndarray:
    return (u & 0x7C00) == 0x7C00  # exponent all ones: inf or NaN


def deep_scan(h: GGUFHeader, progress: Callable[[int], None] | None = None) -> tuple[list[Finding], int]:
    """Stream every tensor's bytes once (in file order, 8 MiB at a time)."""
    out: list[Finding] = []
    scanned = 0
    with open(h.path, "rb") as f:
        for t in sorted(h.tensors, key=lambda t: t.offset_abs):
            out += _scan_tensor(h, f, t, progress)
            scanned += t.nbytes
            if t.name == D2T:  # DSpark: the one tensor whose values (ids) are checked, not just scanned
                out += check_d2t_data(h, f, t)
    return out, scanned


def _scan_tensor(h: GGUFHeader, f, t: TensorInfo, progress) -> list[Finding]:
    block, tsize = GGML_QUANT_SIZES[t.ggml_type]
    step = max(tsize, _CHUNK - _CHUNK % tsize)
    f.seek(t.offset_abs)
    nonzero, nan, inf, bad_blocks, first_bad, done = False, 0, 0, 0, -1, 0
    while done < t.nbytes:
        n = min(step, t.nbytes - done)
        chunk = f.read(n)
        if len(chunk) != n:
            raise TruncatedError(f"{h.path}: tensor {show(t.name)} data ends at byte {t.offset_abs + done + len(chunk):,}"
                                 f" while scanning: the file shrank; re-run on a stable copy", t.offset_abs + done)
        u8 = np.frombuffer(chunk, np.uint8)
        nonzero = nonzero or bool(u8.any())
        if t.ggml_type in FLOATS:
            a = np.frombuffer(chunk, FLOATS[t.ggml_type])
            if t.ggml_type in (Q.F32, Q.F64):
                isnan, isinf = np.isnan(a), np.isinf(a)
            else:
                exp, man = (0x7C00, 0x03FF) if t.ggml_type == Q.F16 else (0x7F80, 0x007F)
                top = (a & exp) == exp
                isnan, isinf = top & ((a & man) != 0), top & ((a & man) == 0)
            k_nan, k_inf = int(isnan.sum()), int(isinf.sum())
            if (k_nan or k_inf) and first_bad < 0:
                first_bad = done // tsize + int(np.flatnonzero(isnan | isinf)[0])
            nan, inf = nan + k_nan, inf + k_inf
        elif t.ggml_type in SCALES:
            nb = n // tsize
            bad = np.zeros(nb, bool)
            for off, kind in SCALES[t.ggml_type]:
                if kind == "f16":
                    bad |= _bad_f16(np.ndarray((nb,), "<u2", chunk, off, (tsize,)))
                elif kind == "f32":
                    bad |= ~np.isfinite(np.ndarray((nb,), "<f4", chunk, off, (tsize,)))
                elif kind == "e8m0":
                    bad |= np.ndarray((nb,), np.uint8, chunk, off, (tsize,)) == 0xFF
                else:  # iq1m: the fp16 scale is spread over the top nibbles of four u16
                    sc = [np.ndarray((nb,), "<u2", chunk, off + 2 * i, (tsize,)) for i in range(4)]
                    d = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)
                    bad |= _bad_f16(d)
            k = int(bad.sum())
            if k and first_bad < 0:
                first_bad = done // tsize + int(np.flatnonzero(bad)[0])
            bad_blocks += k
        done += n
        if progress is not None:
            progress(n)
    where, ty = f"tensor {show(t.name)}", t.ggml_type.name
    out = []
    if nan or inf:
        out.append(finding(h, Severity.ERROR, "nan-inf",
                           f"tensor {show(t.name)} ({ty}) has {nan:,} NaN and {inf:,} inf values (first at element "
                           f"{first_bad:,}): the source weights or the conversion are broken", where, "data"))
    if bad_blocks:
        out.append(finding(h, Severity.ERROR, "bad-quant-scale",
                           f"tensor {show(t.name)} ({ty}): {bad_blocks:,} of {t.nbytes // tsize:,} blocks have an inf/NaN "
                           f"scale (first at block {first_bad:,}); llama.cpp's row validation rejects it: re-quantize "
                           f"from the F16/BF16 source", where, "data"))
    if t.nbytes and not nonzero:
        out.append(finding(h, Severity.WARNING, "all-zero",
                           f"tensor {show(t.name)} ({ty}, {t.nbytes:,} bytes) is all zeros: an unfilled region of an "
                           f"interrupted download, or a failed conversion", where, "data"))
    return out


def planned_scan_bytes(path: str | Path) -> int:
    """Bytes ``--deep`` will read (for a progress bar), from the headers alone."""
    return sum(sum(t.nbytes for t in h.tensors) for h in check_shards(path).headers)
