"""Per-chunk numbers: corrupted bytes caught block by block (or value by value) and located,
non-finite values, and a partly damaged tensor measured against its whole norm."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dflash_gguf.compare import compare_weights, engine

from tests.compare.conftest import by_name, failing, rewrite
from tests.conftest import DRAFTERS


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
    monkeypatch.setattr(engine, "CHUNK_VALUES", 256)
    rows = by_name(compare_weights(DRAFTERS / "qwen3-flat", bad, workers=2))[tensor]
    assert whole.status == rows.status == "out"
    assert rows.rel_rms == pytest.approx(whole.rel_rms, rel=1e-5)
    assert rows.cosine == pytest.approx(whole.cosine, rel=1e-6) and rows.max_abs == whole.max_abs
    assert rows.max_abs_index == whole.max_abs_index
    assert whole.max_abs_index[0] == 0 and whole.max_abs_index[1] in ((45, 46) if outtype == "auto" else range(84, 88))


@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_nonfinite_checkpoint_value_is_named_by_the_quantizer(converted, tmp_path, outtype):
    """A checkpoint inf cannot be re-encoded (ggml refuses it): the F16 table path hands it to
    the quantizer, whose error names the tensor and index, as the quantized path does."""
    import shutil

    from dflash_gguf.fileio.safetensors import read_inventory

    src = converted("qwen3-flat", "llama.cpp", outtype)
    d = tmp_path / "ckpt"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    t = next(t for t in read_inventory(d) if t.name.endswith("layers.0.mlp.up_proj.weight"))
    assert t.dtype == "BF16"
    with open(t.file, "r+b") as f:  # bf16 +inf at element [1, 3]
        f.seek(t.offset + 2 * (t.shape[1] + 3))
        f.write(b"\x80\x7f")
    r = compare_weights(d, src)
    row = failing(r)
    assert list(row) == ["blk.0.ffn_up.weight"]
    bad = row["blk.0.ffn_up.weight"]
    assert "source-nonfinite" in bad.flags and "non-finite value (inf) at index (1, 3)" in bad.detail
