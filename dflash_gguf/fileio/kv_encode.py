"""GGUF header bytes -- the fixed header, metadata pairs, tensor infos -- byte for byte what
gguf-py's ``GGUFWriter`` writes, without importing gguf-py or numpy (~0.2 s of a convert's start).

Arrays are encoded in bulk: a 150k-token vocabulary is ~455k array items (tokens, token types,
scores, merges), which ``GGUFWriter._pack_val`` packs one ``struct.pack`` call and one
bytearray append at a time: about a second, more than the tensor data of a 1 GB drafter takes
to copy. Here a numeric array is one ``array.array`` conversion and a string array one
``join``; a ``StringArray`` or ``NumberArray`` read from a file is copied as its stored bytes. Scalars are the
same ``struct.pack`` calls gguf-py makes.

Anything this module does not handle exactly as gguf-py would (nested arrays, non-finite or
out-of-range floats, values of the wrong type) is packed by gguf-py itself, which then accepts
or rejects it as it always did.
"""
from __future__ import annotations

import math
import struct
import sys
from array import array
from functools import lru_cache
from typing import Any, Sequence

from .gguf_constants import GGUF_MAGIC, GGUF_VERSION
from .gguf_constants import GGUFValueType as T
from .string_array import StringArray
from .types import NumberArray

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# gguf-py's GGUFWriter._simple_value_packing, little-endian; BOOL is packed without the prefix
_SCALARS = {T.UINT8: "<B", T.INT8: "<b", T.UINT16: "<H", T.INT16: "<h", T.UINT32: "<I", T.INT32: "<i",
            T.FLOAT32: "<f", T.UINT64: "<Q", T.INT64: "<q", T.FLOAT64: "<d", T.BOOL: "?"}
# array.array codes with the GGUF item size; a platform where a C type differs packs the slow way.
_CODES = {T.UINT8: ("B", 1), T.INT8: ("b", 1), T.UINT16: ("H", 2), T.INT16: ("h", 2), T.UINT32: ("I", 4),
          T.INT32: ("i", 4), T.UINT64: ("Q", 8), T.INT64: ("q", 8), T.FLOAT32: ("f", 4), T.FLOAT64: ("d", 8)}
_CODES = {t: c for t, (c, n) in _CODES.items() if array(c).itemsize == n and sys.byteorder == "little"}
_INT_ITEMS, _FLOAT_ITEMS = frozenset({int}), frozenset({int, float})


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
    items = _items(values, sub_type)
    if items is None:
        return None
    return _array_prefix(sub_type, n) + items


def _array_prefix(sub_type: T, n: int) -> bytes:
    """What precedes an array's items: u32 item type | u64 count."""
    return _U32.pack(sub_type) + _U64.pack(n)


def _items(values: Any, sub_type: T) -> bytes | None:
    stored = _stored_items(values, sub_type)
    if stored is not None:
        return stored
    if isinstance(values, StringArray):
        return None  # strings as another item type: gguf-py decides
    if sub_type == T.STRING:
        return _strings(values)
    if sub_type == T.BOOL:
        return bytes(1 if v else 0 for v in values)  # gguf-py packs "?": truthiness
    if sub_type in _CODES:
        return _numbers(values, sub_type)
    return None


def _stored_items(values: Any, sub_type: T) -> bytes | None:
    """The items of an array read from a file, as stored, when they are what ``sub_type`` asks."""
    if isinstance(values, StringArray):
        return values.encoded() if sub_type == T.STRING else None
    if isinstance(values, NumberArray):
        return values.packed if values.item == sub_type else None
    return None


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
    # numpy scalars, bools, strings...: gguf-py's own rules decide (the item types, collected
    # in C: a 150k-item generator of type checks cost more than the packing)
    if not set(map(type, values)) <= (_FLOAT_ITEMS if code in "fd" else _INT_ITEMS):
        return None
    try:
        packed = array(code, values)  # ints: range-checked (OverflowError), as struct.pack does
    except (OverflowError, TypeError, ValueError):
        return None
    if code == "f" and not all(map(math.isfinite, packed)):
        # struct.pack("<f") refuses a finite double that overflows float32 (array.array makes
        # it inf), and NaN payloads are left to gguf-py's own packing.
        return None
    return packed.tobytes()


def encode_header(n_tensors: int, n_kv: int) -> bytes:
    """magic | version | tensor count | metadata pair count."""
    return _U32.pack(GGUF_MAGIC) + _U32.pack(GGUF_VERSION) + _U64.pack(n_tensors) + _U64.pack(n_kv)


def encode_string(value: str | bytes) -> bytes:
    """u64 length | bytes (a str as UTF-8; bytes as they are, as gguf-py writes them)."""
    b = value.encode("utf-8") if isinstance(value, str) else value
    return _U64.pack(len(b)) + bytes(b)


def encode_kv(key: str, value: Any, vtype: T, sub_type: T | None = None) -> bytes:
    """One metadata pair: key | u32 type | value. Arrays with a known item type may be empty
    (gguf-py refuses any empty array, but GGUF and llama.cpp allow it, and a file we copy may
    hold one)."""
    head = encode_string(key) + _U32.pack(vtype)
    fmt = _SCALARS.get(vtype)
    if fmt is not None:
        return head + struct.pack(fmt, value)
    if vtype == T.STRING:
        return head + encode_string(value)
    if vtype == T.ARRAY and sub_type is not None:
        if len(value) == 0:
            return head + _array_prefix(sub_type, 0)
        body = encode_array(value, sub_type)
        if body is not None:
            return head + body
    return encode_string(key) + _gguf_py_packer()._pack_val(value, vtype, add_vtype=True, sub_type=sub_type)


def encode_kv_parts(key: str, value: Any, vtype: T, sub_type: T | None = None) -> list[bytes]:
    """``encode_kv``'s bytes in pieces: an array read from a file stays its own piece instead of
    being copied into one joined buffer (a vocabulary's ~5 MB of fresh pages cost ~5 ms)."""
    if vtype == T.ARRAY and sub_type is not None and len(value):
        items = _stored_items(value, sub_type)
        if items is not None:
            return [encode_string(key) + _U32.pack(vtype) + _array_prefix(sub_type, len(value)), items]
    return [encode_kv(key, value, vtype, sub_type)]


def encode_tensor_info(name: str, shape: Sequence[int], ggml_type: int, offset: int) -> bytes:
    """name | u32 n_dims | u64 dims (ggml order: ``shape`` reversed) | u32 type | u64 offset."""
    dims = b"".join(_U64.pack(d) for d in reversed(tuple(shape)))
    return encode_string(name) + _U32.pack(len(shape)) + dims + _U32.pack(ggml_type) + _U64.pack(offset)


@lru_cache(maxsize=None)
def _gguf_py_packer():
    """A file-less GGUFWriter, for its ``_pack_val`` (imported only for what this module leaves to it)."""
    from gguf import GGUFWriter

    return GGUFWriter(None, "")
