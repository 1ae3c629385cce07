"""formats/dspark.py: recognising a DSpark drafter, Gemma4 DSpark's names, and the formats that
refuse to carry it."""
from __future__ import annotations

import pytest
from gguf import GGUFValueType as V

from dflash_gguf.errors import UsageError
from dflash_gguf.fileio.gguf_reader import read_gguf
from dflash_gguf.fileio.types import KV
from dflash_gguf.formats import FORMATS, MAINLINE, DrafterMeta, meta_from_gguf
from dflash_gguf.formats.dspark import dspark_summary, gemma4_gguf_name, is_dspark, is_gemma4_checkpoint


@pytest.mark.parametrize("keys, tensors, expected", [
    (["dflash.sample_from_anchor"], [], True),
    (["dflash.has_confidence_head"], [], True),
    ([], ["markov_w1.weight"], True),
    ([], ["d2t"], True),
    ([], ["blk.3.post_attention_norm.weight"], False),  # dflash-draft's pre-FFN norm has this name
    ([], ["blk.0.ffn_norm.weight", "fc.weight", "rope_freqs.weight"], False),
    (["dflash.block_size"], ["fc.weight"], False),
])
def test_is_dspark(keys, tensors, expected):
    assert is_dspark(keys, tensors) is expected


@pytest.mark.parametrize("src, dst", [
    ("layers.1.post_attention_layernorm.weight", "blk.1.post_attention_norm.weight"),
    ("model.layers.0.pre_feedforward_layernorm.weight", "blk.0.ffn_norm.weight"),
    ("layers.0.post_feedforward_layernorm.weight", "blk.0.post_ffw_norm.weight"),
    ("layers.2.layer_scalar", "blk.2.layer_output_scale.weight"),
    ("confidence_proj.weight", "conf_proj.weight"),
    ("layers.0.self_attn.q_proj.weight", None),  # the shared table decides
])
def test_gemma4_names(src, dst):
    assert gemma4_gguf_name(src) == dst


def test_gemma4_checkpoint_is_recognised_by_its_pre_ffn_norm():
    assert is_gemma4_checkpoint(["layers.0.pre_feedforward_layernorm.weight"])
    assert not is_gemma4_checkpoint(["layers.0.post_attention_layernorm.weight"])


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "llama.cpp"])
def test_only_mainline_carries_dspark(fmt):
    meta = DrafterMeta(taps=(1, 2), block_size=7, mask_token_id=5, n_target_features=128, dspark=True,
                       tokenizer=[KV("tokenizer.ggml.model", "llama", V.STRING)],
                       hparams=[("block_count", 2, V.UINT32, None), ("embedding_length", 64, V.UINT32, None)])
    with pytest.raises(UsageError, match=f"DSpark drafters .* use --format llama.cpp instead of --format {fmt}"):
        FORMATS[fmt].kvs(meta)
    assert MAINLINE.kvs(meta)[0] == "dflash"


def test_meta_and_summary_of_converted_files(dspark):
    for case, expect in {"qwen3-reduced": (32, 200, True, True, False), "speculator": (32, 128, False, False, False),
                         "gemma4-tied": (32, None, False, True, True)}.items():
        f = read_gguf(dspark["gguf"][case])
        _, meta = meta_from_gguf(f.kvs, f.shapes(), f.path)
        assert meta.dspark
        s = dspark_summary(f.kvs, f.shapes(), "dflash")
        assert (s["markov_rank"], s["draft_vocab_size"], s["confidence_head"], s["sample_from_anchor"],
                s["gemma4_layout"]) == expect, case
        assert s["vocab_size"] == 512
