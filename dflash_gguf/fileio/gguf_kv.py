"""Typed access to GGUF metadata keys: an integer, number, string or bool, checked for its
GGUF type and range, or one ``GGUFFormatError`` naming the key, its byte, type and value.

Apart from ``gguf_reader`` (tensor bytes) because the two have different readers: formats,
quantize's layout, the target info and the reference parse keys of a header they already hold
and never touch tensor data, while retarget, quantize and compare stream tensors.

A hostile or hand-edited file may put any GGUF type under any key. llama.cpp refuses a key of
the wrong type ("key has wrong type"), and so do these readers.
"""
from __future__ import annotations

import math
from typing import Any

from ..errors import GGUFFormatError
from .gguf_constants import GGUFValueType as T
from .gguf_header import show
from .types import KV, type_name

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
