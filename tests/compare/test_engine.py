"""The main pass and the verdicts: limits (band, ggml's own error, --tolerance), re-encoding
on or off, a foreign quantizer, and results independent of chunking and worker count."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from dflash_gguf.compare import BANDS, compare_weights, engine, parse_tolerances
from dflash_gguf.fileio.safetensors import read_inventory, to_f32
from dflash_gguf.formats import FORMATS

from tests.compare.conftest import SUMMARY, rewrite
from tests.conftest import DRAFTERS


def test_explicit_tolerance_overrides_the_band(converted):
    path = converted("qwen3-flat", "llama.cpp", "q4_k_m")
    strict = compare_weights(DRAFTERS / "qwen3-flat", path, tolerances=parse_tolerances(["q4_K=0.01"]))
    q4 = [t for t in strict.tensors if t.type == "Q4_K"]
    assert q4 and all(t.status == "out" and t.limit == 0.01 and t.limit_source == "--tolerance" for t in q4)
    assert all(t.passed for t in strict.tensors if t.type != "Q4_K")
    loose = compare_weights(DRAFTERS / "qwen3-flat", path, tolerances=parse_tolerances(["0.5"]))
    assert loose.passed


def test_no_requantize(converted):
    r = compare_weights(DRAFTERS / "qwen3-flat", converted("qwen3-flat", "llama.cpp", "q4_k_m"), requantize=False)
    assert r.passed and not r.requantized
    for t in r.tensors:
        if t.type == "F32":  # a float re-encoding is a cast: still checked byte for byte
            assert t.status == "bit-identical"
        else:
            assert t.status == "within" and t.expected_rel_rms is None and t.bytes_differing is None
            assert 0 < t.rel_rms <= t.limit == BANDS[t.type].rel_rms


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


def test_chunking_and_workers_do_not_change_results(converted, monkeypatch):
    path = converted("gemma-style", "llama.cpp", "q4_k_m")
    ref = compare_weights(DRAFTERS / "gemma-style", path, workers=1)
    monkeypatch.setattr(engine, "CHUNK_VALUES", 256)  # many chunks per tensor
    a = compare_weights(DRAFTERS / "gemma-style", path, workers=1)
    b = compare_weights(DRAFTERS / "gemma-style", path, workers=3)
    for x, y, z in zip(ref.tensors, a.tensors, b.tensors):
        assert x.status == y.status == z.status and x.max_abs == y.max_abs == z.max_abs
        assert x.max_abs_index == y.max_abs_index == z.max_abs_index
        assert y.rel_rms == z.rel_rms  # same chunks, reduced in order: bit-equal across worker counts
        assert x.rel_rms == pytest.approx(y.rel_rms, rel=1e-5)
