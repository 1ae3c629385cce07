"""Streaming, atomic, deterministic GGUF writing, byte for byte the layout gguf-py's GGUFWriter writes.

The header, the metadata and the tensor infos are packed by ``kv_encode`` (GGUFWriter's bytes,
without importing gguf-py or numpy: a convert that only copies tensor bytes needs neither). The
data section follows: each tensor arrives as row chunks from its producer, the next chunk is
read on a second thread while the current one is written, and bytes go out with plain
``write`` (numpy's ``tofile``, which GGUFWriter uses, was 3x slower here). Data is aligned,
each tensor zero-padded to the alignment, tensor offsets as GGUFWriter computes them.
The file is written to a temp file in the output directory and published at the end
(``outputs``): an error, Ctrl-C, SIGTERM or SIGHUP leaves nothing behind, and an existing file is
only replaced with ``force``.

All-zero stretches of tensor data and the zero padding are skipped with a seek instead of
written, and the size is set at the end: a hole reads back as zeros, so the bytes are identical,
but a sparse input (a test corpus of multi-GB drafters stored as a header and a hole) converts in
seconds into a file that takes almost no disk blocks.

Bytes that go out unchanged (a bf16 tensor kept bf16; a retargeted GGUF's tensors) come as a
``FileSpan`` and go out by ``write`` straight from a read-only memory map of the source, a window
at a time (``span_copy``): one copy, page cache to page cache, never through a Python
object, and memory stays flat. Holes and zero pieces of a span are skipped the same way.

Re-running onto an existing output (``force``) is as fast as a first write: every byte's blocks
are allocated before it is written, so ext4 has nothing to flush when the new file is renamed over
the old one, and the old file's page cache is dropped on a second thread meanwhile, so the new file
reuses those pages (``span_copy.reserve`` and ``span_copy.release_cache`` say why).
"""
from __future__ import annotations

import os
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from ..errors import OutputError
from .ahead import ReadAhead
from .gguf_constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType
from .kv_encode import encode_header, encode_kv_parts, encode_tensor_info
from .outputs import atomic_output, check_output
from .span_copy import (RELEASE_MIN_BYTES, FileSpan, Zeros, copy_span, release_cache, reserve, write_all,
                        write_sparse)
from .string_array import StringArray
from .types import KV, NumberArray

if TYPE_CHECKING:  # numpy is imported where an array is written (a producer made one already)
    import numpy as np

Progress = Callable[[int], None]


@dataclass(frozen=True)
class TensorOut:
    """A tensor to write: its final name/shape/type and a function that produces its data.

    ``shape`` is numpy/torch order (last axis = ggml ne0). ``produce`` returns the encoded
    data — one array, or an iterable of row chunks — whose bytes, concatenated, are the
    tensor's ggml encoding (typed F32/F16 arrays, raw uint8 block bytes, or ``bytes``); a
    ``FileSpan`` may stand for a run of those bytes that a file already holds, ``Zeros`` for a
    run of zero bytes.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    nbytes: int
    produce: Callable[[], "np.ndarray | bytes | FileSpan | Iterable[np.ndarray | bytes | FileSpan]"]


@dataclass(frozen=True)
class WriteReport:
    path: Path
    n_tensors: int
    n_kv: int
    file_size: int
    tensor_bytes: int
    stale_removed: tuple[Path, ...] = ()  # temp files of killed runs, removed (outputs.atomic_output)


def write_gguf(
    path: str | Path,
    arch: str,
    kvs: Iterable[KV],
    tensors: Sequence[TensorOut],
    *,
    force: bool = False,
    inputs: Iterable[str | os.PathLike | None] = (),
    progress: Progress | None = None,
) -> WriteReport:
    """Write a GGUF atomically, one tensor in memory at a time.

    ``kvs`` must not contain ``general.architecture`` (GGUFWriter writes it first).

    The output path is checked and published by ``outputs`` (not a device, not one of ``inputs``,
    not replaced without ``force``, never left half-written).

    Raises:
        OutputError: the output exists (without ``force``), is not a regular file, or a write failed.
        UsageError: the output is one of ``inputs``.
    """
    out = check_output(path, inputs=inputs, force=force)
    path = out.path
    if not tensors:
        # A metadata-only drafter GGUF loads nowhere (ik_llama #2043); refuse to write one.
        raise OutputError(f"{path}: refusing to write a GGUF with no tensors")
    kvs = list(kvs)
    releasing = _release_old_output(path) if out.force else None
    header, align = _header(arch, kvs, tensors)
    with atomic_output(out) as fout:
        # Its blocks allocated up front, as the data's are (span_copy.reserve: no delayed
        # allocation left for ext4 to flush when the file is renamed over an old one).
        reserve(fout.fileno(), 0, sum(len(part) for part in header))
        for part in header:
            write_all(fout, memoryview(part))
        _pad(fout, fout.tell(), align)
        total = _write_data(fout, tensors, align, progress)
        # The data may end in a hole (a seek writes nothing): the size must still cover it.
        fout.truncate(fout.tell())
        size = fout.tell()
        if releasing is not None:
            releasing.join()  # before the rename, which frees whatever it has not dropped yet
    return WriteReport(path=path, n_tensors=len(tensors), n_kv=len(kvs) + 1, file_size=size, tensor_bytes=total,
                       stale_removed=tuple(out.stale_removed))


def _release_old_output(path: Path) -> threading.Thread | None:
    """The page cache of the output about to be replaced, dropped on a second thread while this
    one encodes the header and writes (span_copy.release_cache: the new file then gets those
    pages, not memory the host has taken back). A daemon: an error or Ctrl-C does not wait for it."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size < RELEASE_MIN_BYTES:
        return None  # nothing the rename frees, or too little to be worth a thread
    worker = threading.Thread(target=release_cache, args=(path,), name="release-old-output", daemon=True)
    worker.start()
    return worker


def _header(arch: str, kvs: Sequence[KV], tensors: Sequence[TensorOut]) -> tuple[list[bytes], int]:
    """Header, metadata and tensor infos as GGUFWriter writes them (in pieces, written in
    order), and the data alignment.

    As there: ``general.architecture`` comes first (not at all when ``arch`` is empty or None:
    GGUFWriter.add_string skips falsy values), a repeated key keeps its first place and takes
    the last value, ``general.alignment`` sets the alignment the tensor offsets use."""
    pairs = {"general.architecture": KV("general.architecture", arch, GGUFValueType.STRING)} if arch else {}
    align = GGUF_DEFAULT_ALIGNMENT
    for kv in kvs:
        if kv.key == "general.alignment":
            align = int(kv.value)
        if kv.type == GGUFValueType.ARRAY and not isinstance(kv.value, (StringArray, NumberArray)):
            kv = KV(kv.key, list(kv.value), kv.type, kv.sub_type)  # any iterable, as a sequence
        pairs[kv.key] = kv
    infos, offset, names = [], 0, set()
    for t in tensors:
        if t.name in names:
            raise ValueError(f"Duplicated tensor name {t.name!r}")
        names.add(t.name)
        infos.append(encode_tensor_info(t.name, _info_shape(t.shape, t.ggml_type), t.ggml_type, offset))
        offset += -(-t.nbytes // align) * align
    parts = [encode_header(len(tensors), len(pairs))]
    for kv in pairs.values():
        parts += encode_kv_parts(kv.key, kv.value, kv.type, kv.sub_type)
    return [*parts, *infos], align


def _info_shape(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> tuple[int, ...]:
    """The shape GGUFWriter records: F32/F16 tensors as given (a 0-d one with no dims); others
    through their byte shape, so a 0-d tensor is one element, as in ggml."""
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return tuple(shape)
    byte_shape = _byte_shape(shape, qtype)
    block, type_size = GGML_QUANT_SIZES[qtype]
    return (*byte_shape[:-1], byte_shape[-1] // type_size * block)


def _chunks(t: TensorOut) -> Iterator["np.ndarray | FileSpan | bytes"]:
    data = t.produce()
    if isinstance(data, (FileSpan, Zeros, bytes, bytearray)) or _is_array(data):
        yield data
    else:
        yield from data


def _is_array(data: object) -> bool:
    np = sys.modules.get("numpy")  # no numpy loaded: no producer made an array
    return np is not None and isinstance(data, np.ndarray)


def _write_data(fout, tensors: Sequence[TensorOut], align: int, progress: Progress | None) -> int:
    """Write every tensor's chunks in order, reading one chunk ahead on a worker thread
    (file reads, numpy conversions and quantization release the GIL)."""
    def stream() -> Iterator[tuple[int, np.ndarray | None]]:
        for i, t in enumerate(tensors):
            for chunk in _chunks(t):
                yield i, chunk
            yield i, None  # end of tensor i

    total = 0
    written = [0] * len(tensors)
    with ReadAhead(stream()) as items:
        for i, chunk in items:
            t = tensors[i]
            if chunk is None:
                if written[i] != t.nbytes:
                    raise AssertionError(f"{t.name}: produced {written[i]} bytes, planned {t.nbytes}")
                _pad(fout, t.nbytes, align)
                continue
            if isinstance(chunk, FileSpan):
                copy_span(fout, chunk, HOLE_BYTES, progress)
                written[i] += chunk.nbytes
                total += chunk.nbytes
                continue
            if isinstance(chunk, Zeros):  # a new file reads zeros where nothing was written
                fout.seek(chunk.nbytes, os.SEEK_CUR)
                written[i] += chunk.nbytes
                total += chunk.nbytes
                if progress is not None:
                    progress(chunk.nbytes)
                continue
            if isinstance(chunk, (bytes, bytearray)):
                buf = memoryview(chunk)
            else:
                import numpy as np

                buf = memoryview(np.ascontiguousarray(chunk)).cast("B")
            write_sparse(fout, buf, HOLE_BYTES)
            written[i] += buf.nbytes
            total += buf.nbytes
            if progress is not None:
                progress(buf.nbytes)
    return total


# Zero bytes are skipped in pieces cut at file offsets that are multiples of this size, so a run
# of zeros spanning chunk boundaries still frees whole filesystem blocks (any power of two up to
# 1 MiB): the zero tail of one chunk and the zero head of the next are both seeked over.
HOLE_BYTES = 1 << 20


def _pad(fout, n: int, align: int) -> None:
    pad = -n % align
    if pad:
        # Padding is zeros: a seek keeps a hole on both sides of it one hole (the new file
        # reads zeros there; the final truncate covers a seek at the very end).
        fout.seek(pad, os.SEEK_CUR)


def _byte_shape(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> tuple[int, ...]:
    block, type_size = GGML_QUANT_SIZES[qtype]
    shape = tuple(shape) or (1,)  # a 0-d tensor is one element, as in ggml
    if shape[-1] % block:
        raise AssertionError(f"row of {shape[-1]} is not a multiple of the {qtype.name} block {block}")
    return (*shape[:-1], shape[-1] // block * type_size)


def tensor_nbytes(shape: Sequence[int], qtype: GGMLQuantizationType) -> int:
    block, type_size = GGML_QUANT_SIZES[qtype]
    shape = tuple(shape) or (1,)  # a 0-d tensor is one element, as in ggml
    n = 1
    for d in shape[:-1]:
        n *= int(d)
    return n * (int(shape[-1]) // block) * type_size
