"""StringArray: stored bytes kept, items decoded on access; the exact view keeps invalid UTF-8 as bytes."""
from __future__ import annotations

import struct
from array import array

from dflash_gguf.fileio.string_array import ExactStringArray, StringArray

ITEMS = [b"<unk>", "b\ufffdc".encode(), b"\xff\xfe-raw", b"", "\u00e9".encode()]


def make(items: list[bytes]) -> StringArray:
    raw, starts = b"", array("q")
    for b in items:
        raw += struct.pack("<Q", len(b))
        starts.append(len(raw))
        raw += b
    return StringArray(raw, starts)


def test_encoded_is_the_stored_array_body():
    a = make(ITEMS)
    assert a.encoded() == b"".join(struct.pack("<Q", len(b)) + b for b in ITEMS)


def test_exact_items_are_str_or_the_invalid_bytes():
    a = make(ITEMS)
    e = a.exact()
    assert isinstance(e, ExactStringArray) and isinstance(e, StringArray) and len(e) == len(a)
    assert list(e) == ["<unk>", "b\ufffdc", b"\xff\xfe-raw", "", "\u00e9"]
    assert list(a)[2] == "\ufffd\ufffd-raw"  # the plain view replaces what it cannot decode
    assert e[1:3] == ["b\ufffdc", b"\xff\xfe-raw"] and e[-1] == "\u00e9"
    assert e.encoded() == a.encoded() and e.same_as(a)  # a view: the same bytes, not a copy
    assert e.index("\u00e9") == 4 and "<unk>" in e


def test_starts_found_on_first_use_equal_the_given_ones():
    eager = make(ITEMS)
    lazy = StringArray(eager.encoded(), len(ITEMS))
    assert len(lazy) == len(ITEMS) and lazy.encoded() == eager.encoded()
    view = lazy.exact()  # made before the starts are found: it shares them once either finds them
    assert view[2] == b"\xff\xfe-raw" and list(lazy) == list(eager)
    assert lazy.index("\u00e9") == 4 and "" in lazy and "-raw" not in lazy
    assert StringArray(b"", 0).tolist() == [] and "x" not in StringArray(b"", 0)


def test_a_short_slice_walks_only_up_to_its_end():
    # 3,000 items, one of them invalid UTF-8: the JSON head of a vocabulary (value[:8]) must not
    # find all 3,000 starts, and must give the items a full walk gives.
    items = [f"tok{i}".encode() for i in range(3000)]
    items[5] = b"\xff\xfe-raw"
    full = make(items)
    for view in (lambda a: a, lambda a: a.exact()):
        lazy = view(StringArray(full.encoded(), len(items)))
        for sl in (slice(0, 8), slice(2, 7, 2), slice(6, None, -1), slice(0, 0), slice(1000, 1023)):
            assert lazy[sl] == view(full)[sl], sl
        assert lazy._box[0] is None  # nothing cached: the prefix walks were local
        assert lazy[2990:] == view(full)[2990:]  # past the prefix limit: one full walk, kept
        assert lazy._box[0] is not None
