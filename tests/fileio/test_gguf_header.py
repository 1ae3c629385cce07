"""The bounds-checked GGUF header reader: one byte-built test per failure, message text asserted."""
from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_gguf.fileio import gguf_header as gh
from dflash_gguf.fileio import header_records
from dflash_gguf.errors import GGUFFormatError, InputError
from dflash_gguf.fileio.gguf_header import parse_header_bytes, read_header
from dflash_gguf.fileio.header_errors import (InvalidKVError, InvalidTensorInfoError, LimitError, NotGGUFError,
                                              TensorOverlapError, TruncatedError, UnsupportedVersionError)
from dflash_gguf.fileio.string_array import StringArray

GUARDS = Path(__file__).resolve().parents[2] / "fixtures" / "guards"
from tests.conftest import GUARD_FIXTURES  # noqa: E402
U32, U64, I64 = (lambda v: struct.pack("<I", v)), (lambda v: struct.pack("<Q", v)), (lambda v: struct.pack("<q", v))
STR, ARR = 8, 9


def s(x: str | bytes) -> bytes:
    b = x.encode() if isinstance(x, str) else x
    return U64(len(b)) + b


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return s(key) + U32(vtype) + payload


def ti(name: str, ne: tuple[int, ...], ttype: int = 0, off: int = 0) -> bytes:
    return s(name) + U32(len(ne)) + b"".join(I64(d) for d in ne) + U32(ttype) + U64(off)


def build(kvs=(), tis=(), data=b"", version=3, n_kv=None, n_t=None, align=32) -> bytes:
    body = (b"GGUF" + U32(version) + U64(len(tis) if n_t is None else n_t)
            + U64(len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + b"".join(tis))
    if tis:
        body += b"\0" * (-len(body) % align)
    return body + data


ARCH = kv("general.architecture", STR, s("llama"))


def err(data: bytes, cls=GGUFFormatError) -> str:
    with pytest.raises(cls) as e:
        parse_header_bytes(data, "m.gguf")
    return str(e.value)


# --- a good file --------------------------------------------------------------------------

def test_matches_gguf_reader_on_every_fixture():
    for path in GUARD_FIXTURES:
        h = read_header(path)
        r = gguf.GGUFReader(path)
        fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
        assert list(h.kv_order) == list(fields)
        for k, f in fields.items():
            ours = h.kv[k].value
            theirs = f.contents()
            if isinstance(ours, StringArray):
                ours = list(ours)
            if isinstance(theirs, float) or (isinstance(theirs, list) and theirs and isinstance(theirs[0], float)):
                np.testing.assert_allclose(ours, theirs)
            else:
                assert (list(ours) if isinstance(ours, tuple) else ours) == theirs, k
        assert [(t.name, t.offset_abs, t.nbytes) for t in h.tensors] == \
               [(t.name, int(t.data_offset), int(t.n_bytes)) for t in r.tensors]
        assert [list(t.shape_ne) for t in h.tensors] == [t.shape.tolist() for t in r.tensors]
        assert h.data_end <= h.file_size


def test_all_thirteen_value_types_and_nesting(tmp_path):
    w = gguf.GGUFWriter(tmp_path / "t.gguf", "llama")
    V = gguf.GGUFValueType
    scalars = {V.UINT8: 200, V.INT8: -5, V.UINT16: 60000, V.INT16: -300, V.UINT32: 4_000_000_000,
               V.INT32: -7, V.FLOAT32: 1.5, V.BOOL: True, V.STRING: "héllo", V.UINT64: 2**63 + 1,
               V.INT64: -2**40, V.FLOAT64: 0.1}
    for t, v in scalars.items():
        w.add_key_value(f"s.{t.name}", v, t)
        if t != V.STRING:
            w.add_key_value(f"a.{t.name}", [v, v], V.ARRAY, sub_type=t)
    w.add_array("a.nested", [[1, 2], [3]])
    w.add_array("a.strings", ["x", "", "yz"])
    w.add_tensor("t", np.zeros(4, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    h = read_header(tmp_path / "t.gguf")
    for t, v in scalars.items():
        assert h.kv[f"s.{t.name}"].type == t
        assert h.get(f"s.{t.name}") == v
        if t != V.STRING:
            assert h.get(f"a.{t.name}") == (v, v) and h.kv[f"a.{t.name}"].sub_type == t
    assert h.get("a.nested") == ((1, 2), (3,)) and h.kv["a.nested"].sub_type == V.ARRAY
    assert list(h.get("a.strings")) == ["x", "", "yz"]


def test_alignment_is_honoured():
    data = build([ARCH, kv("general.alignment", 4, U32(64))], [ti("a", (4,))], data=bytes(16), align=64)
    h = parse_header_bytes(data)
    assert h.alignment == 64 and h.data_offset % 64 == 0 and h.tensors[0].offset_abs == h.data_offset


@pytest.mark.parametrize("mode", ["mapped", "reads", "minimal_reads"])
def test_big_vocab_across_buffer_refills(monkeypatch, tmp_path, mode):
    # Mapped, the walk sees the whole file at once. Read (a file that cannot be mapped), a tiny
    # first read forces the string-array walk through its slow path; with minimal reads (grow
    # the buffer only to the byte asked for) it takes the slow path on every item.
    toks = [f"tok{i}" + "x" * (i % 13) for i in range(3000)]
    w = gguf.GGUFWriter(tmp_path / "v.gguf", "llama")
    w.add_token_list(toks)
    w.add_token_merges([f"{t} {t}" for t in toks[:500]])
    w.add_tensor("t", np.zeros(4, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    monkeypatch.setattr(header_records, "_FIRST_READ", 64)
    fills = []
    real_fill = gh._Cursor.fill

    def fill(self, end):
        fills.append(end)
        if mode == "minimal_reads":
            self.buf += self.f.read(end - len(self.buf))
        else:
            real_fill(self, end)
    monkeypatch.setattr(gh._Cursor, "fill", fill)
    if mode != "mapped":
        monkeypatch.setattr(gh, "_map", lambda fd, size: None)
    h = read_header(tmp_path / "v.gguf")
    tokens = h.get("tokenizer.ggml.tokens")
    # mapped: nothing read, the arrays are views of the mapping; read: many refills, copies
    assert (len(fills) == 0) == (mode == "mapped") and (len(fills) > 500) == (mode == "minimal_reads")
    assert isinstance(tokens.encoded(), memoryview) == (mode == "mapped")
    assert tokens == parse_header_bytes((tmp_path / "v.gguf").read_bytes()).get("tokenizer.ggml.tokens")
    assert list(tokens) == toks and len(h.get("tokenizer.ggml.merges")) == 500
    assert tokens.index("tok2999" + "x" * (2999 % 13)) == 2999
    assert "tok13" in tokens and "tok" not in tokens and "tok1" not in tokens  # a prefix of an item is not an item
    assert tokens[-1] == toks[-1] and tokens[10:12] == toks[10:12]
    assert tokens.item_bytes(5) == toks[5].encode()


@pytest.mark.parametrize("minimal_reads", [False, True])
def test_cut_inside_a_string_array_names_the_item(monkeypatch, minimal_reads):
    # Every cut inside the array, with the walk crossing buffer refills: the error names the item
    # the cut falls in (its length field, or its text), as counted here independently.
    items = [b"x" * (i % 7) for i in range(40)]
    head = build([kv("tok", ARR, U32(STR) + U64(len(items)))])
    data = head + b"".join(s(b) for b in items)
    fields, pos = [], len(head)
    for i, b in enumerate(items):
        fields.append((i, pos, pos + 8, pos + 8 + len(b)))
        pos += 8 + len(b)
    monkeypatch.setattr(header_records, "_FIRST_READ", 16)
    if minimal_reads:
        monkeypatch.setattr(gh._Cursor, "fill", lambda self, end: self.buf.extend(self.f.read(end - len(self.buf))))
    for cut in range(len(head) + 8 * len(items), len(data)):
        i, at, text, end = next(f for f in fields if f[3] > cut)
        want = (f"item {i:,} of the value of key 'tok' needs bytes up to {end:,}" if cut >= text
                else f"the length of item {i:,} of the value of key 'tok' needs bytes up to {text:,}")
        assert err(data[:cut], TruncatedError) == (f"m.gguf: {want} but the file ends at {cut:,} "
                                                   "(truncated download? re-fetch and compare sizes)"), cut
    assert list(parse_header_bytes(data).get("tok")) == [b.decode() for b in items]


# --- where the file is not a GGUF ---------------------------------------------------------

@pytest.mark.parametrize("head, says", [
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\n", "Git LFS pointer"),
    (b"<!DOCTYPE html><html>", "HTML page"),
    (U64(100) + b'{"__metadata__":{}}' + b" " * 90, "safetensors file"),
    (b"PK\x03\x04" + bytes(40), "zip archive"),
    (b"\x00\x01\x02\x03" + bytes(40), "not a GGUF file"),
])
def test_not_gguf_names_what_it_is(head, says):
    msg = err(head, NotGGUFError)
    assert msg.startswith("m.gguf: starts with '") and "instead of the GGUF magic 'GGUF'" in msg and says in msg


def test_empty_file():
    assert err(b"", TruncatedError) == ("m.gguf: the file is 0 bytes, too short for the 4-byte GGUF magic "
                                        "(empty or truncated download; re-fetch it)")


@pytest.mark.parametrize("version, says", [(1, "GGUF v1"), (0x03000000, "big-endian"), (4, "supported versions are 2 and 3")])
def test_versions(version, says):
    msg = err(build([ARCH], version=version), UnsupportedVersionError)
    assert msg.startswith(f"m.gguf: GGUF version {version} at byte 4: ") and says in msg


def test_version_2_is_read():
    assert parse_header_bytes(build([ARCH], version=2)).version == 2


# --- counts and lengths -------------------------------------------------------------------

def test_huge_tensor_count():
    assert err(build([ARCH], n_t=2**63), LimitError) == (
        "m.gguf: the header claims 9,223,372,036,854,775,808 tensors (at byte 8), more than the 1,048,576 "
        "limit (corrupt header; re-download the file)")


def test_kv_count_beyond_the_data_is_truncation():
    msg = err(build([ARCH], n_kv=3), TruncatedError)
    assert msg.startswith("m.gguf: the length of key #1 needs bytes up to ")


def test_string_length_over_cap():
    msg = err(build([kv("general.name", STR, U64(2**62) + b"x")]), LimitError)
    assert msg == ("m.gguf: the value of key 'general.name' claims 4,611,686,018,427,387,904 bytes at byte 48, "
                   "more than the 67,108,864-byte limit (corrupt length field; re-download the file)")


def test_string_length_past_end_names_the_key():
    data = build([kv("general.name", STR, U64(500) + b"abc")])
    assert err(data, TruncatedError) == (
        f"m.gguf: the value of key 'general.name' needs bytes up to {len(data) - 3 + 500:,} but the file ends "
        f"at {len(data):,} (truncated download? re-fetch and compare sizes)")


def test_array_count_over_cap_and_past_end():
    assert "claims 18,446,744,073,709,551,615 items" in err(build([kv("a", ARR, U32(4) + U64(2**64 - 1))]), LimitError)
    msg = err(build([kv("a", ARR, U32(4) + U64(1000) + bytes(8))]), TruncatedError)
    assert "the 1,000 UINT32 items of the value of key 'a' needs bytes up to" in msg


def test_string_array_item_past_end():
    data = build([kv("tok", ARR, U32(STR) + U64(3) + s("ab") + U64(99) + b"x" + U64(0))])
    msg = err(data, TruncatedError)
    assert msg.startswith("m.gguf: item 1 of the value of key 'tok' needs bytes up to")


def test_string_array_item_over_cap():
    msg = err(build([kv("tok", ARR, U32(STR) + U64(2) + s("ab") + U64(2**40) + bytes(8))]), LimitError)
    assert "item 1 of the value of key 'tok' claims 1,099,511,627,776 bytes" in msg


def test_string_array_item_over_cap_inside_the_buffer(monkeypatch):
    # An item that fits in the bytes already read skips the per-item check (the fast path);
    # the check after the walk still names it.
    monkeypatch.setattr(header_records, "MAX_STRING_BYTES", 4)
    msg = err(build([kv("tok", ARR, U32(STR) + U64(3) + s("ab") + s("abcdefgh") + s("c"))]), LimitError)
    assert "item 1 of the value of key 'tok' claims 8 bytes at byte " in msg
    assert "more than the 4-byte limit" in msg
    tokens = parse_header_bytes(build([kv("tok", ARR, U32(STR) + U64(2) + s("ab") + s("cd"))])).get("tok")
    assert list(tokens) == ["ab", "cd"]  # the whole array over the cap, no item over it: fine


def test_nesting_too_deep():
    nested = U32(ARR) + U64(1)
    payload = nested * 5 + U32(4) + U64(0)
    assert "nests arrays deeper than 4 levels" in err(build([kv("n", ARR, payload)]), LimitError)


# --- key/value validity -------------------------------------------------------------------

def test_bad_value_type():
    assert err(build([kv("x", 13, b"")]), InvalidKVError) == (
        "m.gguf: key 'x' has value type 13, not one of the 13 GGUF types 0-12, at byte 33 "
        "(corrupt metadata; re-download or re-convert)")


def test_bad_array_item_type():
    assert "the item type of the value of key 'x' has value type 77" in err(build([kv("x", ARR, U32(77) + U64(0))]))


def test_empty_and_duplicate_keys():
    assert "key #0 at byte 24 is empty" in err(build([kv("", 4, U32(1))]), InvalidKVError)
    msg = err(build([ARCH, kv("general.architecture", STR, s("qwen3"))]), InvalidKVError)
    assert msg == ("m.gguf: key 'general.architecture' appears twice (at bytes 24 and 69); loaders refuse "
                   "duplicate keys (re-convert the file)")


@pytest.mark.parametrize("payload, vtype, says", [
    (U64(32), 10, "is UINT64, but loaders require UINT32"),
    (U32(0), 4, "general.alignment = 0 at byte 24 is not a power of two"),
    (U32(48), 4, "general.alignment = 48 at byte 24 is not a power of two"),
])
def test_bad_alignment(payload, vtype, says):
    assert says in err(build([kv("general.alignment", vtype, payload)]), InvalidKVError)


def test_non_utf8_key_is_recorded_not_fatal():
    h = parse_header_bytes(build([kv(b"gen\xffname", STR, s("x"))]))
    assert "gen\ufffdname" in h.kv and h.non_utf8 == ("key #0 at byte 32",)


# --- tensor infos -------------------------------------------------------------------------

def test_too_many_dims():
    assert "tensor a has 5 dimensions at byte" in err(build([ARCH], [ti("a", (1, 1, 1, 1, 1))]), InvalidTensorInfoError)


def test_negative_dim():
    msg = err(build([ARCH], [ti("a", (4, -1))]), InvalidTensorInfoError)
    assert "tensor a dimension 1 is -1 at byte" in msg and "negative or >= 2^63" in msg


def test_element_overflow():
    assert "more than ggml's int64 can count" in err(build([ARCH], [ti("a", (2**40, 2**40))]), InvalidTensorInfoError)


def test_unknown_type():
    msg = err(build([ARCH], [ti("a", (4,), ttype=99)]), InvalidTensorInfoError)
    assert "tensor a has ggml type id 99" in msg and "upgrade gguf" in msg


def test_row_not_multiple_of_block():
    msg = err(build([ARCH], [ti("w", (16, 2), ttype=8)]), InvalidTensorInfoError)
    assert "tensor w is Q8_0 with rows of 16 elements, not a multiple of its block size 32" in msg


def test_misaligned_offset():
    msg = err(build([ARCH], [ti("a", (4,), off=8)], data=bytes(64)), InvalidTensorInfoError)
    assert "tensor a data offset 8 (at byte" in msg and "not a multiple of the alignment 32" in msg


def test_duplicate_tensor_name():
    msg = err(build([ARCH], [ti("a", (4,)), ti("a", (4,), off=32)], data=bytes(64)), InvalidTensorInfoError)
    assert "tensor name 'a' appears twice (tensors #0 and #1" in msg


def test_overlap():
    data = build([ARCH], [ti("a", (16,)), ti("b", (8,), off=32)], data=bytes(128))
    msg = err(data, TensorOverlapError)
    assert "tensors a (bytes" in msg and "overlap" in msg


def test_data_cut_names_the_tensor_and_size():
    data = build([ARCH], [ti("blk.0.attn_q.weight", (64, 64))], data=bytes(100))
    start = len(data) - 100
    assert err(data, TruncatedError) == (
        f"m.gguf: tensor blk.0.attn_q.weight needs bytes up to {start + 64 * 64 * 4:,} but the file ends at "
        f"{len(data):,} (truncated download? re-fetch and compare sizes)")


def test_offset_far_past_the_end_mentions_a_corrupt_offset():
    msg = err(build([ARCH], [ti("a", (4,), off=2**40)], data=bytes(16)), TruncatedError)
    assert "or a corrupt offset" in msg


def test_cut_anywhere_in_a_fixture():
    # Every byte of the header (KV section, tensor infos, padding), every 7th of the data.
    data = (GUARDS / "qwen3-8b.gguf").read_bytes()
    h = parse_header_bytes(data)
    for cut in [*range(h.data_offset), *range(h.data_offset, h.data_end, 7)]:
        with pytest.raises(TruncatedError) as e:
            parse_header_bytes(data[:cut], "m.gguf")
        assert e.value.offset == cut
        assert f"{cut:,}" in str(e.value)
    # cutting only the final padding is harmless: every tensor byte is still there
    parse_header_bytes(data[:h.data_end])


# --- files --------------------------------------------------------------------------------

def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_header(tmp_path / "nope.gguf")
    with pytest.raises(InputError, match="is a directory"):
        read_header(tmp_path)


def test_errors_carry_exit_code_6():
    with pytest.raises(GGUFFormatError) as e:
        parse_header_bytes(b"GGU")
    assert e.value.exit_code == 6
