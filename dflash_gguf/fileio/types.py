"""The one metadata pair and the one tensor descriptor, shared by the GGUF reader and writer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .gguf_constants import GGMLQuantizationType, GGUFValueType


@dataclass(frozen=True)
class KV:
    """One metadata pair with its GGUF type (``sub_type`` is the element type of an ARRAY).

    Read from a file, arrays are tuples (a ``NumberArray``, or a ``StringArray`` decoded lazily) and ``offset`` is
    where the key starts; built for writing, arrays may be any sequence and ``offset`` is None.
    """

    key: str
    value: Any
    type: GGUFValueType
    sub_type: GGUFValueType | None = None
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "type": type_name(self.type, self.sub_type), "value": _json_value(self.value)}


def _json_value(value: Any) -> Any:
    """A value as JSON shows it: an array over 64 items as its length and first 8, at every
    level (the inner arrays of a nested array too)."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) > 64:
            return {"length": len(value), "head": [_json_value(v) for v in value[:8]]}
        return [_json_value(v) for v in value]
    return value


class NumberArray(tuple):
    """A numeric GGUF array as read from a file: a tuple of its items that keeps their stored
    bytes (``packed``), so a writer copying it (a target's 150k token types) writes those bytes
    back instead of re-packing every item (~7 ms). Not for BOOL items, which a writer normalises
    to 0/1."""

    item: GGUFValueType
    packed: bytes | memoryview  # a view where the header was read from a mapped file

    def __new__(cls, values: Sequence[Any], item: GGUFValueType, packed: bytes | memoryview) -> "NumberArray":
        self = super().__new__(cls, values)
        self.item, self.packed = item, packed
        return self


def type_name(t: GGUFValueType, sub: GGUFValueType | None = None) -> str:
    """A value type as messages and JSON name it: ``UINT32``, ``ARRAY[STRING]``."""
    return t.name if sub is None else f"ARRAY[{sub.name}]"


def kv_u32(key: str, value: int) -> KV:
    return KV(key, int(value), GGUFValueType.UINT32)


def kv_str(key: str, value: str) -> KV:
    return KV(key, str(value), GGUFValueType.STRING)


def kv_bool(key: str, value: bool) -> KV:
    return KV(key, bool(value), GGUFValueType.BOOL)


def kv_array(key: str, values: Sequence[Any], sub_type: GGUFValueType) -> KV:
    return KV(key, list(values), GGUFValueType.ARRAY, sub_type)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as declared in a GGUF header. ``shape_ne`` is ggml order (ne[0] innermost);
    ``shape`` is numpy order (last axis = ne[0])."""

    name: str
    shape_ne: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    offset_abs: int   # first data byte, from the start of the file
    nbytes: int
    info_offset: int = 0  # where this tensor's info record starts in the header

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.shape_ne))

    @property
    def end(self) -> int:
        return self.offset_abs + self.nbytes

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape_ne:
            n *= d
        return n
