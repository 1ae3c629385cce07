"""Safetensors checkpoints: a validated inventory, then one tensor at a time.

We parse the header ourselves instead of using ``safetensors.safe_open``: its numpy API
refuses BF16 (numpy has no bfloat16) and the torch API would make torch a dependency of
convert. The checks follow safetensors' own ``validate`` order (length present, length
capped, JSON, offsets contiguous from 0 and inside the file, span == elements × dtype
size), so a truncated download is caught up front, naming the tensor and the byte offset.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import OutputError, WeightsError

_HEADER_CAP = 100 * 1024 * 1024  # safetensors' own limit
DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
FLOAT_DTYPES = ("BF16", "F16", "F32")


@dataclass(frozen=True)
class SourceTensor:
    name: str  # as stored (prefix untouched)
    dtype: str  # safetensors dtype string
    shape: tuple[int, ...]
    file: Path
    offset: int  # absolute byte offset of the data in ``file``
    nbytes: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def read_inventory(drafter_dir: str | Path) -> list[SourceTensor]:
    """All tensors of ``model.safetensors`` or a sharded ``model.safetensors.index.json``.

    Raises:
        OutputError: no weights found.
        WeightsError: a header is corrupt/truncated, the index names a missing shard or
            tensor, or a tensor appears twice.
    """
    d = Path(drafter_dir)
    index = d / "model.safetensors.index.json"
    single = d / "model.safetensors"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise WeightsError(f"{index}: not a valid safetensors index ({exc}); re-download it") from None
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (d / s).is_file()]
        if missing:
            raise WeightsError(f"{index}: shard(s) {', '.join(missing)} not found in {d}; download every shard")
        tensors: list[SourceTensor] = []
        for shard in shards:
            tensors += read_header(d / shard)
        names = {t.name for t in tensors}
        absent = sorted(set(weight_map) - names)
        if absent:
            raise WeightsError(f"{index}: lists {absent[0]} (and {len(absent) - 1} more) but no shard contains it")
    elif single.is_file():
        tensors = read_header(single)
    else:
        others = sorted(p.name for p in d.glob("*.safetensors")) if d.is_dir() else []
        if len(others) == 1:
            tensors = read_header(d / others[0])
        else:
            raise OutputError(f"{d}: no model.safetensors or model.safetensors.index.json found")
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise WeightsError(f"{t.file}: tensor {t.name} appears in more than one shard")
        seen.add(t.name)
    return sorted(tensors, key=lambda t: t.name)


def read_header(path: Path) -> list[SourceTensor]:
    """Validated tensor entries of one safetensors file (no tensor data is read)."""
    size = path.stat().st_size
    where = f"{path}"
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise WeightsError(f"{where}: file is {size} bytes, too short for a safetensors header (truncated?)")
        (n,) = struct.unpack("<Q", head)
        if n > _HEADER_CAP:
            raise WeightsError(f"{where}: header length {n:,} exceeds {_HEADER_CAP:,} bytes; not a safetensors file")
        if 8 + n > size:
            raise WeightsError(
                f"{where}: header needs bytes up to {8 + n:,} but the file ends at {size:,} (truncated download? re-fetch it)"
            )
        blob = f.read(n)
    try:
        header = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightsError(f"{where}: header is not valid JSON ({exc}); the file is corrupt, re-download it") from None
    if not isinstance(header, dict):
        raise WeightsError(f"{where}: header is not a JSON object; the file is corrupt")
    base = 8 + n
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = info["dtype"], info["shape"], info["data_offsets"]
            shape = tuple(int(s) for s in shape)
            start, end = int(start), int(end)
        except (KeyError, TypeError, ValueError):
            raise WeightsError(f"{where}: tensor {name} has a malformed header entry {info!r}") from None
        if dtype not in DTYPE_SIZES:
            raise WeightsError(f"{where}: tensor {name} has unknown dtype {dtype!r}")
        numel = 1
        for s in shape:
            if s < 0:
                raise WeightsError(f"{where}: tensor {name} has a negative dimension in {list(shape)}")
            numel *= s
        if not 0 <= start <= end or end - start != numel * DTYPE_SIZES[dtype]:
            raise WeightsError(
                f"{where}: tensor {name} spans bytes {start}..{end} but {dtype}{list(shape)} needs "
                f"{numel * DTYPE_SIZES[dtype]:,}; the header is corrupt"
            )
        if base + end > size:
            raise WeightsError(
                f"{where}: tensor {name} needs bytes up to {base + end:,} but the file ends at {size:,} "
                "(truncated download? re-fetch it and compare sizes)"
            )
        entries.append(SourceTensor(name, dtype, shape, path, base + start, end - start))
    # Offsets must tile the data section from 0 with no gaps or overlaps (safetensors' rule).
    spans = sorted((e.offset, e.offset + e.nbytes, e.name) for e in entries)
    pos = base
    for start, end, name in spans:
        if start != pos:
            raise WeightsError(f"{where}: tensor {name} starts at byte {start:,}, expected {pos:,} (overlap or gap)")
        pos = end
    return entries


_STORAGE = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64, "I64": np.int64,
            "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
            "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}
CHUNK_BYTES = 16 << 20  # row chunks of ~16 MiB keep memory flat and malloc recycles the buffers


def read_raw(t: SourceTensor) -> np.ndarray:
    """The whole tensor, reinterpreted as its storage dtype (BF16 as uint16)."""
    return next(iter_raw(t, chunk_bytes=max(t.nbytes, 1)))


def iter_raw(t: SourceTensor, chunk_bytes: int = CHUNK_BYTES):
    """The tensor in chunks of whole leading-axis slices (rows stay intact), storage dtype."""
    storage = _STORAGE[t.dtype]
    if not t.shape:
        rows, row_shape = 1, ()
    else:
        rows, row_shape = t.shape[0], t.shape[1:]
    row_bytes = t.nbytes // rows if rows else 0
    step = max(1, chunk_bytes // row_bytes) if row_bytes else max(rows, 1)
    with open(t.file, "rb", buffering=0) as f:
        f.seek(t.offset)
        for r0 in range(0, max(rows, 1), step):
            n = min(step, rows - r0) if rows else 0
            buf = np.empty(n * row_bytes if t.shape else t.nbytes, dtype=np.uint8)
            got = f.readinto(memoryview(buf))
            if got != buf.nbytes:
                raise WeightsError(
                    f"{t.file}: tensor {t.name} ends early ({got:,} of {buf.nbytes:,} bytes read); re-fetch the file")
            yield buf.view(storage).reshape((n, *row_shape) if t.shape else ())


def to_f32(t: SourceTensor, raw: np.ndarray | None = None) -> np.ndarray:
    """Exact float32 values of a float tensor (bf16 → f32 is a 16-bit shift)."""
    raw = read_raw(t) if raw is None else raw
    if t.dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if t.dtype in ("F16", "F32"):
        return raw.astype(np.float32, copy=False)
    raise WeightsError(f"{t.file}: tensor {t.name} has dtype {t.dtype}; only BF16/F16/F32 weights are supported")


def file_size(path: Path) -> int:
    return os.stat(path).st_size
