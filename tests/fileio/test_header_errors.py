"""fileio/header_errors.py: one class per way a header cannot be trusted, each a GGUFFormatError
(exit 6) carrying the byte offset of the problem. Byte-built headers, offsets worked out by hand."""
from __future__ import annotations

import struct

import pytest

from dflash_gguf.errors import GGUFFormatError
from dflash_gguf.fileio import header_errors as he
from dflash_gguf.fileio.gguf_header import parse_header_bytes


def _s(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def _head(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)  # 24 bytes


def _tensor(name: str, ne: tuple[int, ...], offset: int) -> bytes:
    return _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne) + struct.pack("<IQ", 0, offset)


def _two_tensors_at_offset_0() -> bytes:
    body = _head(2, 0) + _tensor("a", (8,), 0) + _tensor("b", (8,), 0)
    return body + b"\0" * (-len(body) % 32) + b"\0" * 32


CASES = [
    ("not gguf", b"PK\x03\x04" + b"\0" * 60, he.NotGGUFError, 0),
    ("version 1", b"GGUF" + struct.pack("<I", 1) + b"\0" * 16, he.UnsupportedVersionError, 4),
    ("cut magic", b"GGU", he.TruncatedError, 3),  # the offset is the file's size
    ("tensor count", b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0), he.LimitError, 8),
    ("empty key", _head(0, 1) + _s("") + struct.pack("<IB", 0, 1), he.InvalidKVError, 24),
    # tensor "t" starts at 24: 8 + 1 name bytes, then its dimension count at 33
    ("five dims", _head(1, 0) + _tensor("t", (1, 1, 1, 1, 1), 0), he.InvalidTensorInfoError, 33),
    # the second tensor's info starts after the first's: 24 + (8 + 1) + 4 + 8 + 4 + 8 = 57
    ("overlap", _two_tensors_at_offset_0(), he.TensorOverlapError, 57),
]


@pytest.mark.parametrize("what,data,cls,offset", CASES, ids=[c[0] for c in CASES])
def test_each_failure_is_its_own_class_with_its_offset(what, data, cls, offset):
    with pytest.raises(cls) as e:
        parse_header_bytes(data, "m.gguf")
    err = e.value
    assert isinstance(err, he.GGUFHeaderError) and isinstance(err, GGUFFormatError)
    assert err.exit_code == 6 and err.offset == offset
    assert str(err).startswith("m.gguf: ") and "\n" not in str(err)


def test_the_offset_is_optional():
    e = he.InvalidKVError("x")
    assert e.offset is None and str(e) == "x"
    classes = {c for c in vars(he).values() if isinstance(c, type) and issubclass(c, he.GGUFHeaderError)}
    assert len(classes) == 8  # the base and the seven failures above
    assert {c for _, _, c, _ in CASES} | {he.GGUFHeaderError} == classes
