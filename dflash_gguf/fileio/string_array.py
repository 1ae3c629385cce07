"""A GGUF string array (a tokenizer vocabulary) as the header parser returns it."""
from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from itertools import repeat
from typing import Iterator, Sequence

_LEN = struct.Struct("<Q")  # the u64 length before each item
_PREFIX_ITEMS = 1024  # a slice ending below this is read by walking only up to its end


class StringArray(Sequence[str]):
    """A GGUF string array kept as raw bytes and decoded on access.

    Walking a 150k-token vocabulary is needed for bounds checks, but decoding every token
    is not: the raw bytes plus the start of each item make ``index()`` a C-speed search.
    The starts themselves are found on first use: a converter that only copies the array
    (``encoded``) never needs them, and skipping them takes ~30 ms off the header walk of a
    300k-string vocabulary (74 -> ~45 ms).
    """

    __slots__ = ("_raw", "_n", "_box")

    def __init__(self, raw: bytes | memoryview, starts: array | int) -> None:
        """``raw``: the items, each still prefixed by its u64 length, already bounds-checked
        (every length stays inside ``raw``); a read-only view into a mapped file is not copied.
        ``starts``: the byte offset of each item's text inside ``raw``, or just the number of
        items, the offsets then found when first needed."""
        self._raw = raw
        self._n = starts if isinstance(starts, int) else len(starts)
        # A one-item list, shared with the ``exact()`` view: whichever needs the starts first
        # finds them for both.
        self._box: list[array | None] = [None if isinstance(starts, int) else starts]

    @property
    def _starts(self) -> array:
        starts = self._box[0]
        if starts is None:
            starts = self._box[0] = item_starts(self._raw, self._n)
        return starts

    def __len__(self) -> int:
        return self._n

    def item_bytes(self, i: int) -> bytes:
        """Item ``i`` exactly as stored (tokens need not be valid UTF-8)."""
        return self._at(self._starts[i])

    def _at(self, s: int) -> bytes:
        n = _LEN.unpack_from(self._raw, s - 8)[0]
        return bytes(self._raw[s:s + n])

    def raw_items(self) -> list[bytes]:
        """Every item exactly as stored."""
        return [self.item_bytes(i) for i in range(len(self))]

    def encoded(self) -> bytes | memoryview:
        """The items as a GGUF file stores them (each a u64 length, then its bytes): what a
        writer copies to write the same array again, with no per-item work."""
        return self._raw

    def exact(self) -> "ExactStringArray":
        """The same items, each a ``str`` where it is valid UTF-8 and its stored ``bytes``
        where it is not (no U+FFFD stand-ins); no copy of the bytes is made."""
        view = ExactStringArray(self._raw, self._n)
        view._box = self._box
        return view

    def _item(self, i: int) -> str:
        return self._decode(self.item_bytes(i))

    @staticmethod
    def _decode(b: bytes) -> str:
        return b.decode("utf-8", errors="replace")

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            idx = range(*i.indices(len(self)))
            last = max(idx[0], idx[-1]) if idx else -1
            if self._box[0] is None and 0 <= last < _PREFIX_ITEMS:
                # A preview (a JSON head, a message) needs the first few starts, not all of
                # them: ~40 ms saved per 150k-token array, which stays unwalked.
                starts = item_starts(self._raw, last + 1)
                return [self._decode(self._at(starts[j])) for j in idx]
            return [self._item(j) for j in idx]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._item(i)

    def __iter__(self) -> Iterator[str]:
        return (self._item(i) for i in range(len(self)))

    def _bytes(self) -> bytes:
        """The raw items as ``bytes``, for a search or a comparison (a view into a mapped file
        is copied once, the first time one needs it)."""
        raw = self._raw
        if not isinstance(raw, bytes):
            raw = self._raw = bytes(raw)
        return raw

    def index(self, value: str, start: int = 0, stop: int | None = None) -> int:  # type: ignore[override]
        needle = _LEN.pack(len(value.encode())) + value.encode()
        raw = self._bytes()
        pos = raw.find(needle)
        starts = self._starts if pos >= 0 else None
        while pos >= 0:
            j = bisect_left(starts, pos + 8)
            if j < len(starts) and starts[j] == pos + 8 and start <= j and (stop is None or j < stop):
                return j
            pos = raw.find(needle, pos + 1)
        raise ValueError(f"{value[:60]!r} is not in the array")

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        try:
            self.index(value)
        except ValueError:
            return False
        return True

    def same_as(self, other: "StringArray") -> bool:
        """Byte-identical arrays (two well-formed arrays with equal raw bytes are equal)."""
        return len(self) == len(other) and self._bytes() == other._bytes()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringArray):
            return self.same_as(other)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def tolist(self) -> list[str]:
        return list(self)

    def __repr__(self) -> str:
        return f"StringArray({len(self)} items)"


def item_starts(raw: bytes, n: int) -> array:
    """The offset of the text of each of the first ``n`` items in ``raw`` (a bounds-checked
    string array)."""
    starts: list[int] = []
    push, unpack, pos = starts.append, _LEN.unpack_from, 0
    for _ in repeat(None, n):
        ln = unpack(raw, pos)[0]
        pos += 8
        push(pos)
        pos += ln
    return array("q", starts)


class ExactStringArray(StringArray):
    """A ``StringArray`` whose items are ``str``, or ``bytes`` where not valid UTF-8: the values
    a copied tokenizer key must keep (see ``StringArray.exact``)."""

    __slots__ = ()

    @staticmethod
    def _decode(b: bytes) -> str | bytes:  # type: ignore[override]
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return b

    def __repr__(self) -> str:
        return f"ExactStringArray({len(self)} items)"
