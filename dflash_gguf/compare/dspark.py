"""compare-weights on DSpark drafters: the pairs the shared name table cannot make.

- Gemma4 DSpark checkpoints name their sandwich norms, output scale and confidence head their
  own way (``formats.dspark.gemma4_gguf_name``).
- ``d2t`` is an integer table, not weights: the checkpoint stores offsets, the GGUF absolute
  target ids, so it is compared as integers after the converter's transform
  (``id = draft id + d2t[draft id]``) — bit-identical or not, no tolerance.
- ``t2d``, and ``lm_head`` of a full-vocabulary drafter, are not converted by design (mainline
  drops them too): they are notes, not missing tensors.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..errors import WeightsError
from ..fileio.bf16 import bf16_to_f32
from ..fileio.gguf_reader import GGUFFile
from ..fileio.safetensors import SourceTensor, read_raw
from ..fileio.types import TensorInfo
from ..formats import Format
from ..formats.dspark import gemma4_gguf_name, is_dspark, is_gemma4_checkpoint
from ..formats.names import D2T, T2D
from .report import BIT_IDENTICAL, OUT, TensorComparison

_NOT_FLOAT = (Q.I64, Q.I32, Q.I16, Q.I8)


class DSparkPairing:
    """Checkpoint ↔ GGUF pairing rules for one DSpark drafter (``of`` returns None otherwise)."""

    def __init__(self, f: GGUFFile, fmt: Format, gemma4: bool):
        self.f, self.fmt, self.gemma4 = f, fmt, gemma4
        self.by_gguf = {e.name: e for e in f.tensors}

    @classmethod
    def of(cls, inventory: Sequence[SourceTensor], f: GGUFFile, fmt: Format) -> "DSparkPairing | None":
        names = [t.name for t in inventory]
        if not is_dspark(f.kvs.keys(), [e.name for e in f.tensors], f.arch or "") and D2T not in names:
            return None
        return cls(f, fmt, is_gemma4_checkpoint(names))

    def gguf_name(self, src: str) -> str | None:
        return (gemma4_gguf_name(src) if self.gemma4 else None) or self.fmt.gguf_name(src)

    def special(self, t: SourceTensor) -> tuple[TensorComparison | None, str | None] | None:
        """(row, note) for a tensor these rules decide, or None for the shared pairing."""
        short = t.name.removeprefix("model.")
        if short == T2D:
            return None, f"{t.name}: not converted by design (reduced-vocab membership mask only the trainer uses)"
        if short == "lm_head.weight" and "output.weight" not in self.by_gguf and D2T not in self.by_gguf \
                and not self.gemma4:
            return None, (f"{t.name}: not converted by design (full draft vocabulary: the runtime uses the target's "
                          "output head, as mainline converts it)")
        if short == D2T and D2T in self.by_gguf:
            return d2t_row(t, self.f, self.by_gguf[D2T]), None
        return None


def d2t_row(t: SourceTensor, f: GGUFFile, e: TensorInfo) -> TensorComparison:
    """The checkpoint's d2t offsets against the GGUF's absolute ids, as integers."""
    row = TensorComparison(t.name, e.name, e.ggml_type.name, t.shape, OUT, source_type=t.dtype,
                           gguf_shape=e.shape, nbytes=e.nbytes)
    raw = read_raw(t)
    if t.dtype == "BF16":
        raw = bf16_to_f32(raw)
    try:
        want = np.asarray(raw, dtype=np.float32).astype(np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise WeightsError(f"{t.file}: tensor {t.name} has dtype {t.dtype}; d2t holds integer offsets") from None
    want = want + np.arange(want.size, dtype=np.int64)
    if e.ggml_type != Q.I64:
        row.detail = f"GGUF d2t is {e.ggml_type.name}; the runtime reads I64 absolute target ids"
        return row
    got = np.frombuffer(f.raw(e).tobytes(), "<i8")
    return _int_verdict(row, want, got, "checkpoint offset + draft id")


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
