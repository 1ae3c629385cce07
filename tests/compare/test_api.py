"""The entry points: every fixture x format x outtype compared back, tensors paired (missing,
extra) in both modes, GGUF vs GGUF."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader

from dflash_gguf.compare import BANDS, compare_ggufs, compare_weights
from dflash_gguf.formats import FORMATS
from dflash_gguf.quants import QUANTIZE_TYPES
from dflash_gguf.quants.ftypes import FTYPE_IDS
from dflash_gguf.quants.gguf_file import quantize_gguf

from tests.compare.conftest import OUTTYPES, SUMMARY, TARGET, by_name, failing, rewrite, tensor_bytes
from tests.conftest import DRAFTERS, RUNTIME


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
            assert t.rel_rms <= BANDS[t.type].rel_rms  # the bands hold on the fixtures
            assert t.max_abs_index is not None and len(t.max_abs_index) == len(t.shape)
    if outtype == "q4_k_m":
        assert {"Q4_K", "Q5_0"} <= types or {"Q5_0"} <= types
    if outtype == "q8_0":
        assert "Q8_0" in types


def test_f16_from_bf16_is_exact_or_within_an_ulp(converted):
    r = compare_weights(DRAFTERS / "qwen3-flat", converted("qwen3-flat", "lucebox", "f16"))
    f16 = [t for t in r.tensors if t.type == "F16"]
    assert f16 and all(t.status == "bit-identical" and t.rel_rms <= 2.0 ** -11 for t in f16)


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
    assert ", 1 missing, 1 extra;" in r.summary and SUMMARY.match(r.summary)


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


def test_pairs_come_from_the_conversion_plan(converted, tmp_path):
    """The checkpoint side is paired by convert's own plan: without the config.json the plan is
    built from, compare-weights refuses (exit 3) rather than guess; with a stray tensor the plan
    does not know, that tensor is a missing row naming the format."""
    import json
    import shutil
    import struct

    from dflash_gguf.errors import ConfigError

    gguf = converted("qwen3-flat")
    d = tmp_path / "ckpt"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    (d / "config.json").rename(tmp_path / "config.json")
    with pytest.raises(ConfigError, match="config.json"):
        compare_weights(d, gguf)
    (tmp_path / "config.json").rename(d / "config.json")
    st = d / "model.safetensors"  # one more F32 tensor appended by hand (numpy's safetensors has no bf16)
    raw = st.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    header["layers.0.mystery.weight"] = {"dtype": "F32", "shape": [4, 4], "data_offsets": [len(data), len(data) + 64]}
    head = json.dumps(header).encode()
    st.write_bytes(struct.pack("<Q", len(head)) + head + data + np.zeros(16, np.float32).tobytes())
    r = compare_weights(d, gguf)
    row = next(t for t in r.tensors if t.name == "layers.0.mystery.weight")
    assert row.status == "missing" and row.detail == "no llama.cpp GGUF name for this tensor"
    assert not r.passed


# --- every file type quantize writes, on the trained drafter of fixtures/runtime ------------------
FILE_TYPES = list(FTYPE_IDS)
FLOATS = ("F32", "F16", "BF16")


def test_the_file_types_take_every_block_type_quantize_writes():
    """What the next test covers: between them, the file types of the runtime drafter hold every
    ggml type quantize can write."""
    seen = set()
    for ftype in FILE_TYPES:
        seen |= {e.ggml_type for e in quantize_gguf(RUNTIME / "drafter.gguf", None, ftype, dry_run=True).tensors}
    assert seen == set(QUANTIZE_TYPES)


def _swap_end_blocks(victims: dict):
    """A ``rewrite`` edit: in the first 2-D tensor of each ggml type, the first and last block
    (value, for the float types) trade places; ``victims`` collects type -> tensor name."""
    def edit(name, typ, shape, data):
        if len(shape) == 2 and typ.name not in victims:
            victims[typ.name] = name
            ts = GGML_QUANT_SIZES[typ][1]
            data[:ts], data[-ts:] = data[-ts:].copy(), data[:ts].copy()
        return [(name, typ, shape, data)]

    return edit


@pytest.mark.parametrize("ftype", FILE_TYPES)
def test_every_quantize_file_type_compares_back_and_damage_fails(quantized_drafter, tmp_path, ftype):
    path = quantized_drafter(ftype)
    ckpt = compare_weights(RUNTIME / "drafter", path)
    for r in (ckpt, compare_ggufs(RUNTIME / "drafter.gguf", path)):
        # the reference holds the values exactly and our quantizer is ggml's: every tensor is ggml's encoding
        assert r.passed and r.counts["bit-identical"] == len(r.tensors), failing(r)
    worst: dict[str, float] = {}
    for t in ckpt.tensors:
        assert (t.limit, t.limit_source) == (BANDS[t.type].rel_rms, "band"), t.name  # a band of its own, used
        assert t.rel_rms <= t.limit
        if t.type not in FLOATS:
            assert t.rel_rms > 0 and t.expected_rel_rms == pytest.approx(t.rel_rms)
            worst[t.type] = max(worst.get(t.type, 0.0), t.rel_rms)
    for typ, err in worst.items():  # on real weights the band is a small multiple of ggml's own error
        assert BANDS[typ].rel_rms <= 4 * err, typ
    # two quantized files: both sides dequantized, their bands added
    r = compare_ggufs(quantized_drafter("Q8_0"), path)
    assert r.passed, failing(r)
    victims: dict[str, str] = {}
    damaged = rewrite(path, tmp_path / "damaged.gguf", _swap_end_blocks(victims))
    assert set(victims) == {t.type for t in ckpt.tensors if t.shape and len(t.shape) == 2}
    for r in (compare_weights(RUNTIME / "drafter", damaged), compare_ggufs(RUNTIME / "drafter.gguf", damaged)):
        bad = failing(r)
        assert not r.passed and set(bad) == set(victims.values())
        for t in bad.values():
            assert t.status == "out" and {"bad-blocks", "bad-values"} & set(t.flags), (t.name, t.flags, t.detail)
