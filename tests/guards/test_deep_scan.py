"""`check --deep`: NaN/inf, all-zero tensors and bad quantization scales in the tensor data."""
from __future__ import annotations

import json
import struct

import gguf
import numpy as np
import pytest

from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.guards.run import run_checks
from dflash_gguf.quants.ftypes import FTYPE_IDS
from tests.guards.conftest import Q, codes, write


def _q8_with_bad_scale(block: int, value: int) -> np.ndarray:
    raw = gguf.quantize(np.ones((4, 64), np.float32), Q.Q8_0)
    flat = raw.reshape(-1, 34).copy()
    flat[block, 0:2] = np.frombuffer(struct.pack("<H", value), np.uint8)
    return flat.reshape(raw.shape)


def test_deep_finds_nan_inf_zero_and_bad_scales(cli, tmp_path):
    f32 = np.ones(64, np.float32)
    f32[[3, 9]] = np.nan
    f32[10] = np.inf
    f16 = np.ones(64, np.float16)
    f16[5] = np.inf
    bf16 = np.zeros((2, 64), np.uint8)
    bf16[0, 0:2] = np.frombuffer(struct.pack("<H", 0x7FC0), np.uint8)  # BF16 NaN
    bf16[1, 2] = 1
    q4k = np.zeros((1, 144), np.uint8)
    q4k[0, 0] = 1
    q4k[0, 2:4] = np.frombuffer(struct.pack("<H", 0x7E00), np.uint8)  # dmin = NaN
    p = write(tmp_path / "m.gguf", [
        ("f32", f32, None), ("f16", f16, None), ("bf16", bf16, Q.BF16), ("zero", np.zeros(32, np.float32), None),
        ("q8", _q8_with_bad_scale(5, 0x7C00), Q.Q8_0), ("q4k", q4k, Q.Q4_K),
        ("q8ok", gguf.quantize(np.ones((2, 32), np.float32), Q.Q8_0), Q.Q8_0),
    ])
    assert cli("check", p)[0] == 0  # header-only sees nothing wrong
    rc, out, _ = cli("check", p, "--deep", "--json")
    env = json.loads(out)
    (doc,) = env["payload"]["files"]
    assert rc == env["exit_code"] == doc["exit_code"] == 12 and doc["deep"] and doc["summary"]["bytes_scanned"] == sum(t.nbytes for t in read_header(p).tensors)
    msgs = {(f["code"], f["where"]): f["message"] for f in doc["findings"]}
    assert msgs[("nan-inf", "tensor f32")].startswith("tensor f32 (F32) has 2 NaN and 1 inf values (first at element 3)")
    assert "has 0 NaN and 1 inf values (first at element 5)" in msgs[("nan-inf", "tensor f16")]
    assert "has 1 NaN and 0 inf values (first at element 0)" in msgs[("nan-inf", "tensor bf16")]
    assert msgs[("bad-quant-scale", "tensor q8")].startswith("tensor q8 (Q8_0): 1 of 8 blocks have an inf/NaN scale (first at block 5)")
    assert "1 of 1 blocks" in msgs[("bad-quant-scale", "tensor q4k")]
    assert ("all-zero", "tensor zero") in msgs
    assert not any(w == "tensor q8ok" for _, w in msgs)
    assert {f["category"] for f in doc["findings"]} == {"data"}
    assert {(f["rule_id"], f["where"]): f["message"] for f in env["findings"]} == msgs  # the envelope's, the same


@pytest.mark.parametrize("qtype, scale_at", [(Q.Q6_K, 208), (Q.Q2_K, 82), (Q.Q3_K, 108), (Q.IQ4_XS, 0), (Q.TQ2_0, 64)])
def test_deep_scale_positions(tmp_path, qtype, scale_at):
    _, tsize = gguf.GGML_QUANT_SIZES[qtype]
    raw = np.zeros((1, tsize), np.uint8)
    raw[0, scale_at:scale_at + 2] = np.frombuffer(struct.pack("<H", 0xFC00), np.uint8)  # -inf
    r = run_checks(write(tmp_path / "m.gguf", [("w", raw, qtype)]), deep=True)
    assert codes(r) == {"bad-quant-scale"}


def test_deep_progress_reports_every_byte(tmp_path):
    p = write(tmp_path / "m.gguf", [("a", np.ones((64, 64), np.float32), None), ("b", np.ones(8, np.float16), None)])
    seen = []
    run_checks(p, deep=True, progress=seen.append)
    assert sum(seen) == 64 * 64 * 4 + 16


def _planted(t, ts: int):
    """(name, one-row raw bytes) of type ``t``: an inf and a NaN at each 2-byte position of a zero
    block (every fp16 field of ggml's blocks is 2-aligned), or at two values of a row of ones."""
    floats = {Q.F32: (np.uint32, 0x3F800000, 0x7F800000, 0xFFC00000), Q.F16: (np.uint16, 0x3C00, 0x7C00, 0xFE00),
              Q.BF16: (np.uint16, 0x3F80, 0x7F80, 0xFFC0)}  # dtype, 1.0, +inf, -NaN
    if t in floats:
        dtype, one, *bad = floats[t]
        for bits in bad:
            for i in (0, 5):
                row = np.full(8, one, dtype)
                row[i] = bits
                yield f"{t.name}.{i}.{bits:x}", row.view(np.uint8).reshape(1, -1)
        return
    for bits in (0x7C00, 0xFE00):
        for at in range(0, ts, 2):
            raw = np.zeros((1, ts), np.uint8)
            raw[0, at:at + 2] = np.frombuffer(struct.pack("<H", bits), np.uint8)
            yield f"{t.name}.{at}.{bits:x}", raw


def test_deep_rejects_exactly_what_ggml_validates_away(tmp_path):
    """For every type quantize writes, against llama.cpp's own ggml_validate_row_data (the live
    libggml-base; skipped where it is not built): --deep reports a bad scale or a NaN/inf value
    on exactly the planted tensors ggml refuses to load."""
    import ctypes

    from dflash_gguf.quants import QUANTIZE_TYPES
    from tests.quants.test_quants import _ggml_base

    lib = _ggml_base()
    lib.ggml_validate_row_data.restype = ctypes.c_bool
    lib.ggml_validate_row_data.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    tensors, refused = [], set()
    for t in sorted(QUANTIZE_TYPES):
        for name, raw in _planted(t, gguf.GGML_QUANT_SIZES[t][1]):
            tensors.append((name, raw, t))
            if not lib.ggml_validate_row_data(int(t), raw.ctypes.data, raw.size):
                refused.add(name)
    r = run_checks(write(tmp_path / "m.gguf", tensors), deep=True)
    flagged = {f.where.removeprefix("tensor ") for f in r.findings if f.code in ("bad-quant-scale", "nan-inf")}
    assert codes(r) == {"bad-quant-scale", "nan-inf"} and flagged == refused
    assert {n.split(".")[0] for n in refused} == {t.name for t in QUANTIZE_TYPES}  # each type has something to refuse


@pytest.mark.parametrize("ftype", list(FTYPE_IDS))
def test_deep_passes_every_quantize_file_type(quantized_drafter, ftype):
    p = quantized_drafter(ftype)
    r = run_checks(p, deep=True)
    assert not r.findings, [(f.code, f.message) for f in r.findings]
    assert r.deep and r.bytes_scanned == sum(t.nbytes for t in read_header(p).tensors)
