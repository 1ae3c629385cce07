"""Shared by the guards tests: the fixture files, a small GGUF writer, a key/tensor rewriter
and the drafters the converter makes in every format."""
from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_gguf.fileio.gguf_header import read_header
from tests.conftest import DRAFTERS, FIXTURES, TARGETS, optional_packages

GUARDS = FIXTURES / "guards"
Q = gguf.GGMLQuantizationType
V = gguf.GGUFValueType
QWEN = GUARDS / "qwen3-8b.gguf"
DRAFTER = GUARDS / "qwen3-8b-dflash.gguf"
SHARD1 = GUARDS / "qwen3-8b-sharded-00001-of-00002.gguf"
SHARD2 = GUARDS / "qwen3-8b-sharded-00002-of-00002.gguf"
FORMATS = ("llama.cpp", "llama.cpp-pr22105", "dflash-draft", "lucebox")


def write(path: Path, tensors, kvs=None, arch="llama") -> Path:
    """A small GGUF; ``tensors`` = [(name, array, raw_dtype or None)]."""
    w = gguf.GGUFWriter(path, arch)
    w.add_name("Test 1B Instruct")
    for k, v in (kvs or {}).items():
        if isinstance(v, list):
            w.add_array(k, v)
        else:
            w.add_string(k, v)
    for name, arr, raw in tensors:
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


def patch_u64(data: bytearray, pos: int, value: int) -> None:
    data[pos:pos + 8] = struct.pack("<Q", value)


def offset_field(h, t) -> int:
    return t.info_offset + 8 + len(t.name.encode()) + 4 + 8 * len(t.shape_ne) + 4


def rewrite(src: Path, dst: Path, *, drop: tuple[str, ...] = (), set_kv: dict | None = None,
            drop_tensors: tuple[str, ...] = (), add_tensors: tuple[tuple[str, np.ndarray], ...] = ()) -> Path:
    """Copy a GGUF through gguf-py's writer with some keys / tensors changed (a real file, not a patch)."""
    h = read_header(src)
    w = gguf.GGUFWriter(dst, h.arch)
    for k in h.kv_order:
        f = h.kv[k]
        if k == "general.architecture" or k in drop or k in (set_kv or {}):
            continue
        value = list(f.value) if f.type == V.ARRAY else f.value
        w.add_key_value(k, value, f.type, sub_type=f.sub_type)
    for k, (value, vtype, sub) in (set_kv or {}).items():
        w.add_key_value(k, value, vtype, sub_type=sub)
    raw = src.read_bytes()
    for t in h.tensors:
        if t.name in drop_tensors:
            continue
        b = np.frombuffer(raw[t.offset_abs:t.end], np.uint8)
        w.add_tensor(t.name, b.reshape(*reversed(t.shape_ne[1:]), -1), raw_dtype=t.ggml_type)
    for name, arr in add_tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return dst


@pytest.fixture(scope="session")  # one conversion per format for all modules
def drafters(tmp_path_factory):
    from dflash_gguf.convert import convert

    d = tmp_path_factory.mktemp("drafters")
    out = {}
    for fmt in FORMATS:
        out[fmt] = d / f"{fmt}.gguf"
        with optional_packages():  # the target's tokenizer.json needs the [tokenizers] extra
            convert(DRAFTERS / "qwen3-nested", out[fmt], format=fmt, target_dir=TARGETS / "qwen3-tiny")
    # The target those drafters fit: 5 layers, hidden 64, the same vocabulary, RoPE 1e7.
    h = read_header(out["llama.cpp"])
    w = gguf.GGUFWriter(d / "target.gguf", "qwen3")
    w.add_name("Qwen3 Tiny")
    w.add_basename("Qwen3")
    for k, v in (("qwen3.block_count", 5), ("qwen3.embedding_length", 64)):
        w.add_uint32(k, v)
    w.add_float32("qwen3.rope.freq_base", h.get("dflash.rope.freq_base"))
    for k in h.kv_order:
        if k.startswith("tokenizer.") and k != "tokenizer.ggml.mask_token_id":
            f = h.kv[k]
            w.add_key_value(k, list(f.value) if f.sub_type is not None else f.value, f.type, sub_type=f.sub_type)
    w.add_tensor("token_embd.weight", np.zeros((4, 64), np.float16))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    out["target"] = d / "target.gguf"
    return out


def assert_defect(cli, path, code: str, says: str) -> None:
    """``path`` has a drafter finding ``code`` whose message contains ``says``, and ``check``
    exits 12 exactly when some finding is an error."""
    from dflash_gguf.guards.run import run_checks

    r = run_checks(path)
    found = [f for f in r.findings if f.code == code]
    assert found and any(says in f.message for f in found), [f.message for f in r.findings]
    assert all(f.category == "drafter" for f in found)
    expected = 12 if any(f.severity.value == "error" for f in r.findings) else 0
    assert cli("check", path)[0] == expected
