"""Planted faults named: swapped, transposed, shape convention, scaled, different checkpoint."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from dflash_gguf.compare import compare_weights
from dflash_gguf.fileio.safetensors import read_inventory, to_f32

from tests.compare.conftest import by_name, failing, rewrite, tensor_bytes
from tests.conftest import DRAFTERS


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
