"""Reading a GGUF's tensors (retarget, quantize, compare, parity, inspect).

Every file goes through the bounds-checked header parser (``gguf_header``): bad strings, bad
offsets and bad types are one ``GGUFFormatError`` naming where and what. Tensor bytes are then
read lazily from a read-only memory map, one tensor at a time, at offsets the header already
checked against the file size. (gguf-py's ``GGUFReader`` is not used: it trusts lengths and
decodes strings strictly, so one flipped byte in a value is a traceback.)
"""
from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GGUFFormatError, OutputError
from .gguf_header import GGUFHeader, read_header, show
from .gguf_constants import GGUFValueType as T
from .types import KV, TensorInfo, type_name

if TYPE_CHECKING:
    import numpy as np


@dataclass
class GGUFFile:
    """A validated header plus lazy access to tensor bytes."""

    header: GGUFHeader
    _map: np.ndarray | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        return self.header.path

    @property
    def kvs(self) -> dict[str, KV]:
        """Every metadata pair in file order, keyed by name."""
        return self.header.kv

    @property
    def tensors(self) -> tuple[TensorInfo, ...]:
        return self.header.tensors

    @property
    def arch(self) -> str | None:
        return self.header.arch

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape for t in self.tensors}

    def raw(self, t: TensorInfo) -> np.ndarray:
        """The tensor's bytes as a flat uint8 view of the memory map (no copy).

        Raises:
            GGUFFormatError: the file shrank since its header was read.
        """
        if self._map is None:
            self._map = _map_file(self.header)
        if t.end > len(self._map):
            raise GGUFFormatError(f"{self.path}: tensor {t.name} needs bytes up to {t.end:,} but the file now ends "
                                  f"at {len(self._map):,} (it changed while being read; re-run on a stable copy)")
        return self._map[t.offset_abs: t.end]


class TensorReader:
    """Positional reads of tensor bytes (``os.preadv``): safe from several threads at once, and
    nothing stays resident afterwards, unlike pages of ``GGUFFile.raw``'s memory map, which count
    in the process's RSS for as long as the map lives. Use as a context manager (one descriptor);
    ``path`` is the GGUF's (``GGUFFile.path``).

    Raises:
        OutputError: the file cannot be opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise OutputError(f"{path}: cannot read it ({exc.strerror})") from None

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, t: TensorInfo, start: int, size: int, into: np.ndarray | None = None) -> np.ndarray:
        """``size`` bytes of tensor ``t``'s data from its byte ``start``, into ``into[:size]``
        (uint8) or a new buffer.

        Raises:
            GGUFFormatError: the file shrank since its header was read.
        """
        import numpy as np  # here, not at the top: header-only commands never read tensor data

        buf = np.empty(size, np.uint8) if into is None else into[:size]
        view, pos = memoryview(buf), t.offset_abs + start
        while view.nbytes:
            n = os.preadv(self._fd, [view], pos)
            if n == 0:
                raise GGUFFormatError(
                    f"{self.path}: tensor {t.name} needs bytes up to {t.end:,} but the file now ends at {pos:,} "
                    "(it changed while being read; re-run on a stable copy)")
            view, pos = view[n:], pos + n
        return buf


def read_gguf(path: str | Path) -> GGUFFile:
    """Open a GGUF: validated header (KVs, tensor infos), tensor data mapped on first use.

    Raises:
        OutputError: the file does not exist or cannot be read.
        GGUFFormatError: the file is truncated or corrupt.
    """
    return GGUFFile(read_header(path))


def _map_file(h: GGUFHeader) -> np.ndarray:
    import numpy as np  # here, not at the top: header-only commands (inspect, checks) never map data

    try:
        with open(h.path, "rb") as f:
            if h.file_size == 0:
                return np.zeros(0, np.uint8)
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise OutputError(f"{h.path}: cannot read it ({exc.strerror})") from None
    return np.frombuffer(mm, dtype=np.uint8)


# --- typed access to metadata ------------------------------------------------------------
# A hostile or hand-edited file may put any GGUF type under any key. llama.cpp refuses a key of
# the wrong type ("key has wrong type"), and so do the readers of a key (formats, quantize,
# the reference): a string, float, bool or nested array where an integer is expected is one
# GGUFFormatError naming the key, its byte, type and value.
# Any integer width is accepted (converters differ), as long as the value fits the type the
# key is written back as (UINT32 for counts and ids, INT32 for tap lists).
INT_TYPES = frozenset({T.UINT8, T.INT8, T.UINT16, T.INT16, T.UINT32, T.INT32, T.UINT64, T.INT64})
U32_MAX = (1 << 32) - 1
I32_MAX = (1 << 31) - 1


def describe_kv(kv: KV) -> str:
    """A KV's type and (shortened) value for a one-line message."""
    return f"{type_name(kv.type, kv.sub_type)} {show(_preview(kv.value), 60)}"


def _preview(v: Any, nested: bool = False) -> str:
    """At most 8 items and ~60 characters of each, formatted: a value may be megabytes long
    (a string, a nested array), and repr() of all of it would be as long."""
    if isinstance(v, (str, bytes)):
        return repr(v[:61])
    if not isinstance(v, (tuple, list)):
        return repr(v)  # a number, or a StringArray ("StringArray(N items)")
    if nested and v:
        return f"[… {len(v):,} items]"
    more = f", … {len(v):,} items" if len(v) > 8 else ""
    return f"[{', '.join(_preview(i, True) for i in v[:8])}{more}]"


def bad_kv(path: str, kv: KV, expected: str) -> GGUFFormatError:
    at = "" if kv.offset is None else f" (at byte {kv.offset:,})"
    return GGUFFormatError(
        f"{path}: key {show(kv.key)}{at} has unexpected types: it is {describe_kv(kv)}, but loaders read "
        f"{expected} there (corrupt or hand-edited metadata; re-convert the file)")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _required(kv: dict[str, KV], key: str, consumed: set[str] | None, required: bool, path: str) -> KV | None:
    field_ = kv.get(key)
    if field_ is None:
        if required:
            raise GGUFFormatError(f"{path}: required key {key} is missing (file written by an incompatible converter?)")
        return None
    if consumed is not None:
        consumed.add(key)
    return field_


def get_int(kv: dict[str, KV], key: str, consumed: set[str] | None, *, required: bool = True, path: str = "",
           lo: int = 0, hi: int = U32_MAX) -> int | None:
    """An integer key (any integer GGUF type) whose value lies in [lo, hi]; None if absent
    and not required.

    Raises:
        GGUFFormatError: missing (when required), not an integer type, or out of range.
    """
    field_ = _required(kv, key, consumed, required, path)
    if field_ is None:
        return None
    v = field_.value
    if field_.type not in INT_TYPES or not _is_int(v):
        raise bad_kv(path, field_, "an integer")
    if not lo <= v <= hi:
        raise bad_kv(path, field_, f"an integer in [{lo:,}, {hi:,}]")
    return v


def get_ints(kv: dict[str, KV], key: str, consumed: set[str] | None, *, required: bool = True, path: str = "",
            lo: int = 0, hi: int = I32_MAX) -> tuple[int, ...] | None:
    """A non-empty array of integers (any integer item type), each in [lo, hi].

    Raises:
        GGUFFormatError: missing (when required), not an array of integers, empty, or an
            item out of range.
    """
    field_ = _required(kv, key, consumed, required, path)
    if field_ is None:
        return None
    v = field_.value
    if (field_.type != T.ARRAY or field_.sub_type not in INT_TYPES or not isinstance(v, (tuple, list))
            or not all(_is_int(i) for i in v)):
        raise bad_kv(path, field_, "an array of integers")
    if not v:
        raise bad_kv(path, field_, "a non-empty array of integers")
    if not all(lo <= i <= hi for i in v):
        raise bad_kv(path, field_, f"an array of integers in [{lo:,}, {hi:,}]")
    return tuple(v)


def get_float(kv: dict[str, KV], key: str, consumed: set[str] | None, *, required: bool = True, path: str = "",
             positive: bool = False) -> float | None:
    """A finite number (FLOAT32/FLOAT64, or an integer type), > 0 with ``positive``.

    Raises:
        GGUFFormatError: missing (when required), not a number, NaN/inf, or not positive.
    """
    field_ = _required(kv, key, consumed, required, path)
    if field_ is None:
        return None
    v = field_.value
    if field_.type not in INT_TYPES | {T.FLOAT32, T.FLOAT64} or isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad_kv(path, field_, "a number (FLOAT32)")
    if not math.isfinite(v) or (positive and v <= 0):
        raise bad_kv(path, field_, "a positive finite number" if positive else "a finite number")
    return float(v)


def _get_scalar(kv: dict[str, KV], key: str, consumed: set[str] | None, required: bool, path: str,
                vtype: T, pytype: type) -> Any:
    field_ = _required(kv, key, consumed, required, path)
    if field_ is None:
        return None
    if field_.type != vtype or not isinstance(field_.value, pytype):
        raise bad_kv(path, field_, f"a {vtype.name}")
    return field_.value


def get_bool(kv: dict[str, KV], key: str, consumed: set[str] | None, *, required: bool = True,
             path: str = "") -> bool | None:
    """A BOOL key. Raises GGUFFormatError: missing (when required) or not a BOOL."""
    return _get_scalar(kv, key, consumed, required, path, T.BOOL, bool)


def get_str(kv: dict[str, KV], key: str, consumed: set[str] | None, *, required: bool = True,
            path: str = "") -> str | None:
    """A STRING key. Raises GGUFFormatError: missing (when required) or not a STRING."""
    return _get_scalar(kv, key, consumed, required, path, T.STRING, str)


def get_bools(kv: dict[str, KV], key: str, consumed: set[str] | None, *, required: bool = True,
             path: str = "") -> tuple[bool, ...] | None:
    """A non-empty array of BOOL.

    Raises:
        GGUFFormatError: missing (when required), or not a non-empty array of BOOL.
    """
    field_ = _required(kv, key, consumed, required, path)
    if field_ is None:
        return None
    v = field_.value
    if (field_.type != T.ARRAY or field_.sub_type != T.BOOL or not isinstance(v, (tuple, list)) or not v
            or not all(isinstance(i, bool) for i in v)):
        raise bad_kv(path, field_, "a non-empty array of BOOL")
    return tuple(v)
