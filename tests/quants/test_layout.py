"""quants/layout.py: llama-quantize's output layout (KV order, file type, tensor types, 1-D
shapes, byte counts) for a list of input KVs and tensors. Expectations from llama-quant.cpp's
rules worked out by hand."""
from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from dflash_gguf.errors import GGUFFormatError, QuantizationError
from dflash_gguf.fileio.types import KV
from dflash_gguf.quants.layout import requantize_layout


def _kvs(block_count=None, block_type=V.UINT32):
    kvs = [KV("general.architecture", "qwen3", V.STRING), KV("general.name", "t", V.STRING),
           KV("split.no", 0, V.UINT16), KV("general.file_type", 1, V.UINT32),
           KV("general.quantization_version", 1, V.UINT32), KV("qwen3.context_length", 4096, V.UINT32)]
    if block_count is not None:
        kvs.append(KV("qwen3.block_count", block_count, block_type))
    return kvs + [KV("split.count", 2, V.UINT16), KV("tokenizer.ggml.model", "gpt2", V.STRING)]


def _ffn_downs(n: int):
    return [(f"blk.{i}.ffn_down.weight", (64, 256), Q.F32) for i in range(n)]


def test_dspark_layout_copies_d2t_and_drops_outer_ones():
    _, entries = requantize_layout([], [("d2t", (200,), Q.I64), ("conf_proj.weight", (1, 96), Q.BF16),
                                        ("markov_w1.weight", (512, 32), Q.BF16)], "q8_0")
    got = {e.name: (e.shape, e.ggml_type, e.quantized) for e in entries}
    assert got == {"d2t": ((200,), Q.I64, False), "conf_proj.weight": ((96,), Q.BF16, False),
                   "markov_w1.weight": ((512, 32), Q.Q8_0, True)}


@pytest.mark.parametrize("ftype,file_type", [("q8_0", 7), ("Q4_K_M", 15)])
def test_kvs_keep_their_order_and_the_quantization_keys_go_last(ftype, file_type):
    out, _ = requantize_layout(_kvs(4), _ffn_downs(4), ftype)
    # split keys and the old quantization keys dropped; general.architecture is the writer's own first key
    assert [kv.key for kv in out] == ["general.name", "qwen3.context_length", "qwen3.block_count",
                                      "tokenizer.ggml.model", "general.quantization_version", "general.file_type"]
    assert (out[-2].value, out[-2].type) == (2, V.UINT32)
    assert (out[-1].value, out[-1].type) == (file_type, V.UINT32)  # LLAMA_FTYPE_MOSTLY_Q8_0 / _Q4_K_M


def test_block_count_is_ffn_downs_denominator():
    # use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, C integer division:
    # n = 32: layers 0..3 are all < 4 -> Q6_K; n = 4 (from the names, blk.0..blk.3): 0, 1 no; 2 ((2-0)%3 == 2), 3 (>= 3) yes
    _, given = requantize_layout(_kvs(32), _ffn_downs(4), "q4_k_m")
    _, inferred = requantize_layout(_kvs(None), _ffn_downs(4), "q4_k_m")
    assert [e.ggml_type for e in given] == [Q.Q6_K] * 4
    assert [e.ggml_type for e in inferred] == [Q.Q4_K, Q.Q4_K, Q.Q6_K, Q.Q6_K]


def test_block_count_that_is_not_an_integer_is_a_format_error():
    with pytest.raises(GGUFFormatError, match="block_count"):
        requantize_layout(_kvs("32", V.STRING), _ffn_downs(4), "q4_k_m", where="x.gguf")


def test_entries_carry_byte_counts_and_reasons():
    tensors = [("blk.0.attn_norm.weight", (256,), Q.F32), ("blk.0.attn_q.weight", (64, 256), Q.BF16),
               ("empty.weight", (0, 256), Q.F32)]
    _, entries = requantize_layout(_kvs(1), tensors, "q8_0")
    by = {e.name: e for e in entries}
    norm, q, empty = by["blk.0.attn_norm.weight"], by["blk.0.attn_q.weight"], by["empty.weight"]
    assert (norm.ggml_type, norm.nbytes, norm.quantized) == (Q.F32, 256 * 4, False)
    assert norm.reason.endswith("(copied)")
    assert (q.src_type, q.ggml_type, q.nbytes, q.quantized) == (Q.BF16, Q.Q8_0, 64 * 256 // 32 * 34, True)
    assert empty.shape == (0, 256) and empty.nbytes == 0  # a zero-element tensor keeps every dimension


def test_an_already_quantized_input_is_refused_unless_allowed():
    tensors = [("blk.0.attn_q.weight", (64, 256), Q.Q4_K), ("blk.0.attn_norm.weight", (256,), Q.F16)]
    with pytest.raises(QuantizationError, match=r"in\.gguf: tensor blk\.0\.attn_q\.weight is already Q4_K.*--allow-requantize"):
        requantize_layout(_kvs(1), tensors, "q8_0", where="in.gguf")
    _, entries = requantize_layout(_kvs(1), tensors, "q8_0", allow_requantize=True)
    assert {e.name: (e.src_type, e.ggml_type) for e in entries} == {
        "blk.0.attn_q.weight": (Q.Q4_K, Q.Q8_0), "blk.0.attn_norm.weight": (Q.F16, Q.F16)}
    # a quantized tensor llama-quantize would not touch (1-D) is no reason to refuse
    requantize_layout(_kvs(1), [("blk.0.attn_norm.weight", (256,), Q.Q8_0)], "q8_0")


def test_a_block_count_of_another_integer_type_is_refused_as_llama_quantize_does():
    """llama_model_loader's get_key checks the key's type: an INT32 block_count makes
    llama-quantize throw "wrong type", so our quantize refuses the file the same way."""
    with pytest.raises(GGUFFormatError, match="qwen3.block_count .*a UINT32"):
        requantize_layout(_kvs(2, V.INT32), [("blk.0.ffn_down.weight", (256, 256), Q.F32)], "q8_0")
