"""Typed access to metadata keys (fileio/gguf_kv.py): each wrong type, range or absence is one
GGUFFormatError naming the key."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
from gguf import GGUFValueType as V

from dflash_gguf.errors import GGUFFormatError
from dflash_gguf.fileio.gguf_kv import (I32_MAX, U32_MAX, bad_kv, describe_kv, get_bool, get_bools, get_float, get_int,
                                        get_ints, get_str)
from dflash_gguf.fileio.types import KV


def test_any_integer_width_is_read_within_the_bounds():
    for vtype in (V.UINT8, V.INT16, V.UINT32, V.INT64):
        assert get_int({"k": KV("k", 3, vtype)}, "k", None) == 3
    assert get_int({"k": KV("k", U32_MAX, V.UINT64)}, "k", None) == U32_MAX
    with pytest.raises(GGUFFormatError, match=r"an integer in \[0, 4,294,967,295\]"):
        get_int({"k": KV("k", U32_MAX + 1, V.UINT64)}, "k", None)
    with pytest.raises(GGUFFormatError, match=r"an integer in \[1, 8\]"):
        get_int({"k": KV("k", 0, V.UINT32)}, "k", None, lo=1, hi=8)


def test_integer_arrays_are_non_empty_and_within_the_bounds():
    assert get_ints({"k": KV("k", (0, I32_MAX), V.ARRAY, V.INT32)}, "k", None) == (0, I32_MAX)
    with pytest.raises(GGUFFormatError, match="a non-empty array of integers"):
        get_ints({"k": KV("k", (), V.ARRAY, V.INT32)}, "k", None)
    with pytest.raises(GGUFFormatError, match="an array of integers in"):
        get_ints({"k": KV("k", (1, -1), V.ARRAY, V.INT32)}, "k", None)
    with pytest.raises(GGUFFormatError, match="an array of integers"):  # a bool is not an integer here
        get_ints({"k": KV("k", (True,), V.ARRAY, V.INT32)}, "k", None)


def test_numbers_are_finite():
    assert get_float({"k": KV("k", 2, V.UINT32)}, "k", None, positive=True) == 2.0
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(GGUFFormatError, match="a finite number"):
            get_float({"k": KV("k", bad, V.FLOAT64)}, "k", None)
    with pytest.raises(GGUFFormatError, match="a number"):
        get_float({"k": KV("k", True, V.BOOL)}, "k", None)


def test_scalars_of_the_wrong_type_are_refused():
    with pytest.raises(GGUFFormatError, match="a STRING"):
        get_str({"k": KV("k", b"raw", V.STRING)}, "k", None)  # undecoded bytes are not a str
    with pytest.raises(GGUFFormatError, match="a BOOL"):
        get_bool({"k": KV("k", 1, V.UINT8)}, "k", None)
    with pytest.raises(GGUFFormatError, match="a non-empty array of BOOL"):
        get_bools({"k": KV("k", (), V.ARRAY, V.BOOL)}, "k", None)


def test_consumed_records_only_keys_that_are_present():
    kvs, used = {"a": KV("a", 1, V.UINT32), "s": KV("s", "x", V.STRING)}, set()
    get_int(kvs, "a", used)
    get_str(kvs, "s", used)
    assert get_bool(kvs, "absent", used, required=False) is None
    assert used == {"a", "s"}


def test_a_bad_key_names_file_key_byte_type_and_value():
    kv = KV("general.x", "\x01hello", V.STRING, offset=1234)
    msg = str(bad_kv("m.gguf", kv, "an integer"))
    assert msg.startswith("m.gguf: key general.x (at byte 1,234) has unexpected types: it is STRING")
    assert "\\x01" in msg and "an integer there" in msg
    assert describe_kv(KV("k", (1, 2), V.ARRAY, V.UINT8)) == "ARRAY[UINT8] [1, 2]"


def test_reading_keys_does_not_load_the_tensor_reader():
    # The two modules are separate concerns: parsing keys needs no tensor I/O.
    code = ("import sys, dflash_gguf.fileio.gguf_kv\n"
            "assert 'dflash_gguf.fileio.gguf_reader' not in sys.modules and 'numpy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_typed_accessors():
    kvs = {"i": KV("i", 7, V.INT64), "f": KV("f", 0.5, V.FLOAT32), "n": KV("n", math.nan, V.FLOAT32),
           "b": KV("b", True, V.BOOL), "s": KV("s", "yarn", V.STRING), "bb": KV("bb", (True, False), V.ARRAY, V.BOOL),
           "ii": KV("ii", (3,), V.ARRAY, V.UINT8), "z": KV("z", -0.0, V.FLOAT32)}
    used: set[str] = set()
    assert get_int(kvs, "i", used) == 7 and used == {"i"}
    assert get_int(kvs, "missing", used, required=False) is None
    assert get_float(kvs, "f", None) == 0.5 and get_float(kvs, "i", None) == 7.0
    assert get_bool(kvs, "b", None) is True and get_str(kvs, "s", None) == "yarn"
    assert get_bools(kvs, "bb", None) == (True, False) and get_ints(kvs, "ii", None) == (3,)
    for fn, key in ((get_float, "n"), (get_bool, "i"), (get_str, "i"), (get_bools, "ii"), (get_ints, "bb"),
                    (get_int, "f"), (get_int, "b")):
        with pytest.raises(GGUFFormatError, match=f"key {key} has unexpected types"):
            fn(kvs, key, None, path="")
    with pytest.raises(GGUFFormatError, match="a positive finite number"):
        get_float(kvs, "z", None, positive=True)
    with pytest.raises(GGUFFormatError, match="required key nope is missing"):
        get_int(kvs, "nope", None, path="p")
