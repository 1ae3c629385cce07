"""GGUF → quantized GGUF with llama-quantize's layout: its per-tensor types, its tensor order,
its KV order; every tensor streamed in row chunks through the bit-exact quantizers.

``requantize_layout`` is shared with ``convert --outtype q8_0|q4_k_m``, which is defined as
"convert with --outtype auto, then quantize": bf16 → f32 is exact, so both routes give the
same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType

from ..errors import QuantizationError, UsageError
from ..fileio.gguf_reader import GGUFFile, kv_int, read_gguf
from ..fileio.types import TensorInfo
from ..fileio.gguf_writer import TensorOut, WriteReport, tensor_nbytes, write_gguf
from ..fileio.types import KV

FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)
CHUNK_BYTES = 16 << 20
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


@dataclass(frozen=True)
class QuantEntry:
    name: str
    shape: tuple[int, ...]  # numpy order
    src_type: Q
    ggml_type: Q
    nbytes: int
    reason: str
    quantized: bool  # False: bytes copied untouched


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


def requantize_layout(
    kvs: Sequence[KV],
    tensors: Sequence[tuple[str, tuple[int, ...], Q]],
    ftype: str,
    *,
    allow_requantize: bool = False,
    where: str = "",
) -> tuple[list[KV], list[QuantEntry]]:
    """llama-quantize's output layout for these input KVs and tensors.

    KVs keep their order (split keys dropped); ``general.quantization_version`` and
    ``general.file_type`` are removed and re-appended last, as gguf_set_val does in llama.cpp.
    Tensors come back in llama-quantize's processing order with their new types.

    Raises:
        QuantizationError: an input tensor is already quantized (without allow_requantize),
            or a type rule cannot be applied.
        GGUFFormatError: ``<arch>.block_count`` is not an unsigned 32-bit integer.
    """
    from .policy import ftype_id, layer_of, plan_types, resolve_ftype

    mix = resolve_ftype(ftype)
    if not allow_requantize:
        for name, _shape, t in tensors:
            if t not in FLOAT_TYPES:
                raise QuantizationError(
                    f"{where}: tensor {name} is already {t.name}; quantizing it again loses precision twice "
                    "(pass --allow-requantize to do it anyway, or start from the F32/F16/BF16 GGUF)")
    kv_by = {kv.key: kv for kv in kvs}
    arch = kv_by.get("general.architecture")
    n_layer = None
    if arch is not None and isinstance(arch.value, str):
        # llama-quantize reads n_layer as a uint32: any other type is a file it refuses too
        n_layer = kv_int(kv_by, f"{arch.value}.block_count", None, required=False, path=where)
    if n_layer is None:  # as llama.cpp parses names: sscanf("blk.%d."), -1 when it does not match
        n_layer = 1 + max((layer_of(n) for n, *_ in tensors), default=-1)
    src_types = {n: t for n, _s, t in tensors}
    choices = plan_types([(n, s, t) for n, s, t in tensors], mix, n_layer)
    entries = []
    for c in choices:
        src = src_types[c.name]
        quantized = c.ggml_type != src
        entries.append(QuantEntry(c.name, c.shape, src, c.ggml_type, tensor_nbytes(c.shape, c.ggml_type),
                                  c.reason if quantized else f"{c.reason} (copied)", quantized))
    out = [kv for kv in kvs if kv.key not in _SPLIT_KEYS + ("general.quantization_version", "general.file_type",
                                                          "general.architecture")]
    out.append(KV("general.quantization_version", 2, GGUFValueType.UINT32))
    out.append(KV("general.file_type", ftype_id(mix), GGUFValueType.UINT32))
    return out, entries


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
