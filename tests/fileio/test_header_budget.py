"""The header's total budget (``header_records.HEADER_BUDGET``): every decoded value charged
before it is decoded, keys and tensors included, and untrusted values never formatted whole.
Whole-process bombs (sparse files, RSS and time) are in tests/redteam/test_header_bombs.py."""
from __future__ import annotations

import pytest

from dflash_gguf.fileio import header_records as hr
from dflash_gguf.fileio.gguf_constants import GGUFValueType as V
from dflash_gguf.fileio.gguf_header import parse_header_bytes
from dflash_gguf.fileio.gguf_kv import describe_kv
from dflash_gguf.fileio.header_errors import LimitError
from dflash_gguf.fileio.types import KV, NumberArray
from tests.fileio.test_gguf_header import ARR, STR, U32, U64, build, kv, s, ti

U8, F32 = 0, 6


def refused(data: bytes) -> LimitError:
    with pytest.raises(LimitError) as e:
        parse_header_bytes(data, "m.gguf")
    assert e.value.exit_code == 6 and "\n" not in str(e.value)
    return e.value


def test_budget_is_shared_by_every_key(monkeypatch):
    # each key alone fits, two fit together; the third one takes the total over
    record = hr.COST_RECORD + 2 * hr.COST_TEXT_BYTE  # a KV named "kN"
    monkeypatch.setattr(hr, "HEADER_BUDGET", 3 * record + 2 * 100 * hr.COST_NUMBER + 10)
    arrays = [kv(f"k{i}", ARR, U32(F32) + U64(100) + bytes(400)) for i in range(3)]
    parse_header_bytes(build(arrays[:2]))
    e = refused(build(arrays))
    count_at = 24 + 2 * len(arrays[0]) + 8 + 2 + 8  # header, two keys, the key 'k2', its types
    assert str(e).startswith(f"m.gguf: the value of key 'k2' at byte {count_at} needs ~3,200 bytes")
    assert e.offset == count_at


@pytest.mark.parametrize("payload, says", [
    # 200 empty arrays inside an array: each one charged COST_NESTED_ARRAY
    (lambda: kv("n", ARR, U32(ARR) + U64(300) + bytes(12 * 300)), "the value of key 'n'"),
    # string values: charged their bytes, COST_TEXT_BYTE each
    (lambda: kv("t", STR, s("x" * 300_000)), "the value of key 't'"),
    # a string array's text, charged after the walk found its end
    (lambda: kv("v", ARR, U32(STR) + U64(2) + s("y" * 600_000) + s("z" * 600_000)),
     "the text of the 2 strings of the value of key 'v'"),
    # a UINT8 array: a tuple slot an item
    (lambda: kv("b", ARR, U32(U8) + U64(200_000) + bytes(200_000)), "the value of key 'b'"),
])
def test_each_kind_of_value_is_charged(monkeypatch, payload, says):
    monkeypatch.setattr(hr, "HEADER_BUDGET", 1 << 20)
    assert says in str(refused(build([payload()])))


def test_keys_and_tensors_are_charged(monkeypatch):
    monkeypatch.setattr(hr, "HEADER_BUDGET", 10 * hr.COST_RECORD)
    assert "m.gguf: key #9 at byte" in str(refused(build([kv(f"k{i}", U8, b"\0") for i in range(12)])))
    assert "m.gguf: tensor #9 at byte" in str(refused(build([], [ti(f"t{i}", (1,)) for i in range(12)])))


def test_show_cuts_before_it_escapes():
    shown = hr.show("\x00" * 5_000_000)
    assert len(shown) == 80 and shown.endswith("…")
    assert hr.show("ab") == "ab" and hr.show("x" * 80) == "x" * 80


def test_messages_never_format_a_value_whole():
    huge = NumberArray(range(1000), V.UINT32, b"")
    nested = KV("k", tuple(huge for _ in range(4)), V.ARRAY, V.ARRAY)
    text = KV("k", "\x01" * 10_000_000, V.STRING)
    for k in (nested, text):
        assert len(describe_kv(k)) < 120
    assert describe_kv(nested).startswith("ARRAY[ARRAY] [[… 1,000 items]")
    js = nested.to_json()["value"]
    assert js == [{"length": 1000, "head": list(range(8))}] * 4


def test_an_unmapped_walk_stops_at_the_budget(monkeypatch):
    # read, not mapped, the walk reads the text it skips: it must stop at the budget, not at the end
    monkeypatch.setattr(hr, "HEADER_BUDGET", 1 << 20)
    monkeypatch.setattr(hr, "_FIRST_READ", 4096)
    items = b"".join(s("w" * 100_000) for _ in range(40))
    reads = []
    real_fill = hr._Cursor.fill
    monkeypatch.setattr(hr._Cursor, "fill", lambda self, end: (reads.append(end), real_fill(self, end)))
    e = refused(build([kv("v", ARR, U32(STR) + U64(40) + items)]))
    assert "the text of the strings of the value of key 'v'" in str(e)
    assert max(reads) < 3 << 20
