"""compare-weights: every fixture x format x outtype compared back, planted faults caught and
named, GGUF-vs-GGUF, thresholds, streaming invariants and the CLI's exit codes / JSON.

Faulty GGUFs are real files, re-written with gguf-py's own GGUFReader / GGUFWriter (not our
writer, so a bug in ours cannot hide a fault).
"""
from __future__ import annotations

import json
import re

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType, GGUFWriter
from gguf import GGMLQuantizationType as Q

from dflash_gguf.compare import api as cmp
from dflash_gguf.compare import compare_ggufs, compare_weights, parse_tolerances
from dflash_gguf.convert import convert
from dflash_gguf.errors import UsageError
from dflash_gguf.formats import FORMATS
from dflash_gguf.fileio.safetensors import read_inventory, to_f32

from tests.conftest import DRAFTERS, TARGETS

QWEN_DIR = TARGETS / "qwen3-tiny"
LLAMA_GGUF = TARGETS / "llama-tiny.gguf"
TARGET = {
    "qwen3-flat": {"target_dir": QWEN_DIR},
    "qwen3-nested": {"target_dir": QWEN_DIR},
    "qwen3-dflash2": {"target_dir": QWEN_DIR},
    "gemma-style": {"target_gguf": LLAMA_GGUF},
}
OUTTYPES = ("auto", "f32", "f16", "bf16", "q8_0", "q4_k_m")
SUMMARY = re.compile(r"^(\d+) tensors: (\d+) bit-identical, (\d+) within tolerance, (\d+) out of tolerance, "
                     r"(\d+) missing(, (\d+) extra)?$")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(drafter, format, outtype) -> path of a GGUF converted by our library (cached per module)."""
    root = tmp_path_factory.mktemp("compare")
    cache: dict[tuple[str, str, str], object] = {}

    def get(drafter: str, fmt: str = "llama.cpp", outtype: str = "auto"):
        key = (drafter, fmt, outtype)
        if key not in cache:
            out = root / f"{drafter}-{fmt}-{outtype}.gguf"
            target = {} if fmt == "lucebox" else TARGET[drafter]
            convert(DRAFTERS / drafter, out, format=fmt, outtype=outtype, **target)
            cache[key] = out
        return cache[key]

    return get


def rewrite(src, dst, edit=lambda name, typ, shape, data: [(name, typ, shape, data)]):
    """Copy a GGUF with gguf-py, passing each tensor through ``edit(name, type, shape (torch
    order), flat uint8 bytes) -> [(name, type, shape, bytes), ...]`` (empty list = drop it)."""
    r = GGUFReader(src)
    w = GGUFWriter(dst, str(r.fields["general.architecture"].contents()))
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), f.types[0], sub_type=f.types[1])
        else:
            w.add_key_value(key, f.contents(), f.types[0])
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        data = np.asarray(t.data).view(np.uint8).reshape(-1).copy()
        for name, typ, shp, raw in edit(t.name, t.tensor_type, shape, data):
            bs, ts = GGML_QUANT_SIZES[typ]
            w.add_tensor(name, raw.reshape(*shp[:-1], shp[-1] // bs * ts), raw_dtype=typ)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def tensor_bytes(path):
    return {t.name: np.asarray(t.data).view(np.uint8).reshape(-1).copy() for t in GGUFReader(path).tensors}


def by_name(report):
    return {t.name: t for t in report.tensors}


def failing(report):
    return {t.name: t for t in report.tensors if not t.passed}


# --- every fixture x format x outtype, compared back ------------------------------------------
CASES = [(d, f, o) for d in TARGET for f in FORMATS for o in OUTTYPES
         if not (d == "qwen3-dflash2" and f != "llama.cpp")]  # DFlash2 loads only in mainline


@pytest.mark.parametrize("drafter,fmt,outtype", CASES)
def test_converted_files_are_bit_identical(converted, drafter, fmt, outtype):
    path = converted(drafter, fmt, outtype)
    r = compare_weights(DRAFTERS / drafter, path)
    n_gguf = len(GGUFReader(path).tensors)
    assert r.passed and r.format == fmt
    assert len(r.tensors) == n_gguf
    # our converter writes exactly ggml's encoding: every tensor is bit-identical
    assert r.counts["bit-identical"] == n_gguf, [(t.name, t.status, t.detail) for t in r.tensors if not t.passed]
    m = SUMMARY.match(r.summary)
    assert m and m.groups()[:5] == (str(n_gguf), str(n_gguf), "0", "0", "0")
    types = {t.type for t in r.tensors}
    for t in r.tensors:
        assert t.gguf_shape == t.shape and t.ne == list(reversed(t.shape))
        if t.type in ("F32", "BF16") or (t.type == "F16" and outtype != "f16"):
            assert t.rel_rms == 0 and t.max_abs == 0
        if t.type not in ("F32", "BF16", "F16"):  # quantized: a real error, equal to ggml's own
            assert 0 < t.rel_rms <= t.limit and t.expected_rel_rms == pytest.approx(t.rel_rms)
            assert t.deviation_from_ggml == 0 and t.bytes_differing == 0
            assert t.rel_rms <= cmp.BANDS[t.type].rel_rms  # the bands hold on the fixtures
            assert t.max_abs_index is not None and len(t.max_abs_index) == len(t.shape)
    if outtype == "q4_k_m":
        assert {"Q4_K", "Q5_0"} <= types or {"Q5_0"} <= types
    if outtype == "q8_0":
        assert "Q8_0" in types


def test_f16_from_bf16_is_exact_or_within_an_ulp(converted):
    r = compare_weights(DRAFTERS / "qwen3-flat", converted("qwen3-flat", "lucebox", "f16"))
    f16 = [t for t in r.tensors if t.type == "F16"]
    assert f16 and all(t.status == "bit-identical" and t.rel_rms <= 2.0 ** -11 for t in f16)


# --- planted faults: caught, and named -----------------------------------------------------------
def test_corrupted_q8_0_bytes(converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "q8_0")

    def corrupt(name, typ, shape, data):
        if name == "blk.0.ffn_up.weight":
            data[1000:1008] = np.random.default_rng(0).integers(0, 256, 8, dtype=np.uint8)
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "bad.gguf", corrupt))
    bad = failing(r)
    assert list(bad) == ["blk.0.ffn_up.weight"] and not r.passed
    t = bad["blk.0.ffn_up.weight"]
    assert t.status == "out" and "bad-blocks" in t.flags
    assert t.bytes_differing == 8 and t.deviation_from_ggml > 0
    # Q8_0 rows of 64 values are 68 bytes: byte 1000 is in row 14
    assert t.max_abs_index[0] == 14
    assert "[14, " in t.detail


def test_single_flipped_bit_in_a_quant_is_caught(converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "q8_0")

    def flip(name, typ, shape, data):
        if name == "blk.1.attn_q.weight":
            data[5 * 34 + 2 + 7] ^= 0x80  # block 5, quant 7: sign bit of an int8
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "flip.gguf", flip))
    t = by_name(r)["blk.1.attn_q.weight"]
    assert t.status == "out" and "bad-blocks" in t.flags and t.bytes_differing == 1
    assert t.max_abs_index == (2, 32 + 7)  # block 5 of 64-wide rows = row 2, second block
    assert len(failing(r)) == 1


@pytest.mark.parametrize("outtype,tensor,flag", [("q4_k_m", "fc.weight", "bad-blocks"),
                                                 ("auto", "blk.0.attn_output.weight", "bad-values")])
def test_corrupted_bytes_other_types(converted, tmp_path, outtype, tensor, flag):
    src = converted("qwen3-flat", "llama.cpp", outtype)

    def corrupt(name, typ, shape, data):
        if name == tensor:
            data[len(data) // 2: len(data) // 2 + 6] ^= 0xFF
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "bad.gguf", corrupt))
    assert list(failing(r)) == [tensor]
    assert flag in by_name(r)[tensor].flags and "uncorrelated" not in by_name(r)[tensor].flags


def test_huge_corrupted_scale_is_a_bad_block_not_a_different_checkpoint(converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "q8_0")

    def edit(name, typ, shape, data):
        if name == "fc.weight":
            data[34 * 17: 34 * 17 + 2] = np.array([0xFF, 0x7B], dtype=np.uint8)  # fp16 65504: block 17
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "s.gguf", edit))
    t = by_name(r)["fc.weight"]
    assert list(failing(r)) == ["fc.weight"] and "bad-blocks" in t.flags
    assert not {"uncorrelated", "transposed"} & set(t.flags) and not any(f.startswith("scaled") for f in t.flags)
    assert t.max_abs_index[0] == 2 and 32 <= t.max_abs_index[1] < 64  # 8 blocks per 256-wide row
    assert not r.notes


@pytest.mark.parametrize("outtype", ["auto", "q8_0"])
def test_swapped_tensors_are_named(converted, tmp_path, outtype):
    src = converted("qwen3-flat", "llama.cpp", outtype)
    orig = tensor_bytes(src)
    swap = {"blk.0.attn_k.weight": "blk.0.attn_v.weight", "blk.0.attn_v.weight": "blk.0.attn_k.weight"}

    def edit(name, typ, shape, data):
        return [(name, typ, shape, orig[swap[name]] if name in swap else data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "swap.gguf", edit))
    bad = failing(r)
    assert set(bad) == set(swap)
    assert "swapped-with:layers.0.self_attn.v_proj.weight" in bad["blk.0.attn_k.weight"].flags
    assert "swapped-with:layers.0.self_attn.k_proj.weight" in bad["blk.0.attn_v.weight"].flags
    assert "holds the values of layers.0.self_attn.v_proj.weight" in bad["blk.0.attn_k.weight"].detail


def _transpose_bf16(data, shape):
    return np.ascontiguousarray(data.view(np.uint16).reshape(shape).T).view(np.uint8).reshape(-1)


def test_transposed_square_and_rectangular(converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "auto")  # bf16: transposing the bytes is exact

    def edit(name, typ, shape, data):
        if name == "blk.0.attn_q.weight":  # 64x64: same shape, transposed data
            return [(name, typ, shape, _transpose_bf16(data, shape))]
        if name == "blk.0.ffn_gate.weight":  # 256x64 written as its transpose
            return [(name, typ, shape[::-1], _transpose_bf16(data, shape))]
        if name == "blk.0.ffn_up.weight":  # data untouched, ne written in torch order
            return [(name, typ, shape[::-1], data)]
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "t.gguf", edit))
    bad = failing(r)
    assert set(bad) == {"blk.0.attn_q.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"}
    assert bad["blk.0.attn_q.weight"].status == "out" and "transposed" in bad["blk.0.attn_q.weight"].flags
    gate = bad["blk.0.ffn_gate.weight"]
    assert gate.status == "shape-mismatch" and "transposed" in gate.flags
    assert gate.shape == (256, 64) and gate.gguf_shape == (64, 256) and gate.ne == [256, 64]
    up = bad["blk.0.ffn_up.weight"]
    assert up.status == "shape-mismatch" and "shape-convention" in up.flags and "transposed" not in up.flags


def test_transposed_quantized_square(converted, tmp_path):
    from dflash_gguf.quants import quantize

    src = converted("qwen3-flat", "llama.cpp", "q8_0")
    inv = {t.name: t for t in read_inventory(DRAFTERS / "qwen3-flat")}

    def edit(name, typ, shape, data):
        if name == "blk.1.attn_output.weight":
            x = to_f32(inv["layers.1.self_attn.o_proj.weight"])
            data = quantize(np.ascontiguousarray(x.T), typ).reshape(-1)
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "t.gguf", edit))
    assert list(failing(r)) == ["blk.1.attn_output.weight"]
    assert "transposed" in by_name(r)["blk.1.attn_output.weight"].flags


def test_missing_and_extra(converted, tmp_path):
    src = converted("qwen3-flat", "dflash-draft", "q8_0")

    def edit(name, typ, shape, data):
        if name == "blk.1.attn_output.weight":
            return []
        out = [(name, typ, shape, data)]
        if name == "output_norm.weight":
            out.append(("blk.0.bogus.weight", typ, shape, data))
        return out

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "m.gguf", edit))
    bad = failing(r)
    assert set(bad) == {"blk.1.attn_output.weight", "blk.0.bogus.weight"}
    miss = bad["blk.1.attn_output.weight"]
    assert miss.status == "missing" and miss.source == "layers.1.self_attn.o_proj.weight"
    assert bad["blk.0.bogus.weight"].status == "extra"
    assert r.counts["missing"] == 1 and r.counts["extra"] == 1
    assert r.summary.endswith(", 1 missing, 1 extra") and SUMMARY.match(r.summary)


def test_wrong_scale_norm(converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "q8_0")

    def edit(name, typ, shape, data):
        if name == "blk.0.attn_norm.weight":
            assert typ == Q.F32
            data = (data.view(np.float32) * 2).view(np.uint8)
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "s.gguf", edit))
    bad = failing(r)
    assert list(bad) == ["blk.0.attn_norm.weight"]
    t = bad["blk.0.attn_norm.weight"]
    assert "scaled:x2" in t.flags and t.norm_ratio == pytest.approx(2) and t.cosine == pytest.approx(1)
    assert t.rel_rms == pytest.approx(1)


def test_gguf_from_a_different_checkpoint(converted):
    # gemma-style and qwen3-nested share every shape but fc: same architecture, other weights
    r = compare_weights(DRAFTERS / "qwen3-nested", converted("gemma-style", "llama.cpp", "auto"))
    assert not r.passed
    assert any("different checkpoint" in n for n in r.notes)
    t = by_name(r)
    assert t["fc.weight"].status == "shape-mismatch"
    same_shape = [x for x in r.tensors if x.status == "out"]
    assert len(same_shape) >= 20 and all("uncorrelated" in x.flags for x in same_shape)
    # and qwen3-flat's file against qwen3-nested's dir: ffn shapes differ too
    r2 = compare_weights(DRAFTERS / "qwen3-nested", converted("qwen3-flat", "llama.cpp", "q8_0"))
    assert not r2.passed and r2.counts["shape-mismatch"] == 6 and r2.counts["bit-identical"] == 0
    assert any("different checkpoint" in n for n in r2.notes)


def test_nonfinite_scale_is_caught(converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "q8_0")

    def edit(name, typ, shape, data):
        if name == "blk.0.ffn_down.weight":
            data[34 * 3: 34 * 3 + 2] = np.array([0x00, 0x7E], dtype=np.uint8)  # fp16 NaN scale of block 3
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "n.gguf", edit))
    t = by_name(r)["blk.0.ffn_down.weight"]
    assert t.status == "out" and "nonfinite" in t.flags and list(failing(r)) == [t.name]
    assert json.dumps(r.to_json())  # NaN spelled as a string: still valid JSON


def test_foreign_quantizer_is_within_not_identical(converted, tmp_path):
    """Another Q8_0 encoder (scale amax/126 instead of /127): different bytes, same quality."""
    src = converted("qwen3-flat", "llama.cpp", "q8_0")
    fmt = FORMATS["llama.cpp"]
    inv = {t.name: t for t in read_inventory(DRAFTERS / "qwen3-flat")}

    def edit(name, typ, shape, data):
        if typ == Q.Q8_0:
            x = to_f32(inv[fmt.source_name(name)]).reshape(-1, 32)
            d = (np.abs(x).max(axis=1) / 126).astype(np.float16)
            inv_d = np.where(d > 0, 1 / np.where(d > 0, d.astype(np.float32), 1), 0)
            blocks = np.empty((x.shape[0], 34), np.uint8)
            blocks[:, :2] = d.view(np.uint8).reshape(-1, 2)
            blocks[:, 2:] = np.clip(np.round(x * inv_d[:, None]), -127, 127).astype(np.int8).view(np.uint8)
            data = blocks.reshape(-1)
        return [(name, typ, shape, data)]

    r = compare_weights(DRAFTERS / "qwen3-flat", rewrite(src, tmp_path / "f.gguf", edit))
    assert r.passed
    q8 = [t for t in r.tensors if t.type == "Q8_0"]
    assert q8 and all(t.status == "within" and t.bytes_differing > 0 and t.deviation_from_ggml > 0 for t in q8)
    assert all(t.status == "bit-identical" for t in r.tensors if t.type == "F32")
    assert SUMMARY.match(r.summary).group(3) == str(len(q8))


# --- GGUF vs GGUF ------------------------------------------------------------------------------
def test_two_formats_of_one_drafter_are_identical(converted):
    r = compare_ggufs(converted("qwen3-flat", "llama.cpp", "q8_0"), converted("qwen3-flat", "lucebox", "q8_0"))
    assert r.passed and r.mode == "gguf-gguf" and r.a_format == "llama.cpp" and r.format == "lucebox"
    assert r.counts["bit-identical"] == len(r.tensors) == 25
    assert by_name(r)["dflash.fc.weight"].source == "fc.weight"  # lucebox's name for mainline's fc


@pytest.mark.parametrize("a,b", [("q8_0", "bf16"), ("bf16", "q8_0"), ("q8_0", "q4_k_m"), ("f32", "q4_k_m")])
def test_two_quant_levels_within_tolerance(converted, a, b):
    r = compare_ggufs(converted("gemma-style", "dflash-draft", a), converted("gemma-style", "dflash-draft", b))
    assert r.passed, [(t.name, t.detail) for t in r.tensors if not t.passed]
    # pairs of different types, one of them quantized, have a real error (same-type pairs can be
    # byte-equal: Q4_K_M keeps some attn_v in Q8_0)
    quantized = [t for t in r.tensors if t.type != t.source_type and {t.type, t.source_type} - {"F32", "BF16"}]
    assert quantized and all(t.rel_rms > 0 for t in quantized)
    if "q8_0" in (a, b) and {"bf16"} & {a, b}:
        # the bf16 side holds the checkpoint exactly: the Q8_0 bytes are ggml's encoding of it
        assert all(t.status == "bit-identical" for t in r.tensors)
        assert {t.reference for t in quantized} == {"a" if a == "bf16" else "b"}
    if (a, b) == ("q8_0", "q4_k_m"):
        assert any(t.status == "within" for t in r.tensors)


def test_gguf_vs_gguf_catches_a_swap_and_a_drop(converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "q8_0")
    orig = tensor_bytes(src)
    swap = {"blk.1.ffn_gate.weight": "blk.1.ffn_up.weight", "blk.1.ffn_up.weight": "blk.1.ffn_gate.weight"}

    def edit(name, typ, shape, data):
        if name == "blk.0.attn_k_norm.weight":
            return []
        return [(name, typ, shape, orig[swap[name]] if name in swap else data)]

    r = compare_ggufs(converted("qwen3-flat", "lucebox", "bf16"), rewrite(src, tmp_path / "b.gguf", edit))
    bad = failing(r)
    assert set(bad) == {*swap, "blk.0.attn_k_norm.weight"}
    assert bad["blk.0.attn_k_norm.weight"].status == "missing"
    assert "swapped-with:blk.1.ffn_up.weight" in bad["blk.1.ffn_gate.weight"].flags


# --- thresholds ----------------------------------------------------------------------------------
def test_parse_tolerances():
    assert parse_tolerances(["q4_K=0.05", "Q8_0=0.01", "0.2"]) == {"Q4_K": 0.05, "Q8_0": 0.01, "*": 0.2}
    for bad in ("q9_X=0.1", "q4_K=abc", "0", "-1", "q4_K=nan", "q4_k_m=0.1"):
        with pytest.raises(UsageError):
            parse_tolerances([bad])


def test_explicit_tolerance_overrides_the_band(converted):
    path = converted("qwen3-flat", "llama.cpp", "q4_k_m")
    strict = compare_weights(DRAFTERS / "qwen3-flat", path, tolerances=parse_tolerances(["q4_K=0.01"]))
    q4 = [t for t in strict.tensors if t.type == "Q4_K"]
    assert q4 and all(t.status == "out" and t.limit == 0.01 and t.limit_source == "--tolerance" for t in q4)
    assert all(t.passed for t in strict.tensors if t.type != "Q4_K")
    loose = compare_weights(DRAFTERS / "qwen3-flat", path, tolerances=parse_tolerances(["0.5"]))
    assert loose.passed


@pytest.mark.parametrize("qtype", ["Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q5_0", "Q4_K", "Q4_1", "Q4_0"])
def test_default_bands_hold_for_ggml_encodings(qtype):
    """ggml's own encoding of weight-like data stays inside the default bands (which the
    docs derive from the same kind of measurement at a larger size)."""
    from dflash_gguf.quants import block_size, dequantize, quantize

    rng = np.random.default_rng(7)
    b = cmp.BANDS[qtype]
    for x in (rng.standard_normal((32, 512)) * 0.02, rng.standard_t(3, (32, 512)) * 0.01,
              1 + 0.05 * rng.standard_normal((32, 512))):
        x = x.astype(np.float32)
        y = dequantize(quantize(x, qtype), qtype, x.shape)
        d = (y - x).astype(np.float64)
        assert np.sqrt((d ** 2).sum() / (x.astype(np.float64) ** 2).sum()) < b.rel_rms
        bs = block_size(qtype)
        assert (np.abs(d).reshape(-1, bs).max(1) / np.abs(x).reshape(-1, bs).max(1)).max() < b.block_err


def test_no_requantize(converted):
    r = compare_weights(DRAFTERS / "qwen3-flat", converted("qwen3-flat", "llama.cpp", "q4_k_m"), requantize=False)
    assert r.passed and not r.requantized
    for t in r.tensors:
        if t.type == "F32":  # a float re-encoding is a cast: still checked byte for byte
            assert t.status == "bit-identical"
        else:
            assert t.status == "within" and t.expected_rel_rms is None and t.bytes_differing is None
            assert 0 < t.rel_rms <= t.limit == cmp.BANDS[t.type].rel_rms


# --- streaming and parallelism do not change the answer -------------------------------------
def test_chunking_and_workers_do_not_change_results(converted, monkeypatch):
    path = converted("gemma-style", "llama.cpp", "q4_k_m")
    ref = compare_weights(DRAFTERS / "gemma-style", path, workers=1)
    monkeypatch.setattr(cmp, "CHUNK_VALUES", 256)  # many chunks per tensor
    a = compare_weights(DRAFTERS / "gemma-style", path, workers=1)
    b = compare_weights(DRAFTERS / "gemma-style", path, workers=3)
    for x, y, z in zip(ref.tensors, a.tensors, b.tensors):
        assert x.status == y.status == z.status and x.max_abs == y.max_abs == z.max_abs
        assert x.max_abs_index == y.max_abs_index == z.max_abs_index
        assert y.rel_rms == z.rel_rms  # same chunks, reduced in order: bit-equal across worker counts
        assert x.rel_rms == pytest.approx(y.rel_rms, rel=1e-5)


@pytest.mark.parametrize("outtype,tensor", [("auto", "fc.weight"), ("q8_0", "fc.weight")])
def test_partly_damaged_tensor_uses_the_whole_norm(converted, tmp_path, monkeypatch, outtype, tensor):
    """With one chunk per row, all but one chunk of the tensor are byte-identical (and skip the
    arithmetic): the relative error must still be relative to the whole tensor."""
    src = converted("qwen3-flat", "llama.cpp", outtype)

    def corrupt(name, typ, shape, data):
        if name == tensor:  # bf16: elements 45, 46; Q8_0: quants 20..23 of block 2 = columns 84..87
            data[90:94] ^= 0x40
        return [(name, typ, shape, data)]

    bad = rewrite(src, tmp_path / "bad.gguf", corrupt)
    whole = by_name(compare_weights(DRAFTERS / "qwen3-flat", bad))[tensor]
    monkeypatch.setattr(cmp, "CHUNK_VALUES", 256)
    rows = by_name(compare_weights(DRAFTERS / "qwen3-flat", bad, workers=2))[tensor]
    assert whole.status == rows.status == "out"
    assert rows.rel_rms == pytest.approx(whole.rel_rms, rel=1e-5)
    assert rows.cosine == pytest.approx(whole.cosine, rel=1e-6) and rows.max_abs == whole.max_abs
    assert rows.max_abs_index == whole.max_abs_index
    assert whole.max_abs_index[0] == 0 and whole.max_abs_index[1] in ((45, 46) if outtype == "auto" else range(84, 88))


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q5_0])
def test_dequantizers_match_gguf_py_bit_for_bit(qtype):
    from dflash_gguf.quants import quantize

    x = (np.random.default_rng(3).standard_normal((8, 256)) * 0.05).astype(np.float32)
    raw = quantize(x, qtype).reshape(-1)
    ours = cmp._deq(raw, qtype, 8, 256)
    ref = np.asarray(gguf.dequantize(raw.reshape(8, -1), qtype), dtype=np.float32).reshape(8, 256)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


# --- CLI -------------------------------------------------------------------------------------------
def test_cli_pass_table_and_summary(cli, converted):
    code, out, err = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "llama.cpp", "q8_0"))
    assert code == 0, err
    assert "25 tensors: 25 bit-identical, 0 within tolerance, 0 out of tolerance, 0 missing" in out
    assert "blk.0.ffn_up.weight" in out and "BF16→Q8_0" in out


def test_cli_json_has_every_number(cli, converted):
    code, out, _ = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "lucebox", "q4_k_m"),
                       "--json")
    doc = json.loads(out)
    assert code == 0 and doc["exit_code"] == 0 and doc["verdict"] == "pass" and doc["format"] == "lucebox"
    assert doc["summary"]["bit-identical"] == doc["summary"]["tensors"] == len(doc["tensors"])
    t = next(t for t in doc["tensors"] if t["type"] == "Q4_K")
    for k in ("rel_rms", "max_abs", "max_abs_index", "cosine", "norm_ratio", "expected_rel_rms",
              "deviation_from_ggml", "bytes_differing", "limit", "shape", "ne", "source_ne", "flags"):
        assert t[k] is not None, k


def test_cli_fail_exit_code_and_details(cli, converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "auto")
    orig = tensor_bytes(src)

    def edit(name, typ, shape, data):
        if name == "blk.0.attn_q.weight":
            data = orig["blk.0.attn_output.weight"]
        return [(name, typ, shape, data)]

    bad = rewrite(src, tmp_path / "bad.gguf", edit)
    code, out, err = cli("compare-weights", DRAFTERS / "qwen3-flat", bad)
    assert code == 20 and not err
    assert "25 tensors: 24 bit-identical, 0 within tolerance, 1 out of tolerance, 0 missing" in out
    assert "swapped-with:layers.0.self_attn.o_proj.weight" in out
    code, out, _ = cli("compare-weights", DRAFTERS / "qwen3-flat", bad, "--json")
    assert code == 20 and json.loads(out)["exit_code"] == 20 and json.loads(out)["verdict"] == "fail"


def test_cli_gguf_vs_gguf(cli, converted):
    code, out, err = cli("compare-weights", converted("qwen3-flat", "llama.cpp", "bf16"),
                         converted("qwen3-flat", "dflash-draft", "q8_0"), "--top", "3")
    assert code == 0, err
    assert "25 tensors: 25 bit-identical" in out and "3 worst of 25" in out


def test_cli_tolerance_makes_it_fail(cli, converted):
    code, out, _ = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "llama.cpp", "q4_k_m"),
                       "--tolerance", "q4_K=0.01", "--tolerance", "q5_0=0.5")
    assert code == 20 and "--tolerance" in out


@pytest.mark.parametrize("args,code,words", [
    (("--tolerance", "q9=1"), 2, "unknown ggml type"),
    (("--tolerance", "-3"), 2, "not a positive number"),
])
def test_cli_bad_tolerance(cli, converted, args, code, words):
    c, out, err = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "lucebox", "auto"), *args)
    assert c == code and words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_bad_inputs_one_line_each(cli, converted, tmp_path):
    good = converted("qwen3-flat", "lucebox", "auto")
    c, _, err = cli("compare-weights", tmp_path / "nope", good)
    assert c == 5 and "no such file or directory" in err
    c, _, err = cli("compare-weights", DRAFTERS / "qwen3-flat", tmp_path / "nope.gguf")
    assert c == 5 and "nope.gguf" in err
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[:1000])
    c, _, err = cli("compare-weights", DRAFTERS / "qwen3-flat", trunc)
    assert c == 6 and "Traceback" not in err
    c, out, err = cli("compare-weights", DRAFTERS / "gemma-style", LLAMA_GGUF, "--json")
    assert c == 6 and "not a DFlash drafter" in err and json.loads(out)["exit_code"] == 6
    c, _, err = cli("compare-weights", tmp_path, good)  # a dir without weights
    assert c == 5 and "model.safetensors" in err
