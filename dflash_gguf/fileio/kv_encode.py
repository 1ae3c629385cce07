"""GGUF metadata arrays encoded in bulk, byte for byte what gguf-py's ``GGUFWriter`` writes.

A 150k-token vocabulary is ~455k array items (tokens, token types, scores, merges), which
``GGUFWriter._pack_val`` packs one ``struct.pack`` call and one bytearray append at a time:
about a second, more than the tensor data of a 1 GB drafter takes to copy. Here a numeric
array is one ``array.array`` conversion and a string array one ``join``; a ``StringArray``
read from a file is copied as its stored bytes.

Anything this module does not handle exactly as gguf-py would (nested arrays, non-finite or
out-of-range floats, values of the wrong type) returns None, and the caller packs it with
gguf-py, which then accepts or rejects it as it always did.
"""
from __future__ import annotations

import struct
import sys
from array import array
from typing import Any

import numpy as np
from gguf import GGUFValueType as T

from .string_array import StringArray

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# array.array codes with the GGUF item size; a platform where a C type differs packs the slow way.
_CODES = {T.UINT8: ("B", 1), T.INT8: ("b", 1), T.UINT16: ("H", 2), T.INT16: ("h", 2), T.UINT32: ("I", 4),
          T.INT32: ("i", 4), T.UINT64: ("Q", 8), T.INT64: ("q", 8), T.FLOAT32: ("f", 4), T.FLOAT64: ("d", 8)}
_CODES = {t: c for t, (c, n) in _CODES.items() if array(c).itemsize == n and sys.byteorder == "little"}


def encode_array(values: Any, sub_type: T | None) -> bytes | None:
    """``u32 item type | u64 count | items`` of a non-empty array, or None to leave it to gguf-py."""
    if sub_type is None or isinstance(values, (str, bytes)):
        return None
    try:
        n = len(values)
    except TypeError:
        return None
    if n == 0:
        return None
    if isinstance(values, StringArray):
        items = values.encoded() if sub_type == T.STRING else None
    elif sub_type == T.STRING:
        items = _strings(values)
    elif sub_type == T.BOOL:
        items = bytes(1 if v else 0 for v in values)  # gguf-py packs "?": truthiness
    elif sub_type in _CODES:
        items = _numbers(values, sub_type)
    else:
        return None
    if items is None:
        return None
    return _U32.pack(sub_type) + _U64.pack(n) + items


def _strings(values: Any) -> bytes | None:
    # gguf-py: str items are UTF-8 encoded (strict), bytes items written as they are.
    out = []
    push, pack = out.append, _U64.pack
    for v in values:
        t = type(v)
        if t is str:
            try:
                v = v.encode("utf-8")
            except UnicodeEncodeError:
                return None
        elif t is not bytes:
            return None
        push(pack(len(v)))
        push(v)
    return b"".join(out)


def _numbers(values: Any, sub_type: T) -> bytes | None:
    code = _CODES[sub_type]
    if code in "fd" and not all(type(v) is float or type(v) is int for v in values):
        return None  # numpy scalars, bools, strings...: gguf-py's own rules decide
    if code not in "fd" and not all(type(v) is int for v in values):
        return None
    try:
        packed = array(code, values)  # ints: range-checked (OverflowError), as struct.pack does
    except (OverflowError, TypeError, ValueError):
        return None
    if code == "f" and not np.isfinite(np.frombuffer(packed, dtype="<f4")).all():
        # struct.pack("<f") refuses a finite double that overflows float32 (array.array makes
        # it inf), and NaN payloads are left to gguf-py's own packing.
        return None
    return packed.tobytes()
