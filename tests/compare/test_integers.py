"""compare-weights on DSpark drafters (compare/api.py, compare/integers.py): every tensor paired, Gemma4's own
names, d2t compared as integers after the absolute-id transform, t2d / a full-vocab lm_head
noted as dropped by design."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.compare import compare_ggufs, compare_weights
from tests.conftest import rewrite_gguf


@pytest.mark.parametrize("case", ["draft", "qwen3-reduced", "speculator", "lfm2", "ling", "gemma4", "gemma4-tied"])
def test_every_dspark_tensor_pairs_bit_identical(dspark, case):
    r = compare_weights(dspark["dirs"][case], dspark["gguf"][case])
    assert r.passed and r.counts["missing"] == r.counts["extra"] == 0, [(t.name, t.status, t.detail) for t in r.tensors
                                                                        if not t.passed]
    assert r.counts["bit-identical"] == len(r.tensors)
    names = {t.gguf_name for t in r.tensors}
    assert {"markov_w1.weight", "markov_w2.weight"} <= names
    if case.startswith("gemma4"):
        assert {"blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight", "blk.0.layer_output_scale.weight",
                "blk.1.ffn_norm.weight"} <= names
        assert any("rope_freqs.weight: generated" in n for n in r.notes)  # both: proportional RoPE


def test_d2t_is_compared_as_absolute_ids(dspark):
    r = compare_weights(dspark["dirs"]["qwen3-reduced"], dspark["gguf"]["qwen3-reduced"])
    d2t = next(t for t in r.tensors if t.gguf_name == "d2t")
    assert (d2t.status, d2t.type, d2t.source_type) == ("bit-identical", "I64", "I64")
    assert "compared as integers" in d2t.detail
    assert any(n.startswith("t2d: not converted by design") for n in r.notes)


def test_dropped_full_vocab_head_is_a_note(dspark):
    r = compare_weights(dspark["dirs"]["draft"], dspark["gguf"]["draft"])
    assert any(n.startswith("lm_head.weight: not converted by design (full draft vocabulary") for n in r.notes)


def test_a_wrong_d2t_id_fails(dspark, tmp_path):
    bad = rewrite_gguf(dspark["gguf"]["qwen3-reduced"], tmp_path / "bad.gguf",
                       data={"d2t": lambda a: np.where(np.arange(a.size) == 7, a + 1, a)})
    r = compare_weights(dspark["dirs"]["qwen3-reduced"], bad)
    d2t = next(t for t in r.tensors if t.gguf_name == "d2t")
    assert not r.passed and d2t.status == "out"
    assert "1 of 200 ids differ (first at index 7" in d2t.detail
    g = compare_ggufs(dspark["gguf"]["qwen3-reduced"], bad)
    row = next(t for t in g.tensors if t.gguf_name == "d2t")
    assert row.status == "out" and "first at index 7" in row.detail


def test_quantized_dspark_pairs_despite_llama_quantizes_1d_conf_proj(cli, dspark, tmp_path):
    q = tmp_path / "q.gguf"
    assert cli("quantize", dspark["gguf"]["qwen3-reduced"], q, "q4_k_m")[0] == 0
    r = compare_weights(dspark["dirs"]["qwen3-reduced"], q)
    assert r.passed, [(t.name, t.status, t.detail) for t in r.tensors if not t.passed]
    conf = next(t for t in r.tensors if t.gguf_name == "conf_proj.weight")
    assert conf.gguf_shape == (96,) and conf.shape == (1, 96) and conf.status == "bit-identical"
    assert compare_ggufs(dspark["gguf"]["qwen3-reduced"], q).passed
