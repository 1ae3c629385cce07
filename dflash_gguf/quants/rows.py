"""One task of a whole-file quantize: a run of whole rows of a tensor read, decoded to float32
and quantized. Threads (``gguf_file``) and worker processes (``workers``) both run it."""
from __future__ import annotations

from math import prod

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..fileio.bf16 import bf16_to_f32
from ..fileio.gguf_reader import TensorReader
from ..fileio.types import TensorInfo
from .scratch import Scratch


def quantize_rows(reader: TensorReader, t: TensorInfo, r0: int, n: int, qtype: Q, scratch: Scratch) -> np.ndarray:
    """Rows ``r0 .. r0 + n`` of ``t`` read, decoded and quantized to ``qtype``: one task's bytes."""
    from .base import registered

    row_bytes = t.nbytes // prod(t.shape[:-1])
    raw = reader.read(t, r0 * row_bytes, n * row_bytes, into=scratch.get("raw", n * row_bytes))
    x = _decode(raw, t, r0, n, scratch.get("f32", n * t.shape[-1], np.float32))
    return registered()[qtype].quantize_finite(x).reshape(-1)


def _decode(raw: np.ndarray, t: TensorInfo, r0: int, n: int, out: np.ndarray) -> np.ndarray:
    """Rows ``r0 .. r0 + n`` of ``t`` from their bytes to finite float32 (ggml's own conversions),
    in ``out`` (or in ``raw`` itself for F32); NaN/inf is refused with its index in the whole tensor."""
    from . import _numba
    from .base import _first_nonfinite, _nonfinite_error

    if t.ggml_type == Q.BF16 and _numba.enabled():
        x = out
        bad = _numba.kernel("bf16_to_f32")(raw.view("<u2"), x.view(np.uint32))  # the shift and the scan, fused
        bad = None if bad < 0 else int(bad)
    else:
        if t.ggml_type == Q.BF16:
            x = bf16_to_f32(raw, out)
        elif t.ggml_type == Q.F32:
            x = raw.view("<f4")
        elif t.ggml_type == Q.F16:
            x = out
            np.copyto(x, raw.view("<f2"))
        else:  # an already-quantized input (--allow-requantize)
            from . import dequantize

            x = dequantize(raw, t.ggml_type, (n, t.shape[-1])).reshape(-1)
        bad = _first_nonfinite(x)
    if bad is not None:
        raise _nonfinite_error(t.name, t.shape, r0 * t.shape[-1] + bad, float(x[bad]))
    return x
