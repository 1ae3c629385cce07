"""GGUF → quantized GGUF with llama-quantize's layout: its per-tensor types, its tensor order,
its KV order; every tensor streamed in row chunks through the bit-exact quantizers.
The layout itself (types, order, KVs) is ``layout.requantize_layout``, shared with ``convert``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import UsageError
from ..fileio.gguf_reader import GGUFFile, read_gguf
from ..fileio.types import TensorInfo
from ..fileio.gguf_writer import TensorOut, WriteReport, write_gguf
from ..fileio.types import KV
from .layout import QuantEntry, requantize_layout

CHUNK_BYTES = 16 << 20


@dataclass(frozen=True)
class QuantizeResult:
    ftype: str
    kvs: list[KV]
    tensors: list[QuantEntry]
    written: WriteReport | None

    def to_json(self) -> dict:
        return {
            "ftype": self.ftype,
            "kv": [kv.to_json() for kv in self.kvs],
            "tensors": [{"name": t.name, "shape": list(t.shape), "ne": list(reversed(t.shape)), "from": t.src_type.name,
                         "to": t.ggml_type.name, "nbytes": t.nbytes, "why": t.reason} for t in self.tensors],
            "output": None if self.written is None else {"path": str(self.written.path), "file_size": self.written.file_size},
        }


def quantize_gguf(
    src: str | Path,
    out: str | Path | None,
    ftype: str,
    *,
    allow_requantize: bool = False,
    force: bool = False,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> QuantizeResult:
    """Quantize a GGUF (any architecture; F32/F16/BF16 tensors) like llama-quantize does."""
    f = read_gguf(src)
    kvs, entries = requantize_layout(list(f.kvs.values()), [(t.name, t.shape, t.ggml_type) for t in f.tensors],
                                     ftype, allow_requantize=allow_requantize, where=str(src))
    if dry_run:
        return QuantizeResult(ftype, kvs, entries, None)
    if out is None:
        raise UsageError("quantize needs an output path (or --dry-run)")
    if Path(out).resolve() == Path(src).resolve():
        raise UsageError("quantize would overwrite its input; choose another output path")
    by_name = {t.name: t for t in f.tensors}
    outs = [TensorOut(e.name, e.shape, e.ggml_type, e.nbytes, (lambda e=e: _requantize(f, by_name[e.name], e)))
            for e in entries]
    report = write_gguf(out, f.arch, kvs, outs, force=force, progress=progress)
    return QuantizeResult(ftype, kvs, entries, report)


def _requantize(f: GGUFFile, t: TensorInfo, e: QuantEntry) -> Iterator[np.ndarray]:
    if t.nbytes == 0:  # a zero-element tensor (some ne is 0): no data, no chunk
        return
    raw = f.raw(t)
    if not e.quantized:
        yield raw  # same type: bytes untouched
        return
    from . import dequantize, quantize

    rows = int(np.prod(t.shape[:-1])) if len(t.shape) > 1 else 1
    row_bytes = t.nbytes // rows
    step = max(1, CHUNK_BYTES // max(row_bytes, 1))
    for r0 in range(0, rows, step):
        n = min(step, rows - r0)
        chunk = raw[r0 * row_bytes:(r0 + n) * row_bytes]
        yield quantize(dequantize(chunk, t.ggml_type, (n, t.shape[-1])), e.ggml_type, name=t.name)
