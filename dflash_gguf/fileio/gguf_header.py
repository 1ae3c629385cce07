"""Bounds-checked GGUF header reader: metadata and tensor infos, never tensor data.

gguf-py's ``GGUFReader`` memory-maps the whole file and checks no bounds: a file cut short
fails with a numpy reshape error that names no tensor and no offset, and a hostile count
makes it allocate or loop for a long time. This reader follows safetensors' order instead:
every length or count is checked against the bytes left in the file (and against a cap)
*before* anything is read or allocated, and every failure is its own ``GGUFFormatError``
subclass (``header_errors``) with a one-line message (what, where, how to fix).

Layout (little-endian; GGUF v2 and v3 share it, v1 used 32-bit counts and is refused):
    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv    x (string key | u32 value_type | value)
    n_tensors x (string name | u32 n_dims | i64 ne[n_dims] | u32 ggml_type | u64 offset)
    padding to ``general.alignment`` (default 32) | tensor data (offsets are relative to here)

Only the header bytes are read, in growing chunks, so the time does not depend on the size
of the tensor data.
"""
from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Sequence


from ..errors import InputError
from .header_errors import LimitError, NotGGUFError, TensorOverlapError, TruncatedError, UnsupportedVersionError
from .types import KV, TensorInfo
from .header_records import _TRUNC_HINT, _U32, _U64, MAGIC, MAX_KV, MAX_TENSORS, SUPPORTED_VERSIONS, _Cursor, _Parser, show

if TYPE_CHECKING:
    import mmap

@dataclass(frozen=True)
class GGUFHeader:
    """Everything before the tensor data, validated against the file size.

    ``non_utf8`` lists keys, tensor names and string values that were not valid UTF-8
    (decoded with U+FFFD replacements); string *array* items are decoded lazily and are not
    listed.
    """

    path: Path
    version: int
    file_size: int
    kv: dict[str, KV]
    kv_order: tuple[str, ...]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int
    header_end: int
    non_utf8: tuple[str, ...] = field(default=())

    def get(self, key: str, default: Any = None) -> Any:
        f = self.kv.get(key)
        return default if f is None else f.value

    @property
    def arch(self) -> str | None:
        a = self.get("general.architecture")
        return a if isinstance(a, str) else None

    @cached_property
    def tensors_by_name(self) -> dict[str, TensorInfo]:
        return {t.name: t for t in self.tensors}

    @property
    def data_end(self) -> int:
        """End of the last tensor's bytes (``header_end`` when there are no tensors)."""
        return max((t.end for t in self.tensors), default=self.header_end)


# --- reader ------------------------------------------------------------------------------

def is_gguf_file(path: str | os.PathLike[str]) -> bool:
    """A regular file that starts with GGUF's magic or is named ``*.gguf``: what a command that
    takes a checkpoint directory should refuse by name, not report as broken JSON."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError:
        return False  # the loader reports an unreadable file
    return magic == MAGIC or p.suffix.lower() == ".gguf"


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read and validate a GGUF header without touching tensor data.

    Raises:
        InputError: the path does not exist, is not a regular file, or cannot be read.
        GGUFFormatError: (a subclass of ``GGUFHeaderError``) the file is truncated or
            corrupt; the message names the byte offset and the key or tensor.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        # open() on a FIFO would block; a directory is a common slip with sharded models.
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputError(f"{p}: is {kind}; pass the .gguf file itself")
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return read_header_from(f, size, p, _map(f.fileno(), size))
    except OSError as exc:
        raise InputError(f"{p}: cannot read it ({exc.strerror})") from None


def _map(fd: int, size: int) -> mmap.mmap | None:
    """The whole file, mapped read-only, or None where it cannot be (then it is read).

    Parsed in place, a 150k-token vocabulary's ~6 MB header is neither read into a buffer nor
    copied out of it: its string arrays stay views of the page cache, which the writer copies
    straight to a new file. Fresh anonymous memory costs ~3.5 us a page on these VMs (~11 ms of
    a 44 ms header read). As with any mapped file (llama.cpp maps models too), a file truncated
    by another process while it is in use faults instead of reading short."""
    if not size:
        return None
    import mmap

    try:
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # a special file, a filesystem that cannot map
        return None


def raw_string(path: Path, kv: KV) -> bytes:
    """The stored bytes of scalar string ``kv`` read from ``path`` (the parsed value has
    invalid UTF-8 replaced by U+FFFD). Its bounds were checked when the header was parsed."""
    with open(path, "rb") as f:
        f.seek(kv.offset)
        f.seek(_U64.unpack(f.read(8))[0] + 4, io.SEEK_CUR)  # the key, then the u32 value type
        return f.read(_U64.unpack(f.read(8))[0])


def parse_header_bytes(data: bytes, name: str = "<bytes>") -> GGUFHeader:
    """``read_header`` over an in-memory file (tests and fuzzing)."""
    return read_header_from(io.BytesIO(data), len(data), Path(name))


def read_header_from(f: BinaryIO, size: int, path: Path, mapped: mmap.mmap | None = None) -> GGUFHeader:
    """Parse from an open binary file positioned at 0 whose total size is ``size``, or from
    ``mapped``, the same file memory-mapped whole."""
    name = str(path)
    c = _Cursor(f, size, name, mapped)
    if size < 4:
        raise TruncatedError(
            f"{name}: the file is {size} bytes, too short for the 4-byte GGUF magic (empty or "
            f"truncated download; re-fetch it)", offset=size)
    c.take(4, "the magic")
    magic = bytes(c.buf[:4])
    if magic != MAGIC:
        raise NotGGUFError(f"{name}: {_not_gguf_reason(bytes(c.buf[:64]))}", offset=0)
    version = c.unpack(_U32, "the GGUF version")
    if version not in SUPPORTED_VERSIONS:
        if version and not version & 0xFFFF:
            why = "it looks big-endian; only little-endian GGUF files are supported"
        elif version == 1:
            why = "GGUF v1 (32-bit counts) is no longer supported by llama.cpp; re-convert"
        else:
            why = "supported versions are 2 and 3; corrupt header or a newer format"
        raise UnsupportedVersionError(f"{name}: GGUF version {version} at byte 4: {why}", offset=4)
    n_tensors = c.unpack(_U64, "the tensor count")
    n_kv = c.unpack(_U64, "the metadata key count")
    for n, cap, what, at in ((n_tensors, MAX_TENSORS, "tensors", 8), (n_kv, MAX_KV, "metadata keys", 16)):
        if n > cap:
            raise LimitError(
                f"{name}: the header claims {n:,} {what} (at byte {at}), more than the "
                f"{cap:,} limit (corrupt header; re-download the file)", offset=at)
    p = _Parser(c)
    kv, order = p.kv_pairs(n_kv)
    alignment = p.alignment(kv)
    raw_infos = p.tensor_infos(n_tensors, alignment)
    header_end = c.pos
    # llama.cpp seeks to the padded start of the data section only when there are tensors.
    data_offset = header_end + (-header_end % alignment) if n_tensors else header_end
    if n_tensors and data_offset > size:
        raise c.truncated("the padding before the tensor data", data_offset)
    tensors = tuple(TensorInfo(n, ne, t, data_offset + off, nb, at) for n, ne, t, off, nb, at in raw_infos)
    _check_ranges(name, size, tensors)
    return GGUFHeader(path=path, version=version, file_size=size, kv=kv, kv_order=tuple(order),
                      tensors=tensors, alignment=alignment, data_offset=data_offset,
                      header_end=header_end, non_utf8=tuple(p.non_utf8))


def _check_ranges(name: str, size: int, tensors: Sequence[TensorInfo]) -> None:
    by_start = sorted((t for t in tensors if t.nbytes), key=lambda t: (t.offset_abs, t.end))
    cut = [t for t in by_start if t.end > size]
    if cut:
        t = cut[0]
        more = f" (and {len(cut) - 1:,} more tensor{'s' if len(cut) > 2 else ''} after it)" if len(cut) > 1 else ""
        hint = _TRUNC_HINT if t.offset_abs <= size else f"{_TRUNC_HINT}; or a corrupt offset"
        raise TruncatedError(
            f"{name}: tensor {show(t.name)} needs bytes up to {t.end:,} but the file ends at {size:,}"
            f"{more} ({hint})", offset=size)
    for a, b in zip(by_start, by_start[1:]):
        if b.offset_abs < a.end:
            raise TensorOverlapError(
                f"{name}: tensors {show(a.name)} (bytes {a.offset_abs:,}-{a.end:,}) and {show(b.name)} (bytes "
                f"{b.offset_abs:,}-{b.end:,}) overlap (corrupt tensor offsets; re-convert or "
                f"re-download)", offset=b.info_offset)


def _not_gguf_reason(head: bytes) -> str:
    """Name what the file looks like instead, for the common wrong downloads."""
    found = head[:4]
    shown = found.decode("latin-1").encode("unicode_escape").decode()
    low = head.lstrip().lower()
    if low.startswith(b"version https://git-lfs"):
        what = "it is a Git LFS pointer, not the model (run `git lfs pull` or download the file itself)"
    elif low.startswith((b"<!doctype", b"<html")):
        what = "it is an HTML page (the download returned an error or login page)"
    elif low.startswith((b"{", b"[")):
        what = "it is JSON text, not a GGUF model"
    elif found == b"PK\x03\x04":
        what = "it is a zip archive (a PyTorch .pt/.bin checkpoint?); convert it to GGUF first"
    elif len(head) >= 9 and head[8:9] == b"{" and _U64.unpack_from(head)[0] < 1 << 27:
        what = "it is a safetensors file; convert it with `dflash-gguf convert`"
    else:
        what = "not a GGUF file (wrong file, or the start of the file is damaged)"
    return f"starts with '{shown}' instead of the GGUF magic 'GGUF': {what}"
