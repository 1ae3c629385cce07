"""The GGUF header's records, parsed with every length and count checked before it is trusted.

``_Cursor`` reads the header sequentially in growing chunks, bounds-checked against the file
size; ``_Parser`` turns the bytes into KV pairs and tensor infos, each failure its own
``GGUFHeaderError`` naming the byte offset. ``gguf_header.read_header`` drives them.
"""
from __future__ import annotations

import struct
from itertools import repeat
from typing import Any, BinaryIO

from .gguf_constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from .header_errors import InvalidKVError, InvalidTensorInfoError, LimitError, TruncatedError
from .string_array import StringArray, item_starts
from .types import KV, NumberArray

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# Caps far above any real model (Qwen3.5's 248k-token vocab, ~1.5k tensors in a 400B MoE)
# but low enough that a corrupt count fails fast instead of looping or allocating.
MAX_TENSORS = 1 << 20
MAX_KV = 1 << 20
MAX_STRING_BYTES = 64 << 20   # chat templates are ~10 KB; llama.cpp allows 1 GiB
MAX_NAME_BYTES = 1 << 16      # keys and tensor names (llama.cpp limits tensor names to 63)
MAX_ARRAY_ITEMS = 1 << 24
MAX_ARRAY_DEPTH = 4           # llama.cpp refuses nested arrays; gguf-py can write them
# The caps above bound one field; the budget bounds the whole header. A sparse file declares
# gigabytes of zeros in a few KB, so the file's size bounds nothing: every value the parse
# keeps is charged what it holds in memory *before* it is decoded, and the parse stops at
# HEADER_BUDGET. A real 262k-token vocabulary (tokens, merges, scores, types) costs ~34 MB.
HEADER_BUDGET = 64 << 20
COST_NUMBER = 32          # a numeric array item: a tuple slot plus a float or int object
COST_SMALL_NUMBER = 8     # a UINT8 or BOOL item: a tuple slot (Python shares those objects)
COST_TEXT_BYTE = 4        # a key, name or string value: a str holds up to 4 bytes a character
COST_STRING_ITEM = 16     # a string array item, beside its bytes (kept raw): its length and start
COST_NESTED_ARRAY = 4096  # an array inside an array: ~600 bytes, but ~12 us to parse (time, too)
COST_RECORD = 256         # a key's KV or a tensor's info, beside its name's bytes
_WALK_BLOCK = 4096            # string-array items walked per block (_Parser.string_array)
_FIRST_READ = 256 << 10

_U8, _U16, _U32, _U64, _I64 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<Q", "<q"))
# Scalar value types -> struct format character (little-endian, standard sizes).
_SCALAR = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "B",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}
_SCALAR_STRUCT = {t: struct.Struct("<" + f) for t, f in _SCALAR.items()}
_TRUNC_HINT = "truncated download? re-fetch and compare sizes"


def show(name: str, limit: int = 80) -> str:
    """A key or tensor name as it may appear in a one-line message: control characters
    escaped (a corrupt length can make a "name" swallow half the header) and shortened."""
    # cut before escaping: a name (or a message quoting a value) may be megabytes long
    s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name[:limit])
    return s if len(s) <= limit and len(name) <= limit else s[: limit - 1] + "…"


class _Cursor:
    """Sequential reads from the start of a file, bounds-checked against its size.

    A mapped file is parsed in place. Otherwise bytes are read in growing chunks into one
    buffer, so parsing a big vocabulary costs a handful of read() calls, and nothing past the
    header is ever read.
    """

    def __init__(self, f: BinaryIO, size: int, name: str, mapped: Any = None) -> None:
        self.f, self.size, self.name = f, size, name
        # ``mapped``: the whole file, memory-mapped (gguf_header._map): nothing to read, and
        # ``copy`` hands out views instead of copies
        self.buf = bytearray() if mapped is None else mapped
        self.mapped = mapped is not None
        self.pos = 0

    def truncated(self, what: str, end: int) -> TruncatedError:
        return TruncatedError(
            f"{self.name}: {what} needs bytes up to {end:,} but the file ends at {self.size:,} "
            f"({_TRUNC_HINT})", offset=self.size)

    def fill(self, end: int) -> None:
        # Caller has checked end <= size; grow the buffer geometrically.
        have = len(self.buf)
        want = min(self.size, max(end, 2 * have, _FIRST_READ))
        chunk = self.f.read(want - have)
        self.buf += chunk
        if len(self.buf) < end:  # the file shrank while we read it
            raise self.truncated("the header", end)

    def copy(self, start: int, end: int) -> bytes | memoryview:
        """Bytes ``[start, end)``: a read-only view of a mapped file, or one copy of the bytes
        read (slicing the bytearray would make two; fresh pages are what a megabyte costs)."""
        if self.mapped:
            return memoryview(self.buf)[start:end]  # type: ignore[return-value]
        with memoryview(self.buf) as m:
            return m[start:end].tobytes()

    def take(self, n: int, what: str) -> int:
        start, end = self.pos, self.pos + n
        if end > self.size:
            raise self.truncated(what, end)
        if end > len(self.buf):
            self.fill(end)
        self.pos = end
        return start

    def unpack(self, s: struct.Struct, what: str) -> Any:
        return s.unpack_from(self.buf, self.take(s.size, what))[0]

    def text(self, n: int, where: str, non_utf8: list[str]) -> str:
        start = self.take(n, where)
        # decoded from a view: a copy of the bytes first would double a long value's peak
        with memoryview(self.buf) as whole, whole[start:start + n] as raw:
            try:
                return str(raw, "utf-8")
            except UnicodeDecodeError:
                non_utf8.append(f"{where} at byte {start:,}")
                return str(raw, "utf-8", "replace")


def _value_type(raw: int, where: str, name: str, offset: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise InvalidKVError(
            f"{name}: {where} has value type {raw}, not one of the 13 GGUF types 0-12, at byte "
            f"{offset:,} (corrupt metadata; re-download or re-convert)", offset=offset) from None


class _Parser:
    def __init__(self, cur: _Cursor) -> None:
        self.c = cur
        self.name = cur.name
        self.non_utf8: list[str] = []
        self.spent = 0  # of HEADER_BUDGET

    def charge(self, cost: int, what: str, at: int) -> None:
        """Count ``cost`` bytes against HEADER_BUDGET before decoding ``what`` (at byte ``at``),
        or fail with a one-line ``LimitError``."""
        self.spent += cost
        if self.spent > HEADER_BUDGET:
            raise LimitError(
                f"{self.name}: {what} at byte {at:,} needs ~{cost:,} bytes of memory, past the header's "
                f"{HEADER_BUDGET / (1 << 20):g} MiB budget ({self.spent - cost:,} spent before it; no real GGUF "
                f"comes near it: corrupt or hostile header, re-download the file)", offset=at)

    def string(self, what: str, cap: int) -> str:
        c = self.c
        at = c.pos
        n = c.unpack(_U64, f"the length of {what}")
        if n > cap:
            raise LimitError(
                f"{self.name}: {what} claims {n:,} bytes at byte {at:,}, more than the "
                f"{cap:,}-byte limit (corrupt length field; re-download the file)", offset=at)
        self.charge(n * COST_TEXT_BYTE, what, at)
        return c.text(n, what, self.non_utf8)

    def value(self, vtype: GGUFValueType, what: str, depth: int) -> tuple[Any, GGUFValueType | None]:
        c = self.c
        if vtype in _SCALAR_STRUCT:
            v = c.unpack(_SCALAR_STRUCT[vtype], what)
            return (v != 0 if vtype == GGUFValueType.BOOL else v), None
        if vtype == GGUFValueType.STRING:
            return self.string(what, MAX_STRING_BYTES), None
        # ARRAY: u32 item type, u64 count, items
        at = c.pos
        item = _value_type(c.unpack(_U32, f"the item type of {what}"), f"the item type of {what}", self.name, at)
        count_at = c.pos
        n = c.unpack(_U64, f"the item count of {what}")
        if n > MAX_ARRAY_ITEMS:
            raise LimitError(
                f"{self.name}: {what} claims {n:,} items at byte {count_at:,}, more than the "
                f"{MAX_ARRAY_ITEMS:,}-item limit (corrupt count; re-download the file)", offset=count_at)
        if item in _SCALAR:
            small = item in (GGUFValueType.UINT8, GGUFValueType.BOOL)
            self.charge(n * (COST_SMALL_NUMBER if small else COST_NUMBER), what, count_at)
            # struct, not numpy: the header-only commands do not import numpy (~50 ms).
            fmt = f"<{n}{_SCALAR[item]}"
            start = c.take(struct.calcsize(fmt), f"the {n:,} {item.name} items of {what}")
            values = struct.unpack_from(fmt, c.buf, start)
            if item == GGUFValueType.BOOL:
                return tuple(v != 0 for v in values), item
            return NumberArray(values, item, c.copy(start, c.pos)), item
        if item == GGUFValueType.STRING:
            self.charge(n * COST_STRING_ITEM, what, count_at)
            return self.string_array(n, what), item
        if depth + 1 >= MAX_ARRAY_DEPTH:
            raise LimitError(
                f"{self.name}: {what} nests arrays deeper than {MAX_ARRAY_DEPTH} levels at byte "
                f"{at:,} (corrupt metadata; no real GGUF nests arrays)", offset=at)
        self.charge(n * COST_NESTED_ARRAY, what, count_at)
        return tuple(self.value(GGUFValueType.ARRAY, f"item {i} of {what}", depth + 1)[0]
                     for i in range(n)), item

    def string_array(self, n: int, what: str) -> StringArray:
        c = self.c
        first = c.pos
        # Every item has an 8-byte length prefix: check the lower bound before the walk.
        if first + 8 * n > c.size:
            raise c.truncated(f"the {n:,} strings of {what}", first + 8 * n)
        # Only the array's end is found here, each length added to the position (~75 ns an
        # item; a vocabulary has ~300k); the items' starts are found if a lookup needs them
        # (StringArray). A pass runs over the bytes read so far; each pass starts at item
        # ``i0``, whose length field is at ``mark``.
        pos, i, i0, mark = first, 0, 0, first
        while i < n:
            # The u64 at ``pos`` is item ``pos >> 3`` of the view of the bytes from ``pos & 7``
            # on: one index, no tuple, ~15 % faster than Struct.unpack_from. The views pin the
            # buffer, so they are released before it grows.
            with memoryview(c.buf) as whole:
                q = [whole[k:k + (len(whole) - k) // 8 * 8].cast("Q") for k in range(8)]
                try:
                    # Blocks of items without a counter (~15 % faster); the block that runs
                    # past the bytes read is walked again, counting, to find the item.
                    while i < n:
                        k, p = min(n - i, _WALK_BLOCK), pos
                        for _ in repeat(None, k):
                            p += 8 + q[p & 7][p >> 3]
                        pos, i = p, i + k
                except IndexError:
                    try:
                        for i in range(i, n):  # i: the item whose length is read next
                            pos += 8 + q[pos & 7][pos >> 3]
                        else:
                            i = n
                    except IndexError:  # item i's length is past the bytes read
                        pass
                finally:
                    for v in q:
                        v.release()
            if i < n:
                if pos > c.size:
                    self._item_past_end(i0, mark, what)
                if pos + 8 > c.size:
                    raise c.truncated(f"the length of item {i:,} of {what}", pos + 8) from None
                if self.spent + pos - first - 8 * i > HEADER_BUDGET:  # read, unmapped: stop early
                    self.charge(pos - first - 8 * i, f"the text of the strings of {what}", first)
                c.fill(pos + 8)
                i0, mark = i, pos
        if pos > c.size:
            self._item_past_end(i0, mark, what)
        if pos > len(c.buf):
            c.fill(pos)
        self.charge(pos - first - 8 * n, f"the text of the {n:,} strings of {what}", first)
        raw = c.copy(first, pos)
        # The walk skipped the per-item length cap; no item can exceed it unless the whole
        # array does, and then the starts show which one.
        if pos - first > MAX_STRING_BYTES:
            starts = item_starts(raw, n)
            ends = [*starts[1:], pos - first + 8]
            lengths = [e - s - 8 for s, e in zip(starts, ends)]
            j = lengths.index(max(lengths))
            self._check_item_len(lengths[j], j, what, first + starts[j] - 8)
        c.pos = pos
        return StringArray(raw, n)

    def _item_past_end(self, i: int, pos: int, what: str) -> None:
        """Some item from ``i`` on (its length field at ``pos``, inside the bytes read) runs past
        the file's end: find it and raise the limit or truncation error that names it."""
        c = self.c
        while True:
            ln = _U64.unpack_from(c.buf, pos)[0]
            if pos + 8 + ln > c.size:
                self._check_item_len(ln, i, what, pos)
                raise c.truncated(f"item {i:,} of {what}", pos + 8 + ln)
            pos += 8 + ln
            i += 1

    def _check_item_len(self, ln: int, i: int, what: str, at: int) -> None:
        if ln > MAX_STRING_BYTES:
            raise LimitError(
                f"{self.name}: item {i:,} of {what} claims {ln:,} bytes at byte {at:,}, more than "
                f"the {MAX_STRING_BYTES:,}-byte limit (corrupt length field; re-download the file)",
                offset=at)

    def kv_pairs(self, n_kv: int) -> tuple[dict[str, KV], list[str]]:
        c, kv, order = self.c, {}, []
        for i in range(n_kv):
            at = c.pos
            self.charge(COST_RECORD, f"key #{i}", at)
            key = self.string(f"key #{i}", MAX_NAME_BYTES)
            if not key:
                raise InvalidKVError(
                    f"{self.name}: key #{i} at byte {at:,} is empty (corrupt metadata; "
                    f"re-download or re-convert)", offset=at)
            shown = show(key)
            if key in kv:
                raise InvalidKVError(
                    f"{self.name}: key '{shown}' appears twice (at bytes {kv[key].offset:,} and "
                    f"{at:,}); loaders refuse duplicate keys (re-convert the file)", offset=at)
            t_at = c.pos
            vtype = _value_type(c.unpack(_U32, f"the type of key '{shown}'"), f"key '{shown}'", self.name, t_at)
            value, item = self.value(vtype, f"the value of key '{shown}'", 0)
            kv[key] = KV(key, value, vtype, item, at)
            order.append(key)
        return kv, order

    def alignment(self, kv: dict[str, KV]) -> int:
        f = kv.get("general.alignment")
        if f is None:
            return DEFAULT_ALIGNMENT
        if f.type != GGUFValueType.UINT32:
            raise InvalidKVError(
                f"{self.name}: key 'general.alignment' at byte {f.offset:,} is {f.type.name}, "
                f"but loaders require UINT32 (re-convert the file)", offset=f.offset)
        a = f.value
        if a == 0 or a & (a - 1):
            raise InvalidKVError(
                f"{self.name}: general.alignment = {a} at byte {f.offset:,} is not a power of two "
                f"(corrupt metadata; re-convert the file)", offset=f.offset)
        return a

    def tensor_infos(self, n: int, alignment: int) -> list[tuple[str, tuple[int, ...], GGMLQuantizationType, int, int, int]]:
        c, out, seen = self.c, [], {}
        for i in range(n):
            at = c.pos
            self.charge(COST_RECORD, f"tensor #{i}", at)
            name = self.string(f"the name of tensor #{i}", MAX_NAME_BYTES)
            if name in seen:
                raise InvalidTensorInfoError(
                    f"{self.name}: tensor name '{show(name)}' appears twice (tensors #{seen[name]} and "
                    f"#{i}, at byte {at:,}); loaders refuse duplicates (re-convert the file)", offset=at)
            seen[name] = i
            label = f"tensor {show(name)}"
            d_at = c.pos
            n_dims = c.unpack(_U32, f"the dimension count of {label}")
            if n_dims > GGML_MAX_DIMS:
                raise InvalidTensorInfoError(
                    f"{self.name}: {label} has {n_dims:,} dimensions at byte {d_at:,}; ggml allows "
                    f"at most {GGML_MAX_DIMS} (corrupt tensor info; re-download the file)", offset=d_at)
            ne = []
            for j in range(n_dims):
                e_at = c.pos
                d = c.unpack(_I64, f"dimension {j} of {label}")
                if d < 0:
                    raise InvalidTensorInfoError(
                        f"{self.name}: {label} dimension {j} is {d} at byte {e_at:,} (a negative "
                        f"or >= 2^63 size: corrupt tensor info; re-download the file)", offset=e_at)
                ne.append(d)
            ne = tuple(ne)
            n_el = 1
            for d in ne:
                n_el *= d
            if n_el >= 1 << 63:
                raise InvalidTensorInfoError(
                    f"{self.name}: {label} shape {list(ne)} has {n_el:,} elements, more than "
                    f"ggml's int64 can count (corrupt tensor info; re-download the file)", offset=d_at)
            t_at = c.pos
            raw_type = c.unpack(_U32, f"the type of {label}")
            try:
                qtype = GGMLQuantizationType(raw_type)
                block, type_size = GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise InvalidTensorInfoError(
                    f"{self.name}: {label} has ggml type id {raw_type} at byte {t_at:,}, which the "
                    f"gguf package does not know (corrupt, or written by a newer llama.cpp: "
                    f"upgrade gguf)", offset=t_at) from None
            ne0 = ne[0] if ne else 1
            if ne0 % block:
                raise InvalidTensorInfoError(
                    f"{self.name}: {label} is {qtype.name} with rows of {ne0:,} elements, not a "
                    f"multiple of its block size {block} (corrupt tensor info, or a broken "
                    f"quantizer; re-convert)", offset=t_at)
            nbytes = n_el // block * type_size
            o_at = c.pos
            offset = c.unpack(_U64, f"the data offset of {label}")
            if offset % alignment:
                raise InvalidTensorInfoError(
                    f"{self.name}: {label} data offset {offset:,} (at byte {o_at:,}) is not a "
                    f"multiple of the alignment {alignment} (corrupt tensor info; re-download "
                    f"the file)", offset=o_at)
            out.append((name, ne, qtype, offset, nbytes, at))
        return out
