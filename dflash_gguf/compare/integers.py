"""compare-weights on integer tables (DSpark's d2t): ids, not weights, so compared value for value
— bit-identical or not, no tolerance. Between a checkpoint and a GGUF the expected ids are the
ones the conversion plan computed (the checkpoint stores offsets, the GGUF absolute target ids).
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..fileio.gguf_reader import GGUFFile
from ..fileio.safetensors import SourceTensor
from ..fileio.types import TensorInfo
from .report import BIT_IDENTICAL, OUT, TensorComparison

_NOT_FLOAT = (Q.I64, Q.I32, Q.I16, Q.I8)


def table_row(src: SourceTensor, want: np.ndarray, f: GGUFFile, e: TensorInfo) -> TensorComparison:
    """A table the converter computes from a checkpoint tensor (DSpark's d2t: ``want``, the
    absolute ids the conversion plan derived) against the GGUF's, as integers."""
    row = TensorComparison(src.name, e.name, e.ggml_type.name, src.shape, OUT, source_type=src.dtype,
                           gguf_shape=e.shape, nbytes=e.nbytes)
    if e.ggml_type != Q.I64:
        row.detail = f"GGUF {e.name} is {e.ggml_type.name}; the runtime reads I64 absolute target ids"
        return row
    got = np.frombuffer(f.raw(e).tobytes(), "<i8")
    return _int_verdict(row, want.reshape(-1).astype(np.int64), got, "checkpoint offset + draft id")


def int_pair_row(a_name: str, a: TensorInfo, fa: GGUFFile, b_name: str, b: TensorInfo,
                 fb: GGUFFile) -> TensorComparison:
    """Two GGUFs' integer tensors (d2t), compared value for value."""
    row = TensorComparison(a_name, b_name, b.ggml_type.name, a.shape, OUT, source_type=a.ggml_type.name,
                           gguf_shape=b.shape, nbytes=b.nbytes)
    if a.ggml_type != b.ggml_type:
        row.detail = f"{a.ggml_type.name} vs {b.ggml_type.name}: integer tables must keep their type"
        return row
    dt = {Q.I64: "<i8", Q.I32: "<i4", Q.I16: "<i2", Q.I8: "i1"}[a.ggml_type]
    return _int_verdict(row, np.frombuffer(fa.raw(a).tobytes(), dt), np.frombuffer(fb.raw(b).tobytes(), dt), "A")


def is_integer_table(t: TensorInfo) -> bool:
    return t.ggml_type in _NOT_FLOAT


def _int_verdict(row: TensorComparison, want: np.ndarray, got: np.ndarray, what: str) -> TensorComparison:
    if want.size != got.size:
        row.detail = f"{want.size} ids ({what}) vs {got.size} in the GGUF"
        return row
    diff = np.flatnonzero(want != got)
    row.max_abs = float(np.abs(want - got).max()) if want.size else 0.0
    if diff.size:
        i = int(diff[0])
        row.detail = (f"{diff.size:,} of {want.size:,} ids differ (first at index {i}: {want[i]} from {what}, "
                      f"{got[i]} in the GGUF)")
        return row
    row.status, row.rel_rms, row.bytes_differing = BIT_IDENTICAL, 0.0, 0
    row.detail = f"compared as integers ({what})"
    return row
