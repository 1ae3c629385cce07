"""Safetensors checkpoints: a validated inventory, then one tensor at a time.

We parse the header ourselves instead of using ``safetensors.safe_open``: its numpy API
refuses BF16 (numpy has no bfloat16) and the torch API would make torch a dependency of
convert. The checks follow safetensors' own ``validate`` order (length present, length
capped, JSON, offsets contiguous from 0 and inside the file, span == elements × dtype
size), so a truncated download is caught up front, naming the tensor and the byte offset.
"""
from __future__ import annotations

import errno
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError, WeightsError
from .bf16 import bf16_bytes_to_f32_bytes, bf16_to_f32

if TYPE_CHECKING:  # numpy is imported by the readers of tensor data: an inventory needs none
    import numpy as np

_HEADER_CAP = 100 * 1024 * 1024  # safetensors' own limit
DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U16": 2, "U32": 4, "U64": 8}
FLOAT_DTYPES = ("BF16", "F16", "F32")
FP8_DTYPES = ("F8_E4M3", "F8_E5M2")  # pre-quantized weights: decoded here, scaled by convert/prequant.py


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


def read_inventory(drafter_dir: str | Path, prefix: str = "") -> list[SourceTensor]:
    """All tensors of ``model.safetensors`` or a sharded ``model.safetensors.index.json``;
    with ``prefix``, only the shards the index lists a ``prefix*`` tensor in are read (a
    DeepSeek-V4 checkpoint's DSpark draft: a few of its 46 shards).

    Raises:
        InputError: no weights found, or a weights file cannot be read.
        WeightsError: a header is corrupt/truncated, the index is malformed or names a
            missing shard or tensor, or a tensor appears twice.
    """
    d = Path(drafter_dir)
    index = d / "model.safetensors.index.json"
    single = d / "model.safetensors"
    if index.is_file():
        weight_map = _read_index(index)
        if prefix:
            weight_map = {n: s for n, s in weight_map.items() if n.startswith(prefix)}
            if not weight_map:
                raise WeightsError(f"{index}: lists no {prefix}* tensor; this checkpoint carries no draft")
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (d / s).is_file()]
        if missing:
            raise WeightsError(f"{index}: shard(s) {', '.join(missing)} not found in {d}; download every shard")
        tensors: list[SourceTensor] = []
        for shard in shards:
            tensors += read_header(d / shard)
        names = {t.name for t in tensors}
        # a shard may hold tensors the index files elsewhere; only the listed ones count
        tensors = [t for t in tensors if t.name in weight_map] if prefix else tensors
        absent = sorted(set(weight_map) - names)
        if absent:
            raise WeightsError(f"{index}: lists {absent[0]} (and {len(absent) - 1} more) but no shard contains it")
    elif single.is_file():
        tensors = read_header(single)
    else:
        others = sorted(p.name for p in d.glob("*.safetensors") if p.is_file()) if d.is_dir() else []
        if len(others) == 1:
            tensors = read_header(d / others[0])
        else:
            raise InputError(f"{d}: no model.safetensors or model.safetensors.index.json found")
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise WeightsError(f"{t.file}: tensor {t.name} appears in more than one shard")
        seen.add(t.name)
    return sorted(tensors, key=lambda t: t.name)


def _read_index(index: Path) -> dict[str, str]:
    """``weight_map`` of a sharded index: tensor name → shard file name beside the index."""
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON/UTF-8, ints over 4300 digits
        raise WeightsError(f"{index}: not a valid safetensors index ({exc}); re-download it") from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise WeightsError(
            f"{index}: not a valid safetensors index (needs a weight_map object of tensor name -> shard file); "
            "re-download it"
        )
    for name, shard in weight_map.items():
        if not name.isprintable():
            raise WeightsError(f"{index}: tensor name {name!r} has control characters; re-download the index")
        # Shards sit beside the index (as transformers loads them); nothing may point elsewhere.
        if (not isinstance(shard, str) or not shard or not shard.isprintable() or Path(shard).is_absolute()
                or ".." in Path(shard).parts):
            raise WeightsError(
                f"{index}: weight_map[{name!r}] = {shard!r:.80} is not a shard file name beside the index; re-download it"
            )
    return weight_map


def read_header(path: Path) -> list[SourceTensor]:
    """Validated tensor entries of one safetensors file (no tensor data is read).

    Raises:
        InputError: the file cannot be read.
        WeightsError: the header is corrupt or the file is truncated or has trailing bytes.
    """
    where = f"{path}"
    try:
        size = path.stat().st_size
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
    except OSError as exc:
        raise InputError(f"{where}: cannot read ({exc.strerror or exc}); check the path and permissions") from None
    try:
        header = json.loads(blob.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON/UTF-8, ints over 4300 digits
        raise WeightsError(f"{where}: header is not valid JSON ({exc}); the file is corrupt, re-download it") from None
    if not isinstance(header, dict):
        raise WeightsError(f"{where}: header is not a JSON object; the file is corrupt")
    base = 8 + n
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            _check_metadata(info, where)
            continue
        if not name.isprintable():
            raise WeightsError(f"{where}: tensor name {name!r} has control characters; the header is corrupt")
        dtype, shape, start, end = _entry(name, info, where)
        numel = 1
        for s in shape:
            numel *= s
        if not start <= end or end - start != numel * DTYPE_SIZES[dtype]:
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
    # ... up to the end of the file: trailing bytes mean a corrupt (or polyglot) file.
    if pos != size:
        raise WeightsError(
            f"{where}: {size - pos:,} bytes after the last tensor (ends at {pos:,}, file size {size:,}); "
            "the file is corrupt, re-download it"
        )
    return entries


def _entry(name: str, info: object, where: str) -> tuple[str, tuple[int, ...], int, int]:
    """(dtype, shape, start, end) of one header entry, type-checked like safetensors' TensorInfo."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise WeightsError(f"{where}: tensor {name} has a malformed header entry {info!r:.200}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise WeightsError(f"{where}: tensor {name} has unknown dtype {dtype!r:.80}")
    if not isinstance(shape, list) or not all(_is_uint(s) for s in shape):
        raise WeightsError(f"{where}: tensor {name} has shape {shape!r:.80}; expected a list of non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_uint(o) for o in offsets):
        raise WeightsError(
            f"{where}: tensor {name} has data_offsets {offsets!r:.80}; expected [start, end], non-negative integers"
        )
    return dtype, tuple(shape), offsets[0], offsets[1]


def _is_uint(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_metadata(info: object, where: str) -> None:
    # safetensors reads __metadata__ as a str -> str map and rejects anything else.
    if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
        raise WeightsError(f"{where}: __metadata__ must map strings to strings, got {info!r:.80}; the header is corrupt")


# numpy storage dtype of each safetensors dtype (BF16 as uint16: numpy has no bfloat16)
_STORAGE = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "I16": "<i2",
            "I8": "i1", "U8": "u1", "BOOL": "?", "U16": "<u2", "U32": "<u4", "U64": "<u8", "F8_E4M3": "u1",
            "F8_E5M2": "u1", "F8_E8M0": "u1"}
CHUNK_BYTES = 16 << 20  # row chunks of ~16 MiB keep memory flat and malloc recycles the buffers


def read_raw(t: SourceTensor) -> np.ndarray:
    """The whole tensor, reinterpreted as its storage dtype (BF16 as uint16); writable."""
    raw = next(iter_raw(t, chunk_bytes=max(t.nbytes, 1)))
    return raw if raw.flags.writeable else raw.copy()


def iter_raw(t: SourceTensor, chunk_bytes: int = CHUNK_BYTES):
    """The tensor in chunks of whole leading-axis slices (rows stay intact), storage dtype.

    A chunk that lies in a hole of a sparse file is not read: it is a read-only view of shared
    zeros (the bytes a read would return), so a multi-GB test drafter stored as a header and a
    hole streams without touching the page cache."""
    import numpy as np

    storage = np.dtype(_STORAGE[t.dtype])
    if not t.shape:
        rows, row_shape = 1, ()
    else:
        rows, row_shape = t.shape[0], t.shape[1:]
    row_bytes = t.nbytes // rows if rows else 0
    step = max(1, chunk_bytes // row_bytes) if row_bytes else max(rows, 1)
    with open(t.file, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        pos = t.offset
        for r0 in range(0, max(rows, 1), step):
            n = min(step, rows - r0) if rows else 0
            nbytes = n * row_bytes if t.shape else t.nbytes
            if _in_hole(f.fileno(), pos, nbytes, size):
                buf = _zeros(nbytes)
            else:
                f.seek(pos)
                buf = np.empty(nbytes, dtype=np.uint8)
                got = f.readinto(memoryview(buf))
                if got != buf.nbytes:
                    raise WeightsError(
                        f"{t.file}: tensor {t.name} ends early ({got:,} of {buf.nbytes:,} bytes read); re-fetch the file")
            pos += nbytes
            yield buf.view(storage).reshape((n, *row_shape) if t.shape else ())


_SEEK_DATA = getattr(os, "SEEK_DATA", None)


def is_hole(t: SourceTensor) -> bool:
    """Whether the tensor's bytes all lie in a hole of its file (they read as zeros): a sparse
    checkpoint's, whose conversion then need not compute what zeros encode to."""
    with open(t.file, "rb", buffering=0) as f:
        return _in_hole(f.fileno(), t.offset, t.nbytes, os.fstat(f.fileno()).st_size)


def _in_hole(fd: int, pos: int, n: int, size: int) -> bool:
    """Whether bytes [pos, pos + n) of the file all lie in holes (they read as zeros). Only
    inside the file: a range past its end must still fail as a short read."""
    if _SEEK_DATA is None or n == 0 or pos + n > size:
        return False
    try:
        return os.lseek(fd, pos, _SEEK_DATA) >= pos + n
    except OSError as exc:
        # ENXIO: no data from pos to the end; anything else (no SEEK_DATA here): read it.
        return exc.errno == errno.ENXIO


_ZEROS: np.ndarray | None = None


def _zeros(n: int) -> np.ndarray:
    """``n`` zero bytes, read-only: a view of one shared buffer up to ``CHUNK_BYTES`` (no
    allocation and no page faults per chunk), a new array beyond."""
    import numpy as np

    global _ZEROS
    if n > CHUNK_BYTES:
        z = np.zeros(n, dtype=np.uint8)
        z.flags.writeable = False
        return z
    if _ZEROS is None or _ZEROS.size < CHUNK_BYTES:
        z = np.zeros(CHUNK_BYTES, dtype=np.uint8)
        z.flags.writeable = False
        _ZEROS = z
    return _ZEROS[:n]


def to_f32(t: SourceTensor, raw: np.ndarray | None = None) -> np.ndarray:
    """Exact float32 values of a float tensor (bf16 → f32 is a 16-bit shift)."""
    import numpy as np

    raw = read_raw(t) if raw is None else raw
    if t.dtype == "BF16":
        return bf16_to_f32(raw)
    if t.dtype in ("F16", "F32"):
        return raw.astype(np.float32, copy=False)
    if t.dtype in FP8_DTYPES or t.dtype == "F8_E8M0":
        return fp8_table(t.dtype)[raw]
    raise WeightsError(f"{t.file}: tensor {t.name} has dtype {t.dtype}; only BF16/F16/F32 weights are supported")


_FP8_TABLES: dict[str, np.ndarray] = {}


def fp8_table(dtype: str) -> np.ndarray:
    """float32 value of each of the 256 FP8 bytes (exact: every FP8 value is a float32).

    F8_E4M3 is torch's ``float8_e4m3fn``: bias 7, no infinities, S.1111.111 is NaN. F8_E5M2 is
    the top byte of an IEEE half. F8_E8M0 (``float8_e8m0fnu``, MX block scales) is 2^(b - 127),
    0xFF NaN."""
    import numpy as np

    table = _FP8_TABLES.get(dtype)
    if table is None:
        b = np.arange(256, dtype=np.uint16)
        if dtype == "F8_E5M2":
            table = (b << 8).view(np.float16).astype(np.float32)
        elif dtype == "F8_E8M0":
            # ldexp, not exp2: exact at every exponent; 0xFF as torch's float() spells its NaN
            table = np.zeros(256, dtype=np.float32)
            table[:255] = np.ldexp(np.float32(1), b[:255].astype(np.int32) - 127)
            table.view(np.uint32)[255] = 0x7F800001
        else:
            exp, man = (b >> 3) & 0xF, (b & 7).astype(np.float32)
            mag = np.where(exp == 0, man / 8 * np.float32(2.0 ** -6),
                           (1 + man / 8) * np.exp2(exp.astype(np.float32) - 7)).astype(np.float32)
            mag[(b & 0x7F) == 0x7F] = np.nan
            table = np.where(b & 0x80, -mag, mag).astype(np.float32)
        table.flags.writeable = False
        _FP8_TABLES[dtype] = table
    return table


def bf16_bytes_to_f32(t: SourceTensor) -> bytearray:
    """A small BF16 tensor's little-endian float32 bytes, read in one go and converted without
    numpy (``bf16.bf16_bytes_to_f32_bytes``: the norms a bf16 conversion stores as F32)."""
    with open(t.file, "rb", buffering=0) as f:
        raw = os.pread(f.fileno(), t.nbytes, t.offset)
    if len(raw) != t.nbytes:
        raise WeightsError(f"{t.file}: tensor {t.name} ends early ({len(raw):,} of {t.nbytes:,} bytes read); "
                           "re-fetch the file")
    return bf16_bytes_to_f32_bytes(raw)


def file_size(path: Path) -> int:
    return os.stat(path).st_size
