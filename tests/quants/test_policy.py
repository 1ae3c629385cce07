"""llama-quantize's per-tensor type choice (dflash_gguf.quants.policy)."""
from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as T

from dflash_gguf.errors import QuantizationError
from dflash_gguf.quants.policy import (
    FTYPE_IDS,
    ftype_id,
    layer_of,
    plan_types,
    processing_order,
    tensor_allows_quantization,
    use_more_bits,
)


def expected_more_bits(n: int) -> set[int]:
    # llama-quant.cpp: i < n/8 || i >= 7*n/8 || (i - n/8) % 3 == 2, with C integer division
    e = n // 8
    return {i for i in range(n) if i < e or i >= 7 * n // 8 or (i - e) % 3 == 2}


@pytest.mark.parametrize(
    "n,literal",
    [
        (4, {2, 3}),
        (5, {2, 4}),
        (6, {2, 5}),
        (8, {0, 3, 6, 7}),
        (18, {0, 1, 4, 7, 10, 13, 15, 16, 17}),
        (32, {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}),
    ],
)
def test_use_more_bits(n, literal):
    got = {i for i in range(n) if use_more_bits(i, n)}
    assert got == expected_more_bits(n) == literal


# --- a DFlash drafter, in each runtime family's names --------------------------------------------
H, I, Q, KV, L = 1024, 3072, 2048, 512, 5


def drafter(fc: str, hidden_norm: str, post_norm: str = "ffn_norm", out_norm: str = "output_norm.weight"):
    t = [(fc, (H, 5 * H)), (hidden_norm, (H,)), (out_norm, (H,))]
    for i in range(L):
        p = f"blk.{i}."
        t += [
            (p + "attn_norm.weight", (H,)),
            (p + "attn_q.weight", (Q, H)),
            (p + "attn_k.weight", (KV, H)),
            (p + "attn_v.weight", (KV, H)),
            (p + "attn_output.weight", (H, Q)),
            (p + "attn_q_norm.weight", (128,)),
            (p + "attn_k_norm.weight", (128,)),
            (p + f"{post_norm}.weight", (H,)),
            (p + "ffn_gate.weight", (I, H)),
            (p + "ffn_up.weight", (I, H)),
            (p + "ffn_down.weight", (H, I)),
        ]
    return t


FAMILIES = {
    "mainline": dict(fc="fc.weight", hidden_norm="enc.output_norm.weight"),
    "dflash-draft": dict(fc="dflash_fc.weight", hidden_norm="dflash_hidden_norm.weight", post_norm="post_attention_norm"),
    "lucebox": dict(fc="dflash.fc.weight", hidden_norm="dflash.hidden_norm.weight"),
    "old-pr": dict(fc="fc.weight", hidden_norm="hidden_norm.weight"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_drafter_q4_k_m(family):
    kw = FAMILIES[family]
    tensors = drafter(**kw)
    plan = plan_types(tensors, "Q4_K_M", n_layer=L)
    by = {c.name: c for c in plan}
    assert len(plan) == len(tensors)
    assert by[kw["fc"]].ggml_type == T.Q4_K and by[kw["fc"]].quantized  # fc survives, quantized
    assert by[kw["hidden_norm"]].ggml_type == T.F32 and not by[kw["hidden_norm"]].quantized
    for c in plan:
        if len(c.shape) == 1:
            assert c.ggml_type == T.F32 and not c.quantized and "kept F32" in c.reason, c
    promoted = {2, 4}  # use_more_bits(i, 5)
    for i in range(L):
        for kind in ("attn_v", "ffn_down"):
            c = by[f"blk.{i}.{kind}.weight"]
            assert c.ggml_type == (T.Q6_K if i in promoted else T.Q4_K), c
        for kind in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            assert by[f"blk.{i}.{kind}.weight"].ggml_type == T.Q4_K
    assert by["blk.2.attn_v.weight"].reason == "attn_v: use_more_bits(2,5) → Q6_K"
    assert by["blk.4.ffn_down.weight"].reason == "ffn_down: use_more_bits(4,5) → Q6_K"


@pytest.mark.parametrize("family", FAMILIES)
def test_drafter_q8_0(family):
    kw = FAMILIES[family]
    plan = plan_types(drafter(**kw), "q8_0", n_layer=L)
    for c in plan:
        assert c.ggml_type == (T.F32 if len(c.shape) == 1 else T.Q8_0), c
    assert {c.name for c in plan if c.quantized} >= {kw["fc"], "blk.0.attn_v.weight"}


def test_processing_order():
    names = [
        "blk.10.attn_q.weight", "blk.2.ffn_up.weight", "token_embd.weight", "blk.2.attn_k.weight",
        "output_norm.weight", "blk.1.attn_v.weight", "dflash.fc.weight", "blk.2.attn_k_norm.weight",
        "Zeta.weight", "blk.x.weird.weight",
    ]
    assert processing_order(names) == [
        "Zeta.weight",  # byte order: 'Z' < 'b' < 'd' < 'o' < 't'
        "blk.x.weird.weight",  # sscanf finds no layer: -1, sorted with the non-blk names
        "dflash.fc.weight",
        "output_norm.weight",
        "token_embd.weight",
        "blk.1.attn_v.weight",
        "blk.2.attn_k.weight",
        "blk.2.attn_k_norm.weight",
        "blk.2.ffn_up.weight",
        "blk.10.attn_q.weight",  # numeric, not lexical, layer order
    ]
    assert layer_of("blk.7") == 7 and layer_of("blk.-1.x") == -1 and layer_of("xblk.3.x") == -1


def test_counters_follow_processing_order_not_input_order():
    # attn_v of layers listed backwards: i_attention_wv still counts 0,1,2,3 by layer
    t = [(f"blk.{i}.attn_v.weight", (256, 256)) for i in reversed(range(4))]
    plan = plan_types(t, "Q4_K_M", n_layer=4)
    assert [c.name for c in plan] == [f"blk.{i}.attn_v.weight" for i in range(4)]
    assert [c.ggml_type for c in plan] == [T.Q4_K, T.Q4_K, T.Q6_K, T.Q6_K]  # use_more_bits(i, 4) = {2, 3}


def test_n_attention_wv_counts_attn_v_like_tensors():
    # 8 layers but only 4 have attn_v: n_attention_wv = 4, not n_layer; a fused qkv counts too
    t = [(f"blk.{i}.attn_v.weight", (256, 256)) for i in range(3)] + [("blk.3.attn_qkv.weight", (768, 256))]
    t += [(f"blk.{i}.ffn_down.weight", (256, 512)) for i in range(8)]
    by = {c.name: c for c in plan_types(t, "Q4_K_M", n_layer=8)}
    assert [by[f"blk.{i}.attn_v.weight"].ggml_type for i in range(3)] == [T.Q4_K, T.Q4_K, T.Q6_K]
    assert by["blk.3.attn_qkv.weight"].ggml_type == T.Q6_K  # attn_v-like: use_more_bits(3, 4)
    assert [i for i in range(8) if by[f"blk.{i}.ffn_down.weight"].ggml_type == T.Q6_K] == [0, 3, 6, 7]


# --- output / tied embeddings ----------------------------------------------------------------
def test_tied_token_embd_takes_output_rule():
    plan = plan_types([("token_embd.weight", (32000, 4096))], "Q4_K_M", n_layer=1)
    assert plan[0].ggml_type == T.Q6_K and "tied" in plan[0].reason


def test_untied_token_embd_stays_q4_k_and_output_is_q6_k():
    by = {c.name: c for c in plan_types([("token_embd.weight", (32000, 4096)), ("output.weight", (32000, 4096))], "Q4_K_M", 1)}
    assert by["token_embd.weight"].ggml_type == T.Q4_K
    assert by["output.weight"].ggml_type == T.Q6_K


def test_output_with_ne0_not_multiple_of_256_is_q8_0():
    by = {c.name: c for c in plan_types([("output.weight", (1000, 4096 + 32))], "Q4_K_M", 1)}
    assert by["output.weight"].ggml_type == T.Q8_0


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q8_0"])
def test_q8_0_target_with_ne0_not_multiple_of_32_aborts(ftype):
    name = "output.weight" if ftype == "Q4_K_M" else "blk.0.attn_q.weight"
    with pytest.raises(QuantizationError, match="no tensor type fallback for Q8_0"):
        plan_types([(name, (64, 100))], ftype, 1)


# --- fallbacks ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,ne0,want",
    [
        ("blk.0.attn_q.weight", 4096 + 32, T.Q5_0),  # Q4_K -> Q5_0
        ("blk.0.attn_q.weight", 100, T.F16),  # Q4_K -> Q5_0 still does not fit -> F16
        ("blk.0.attn_q.weight", 4096, T.Q4_K),
        ("blk.2.attn_v.weight", 4096 + 32, T.Q8_0),  # Q6_K (use_more_bits) -> Q8_0
        ("blk.2.attn_v.weight", 4096 + 16, T.F16),  # Q6_K -> Q8_0 does not fit -> F16
    ],
)
def test_fallbacks(name, ne0, want):
    t = [(f"blk.{i}.attn_v.weight", (64, 256)) for i in range(5) if f"blk.{i}.attn_v.weight" != name]
    t.append((name, (64, ne0)))
    by = {c.name: c for c in plan_types(t, "Q4_K_M", n_layer=5)}
    assert by[name].ggml_type == want
    assert ("!= 0" in by[name].reason) == (ne0 % 256 != 0)


def test_fallback_reason_text():
    (c,) = plan_types([("fc.weight", (64, 4096 + 32))], "Q4_K_M", 1)
    assert c.reason.endswith("ne0 % 256 != 0: Q4_K → Q5_0")


# --- tensor_allows_quantization ----------------------------------------------------------------
@pytest.mark.parametrize(
    "name,shape,allowed",
    [
        ("blk.0.attn_q.weight", (64, 64), True),
        ("blk.0.attn_norm.weight", (64,), False),
        ("blk.0.attn_q_norm.weight", (64, 64), False),  # 2-D, but a norm
        ("blk.0.attn_q.bias", (64, 64), False),  # does not end in weight
        ("blk.0.ffn_gate_inp.weight", (8, 64), False),  # expert router
        ("position_embd.weight", (64, 64), False),
        ("blk.0.ssm_conv1d.weight", (64, 4), False),
        ("fc.weight", (1, 64), False),  # ggml_n_dims: ne = [64, 1] is 1-D
        ("blk.0.ffn_down_exps.weight", (8, 64, 64), True),
    ],
)
def test_tensor_allows_quantization(name, shape, allowed):
    assert tensor_allows_quantization(name, shape) is allowed


def test_kept_tensors_keep_their_input_type():
    plan = plan_types([("blk.0.attn_norm.weight", (64,), T.BF16)], "Q4_K_M", 1)
    assert plan[0].ggml_type == T.BF16 and plan[0].reason == "1-D: kept BF16"


# --- a non-drafter: llama-style, 32 layers, untied ---------------------------------------------
def test_llama_style_plan():
    n = 32
    t = [("token_embd.weight", (32000, 4096)), ("output_norm.weight", (4096,)), ("output.weight", (32000, 4096))]
    for i in range(n):
        p = f"blk.{i}."
        t += [(p + k, s) for k, s in [
            ("attn_norm.weight", (4096,)), ("attn_q.weight", (4096, 4096)), ("attn_k.weight", (1024, 4096)),
            ("attn_v.weight", (1024, 4096)), ("attn_output.weight", (4096, 4096)), ("ffn_norm.weight", (4096,)),
            ("ffn_gate.weight", (14336, 4096)), ("ffn_up.weight", (14336, 4096)), ("ffn_down.weight", (4096, 14336)),
        ]]
    plan = plan_types(t, "Q4_K_M", n_layer=n)
    by = {c.name: c for c in plan}
    assert [c.name for c in plan[:3]] == ["output.weight", "output_norm.weight", "token_embd.weight"]
    assert by["output.weight"].ggml_type == T.Q6_K and by["token_embd.weight"].ggml_type == T.Q4_K
    six = expected_more_bits(n)
    for i in range(n):
        assert by[f"blk.{i}.attn_v.weight"].ggml_type == (T.Q6_K if i in six else T.Q4_K)
        assert by[f"blk.{i}.ffn_down.weight"].ggml_type == (T.Q6_K if i in six else T.Q4_K)
        assert by[f"blk.{i}.attn_q.weight"].ggml_type == T.Q4_K
    counts = {}
    for c in plan:
        counts[c.ggml_type] = counts.get(c.ggml_type, 0) + 1
    assert counts == {T.Q6_K: 1 + 2 * len(six), T.Q4_K: 1 + 7 * n - 2 * len(six), T.F32: 1 + 2 * n}


def test_moe_8_experts_rules():
    t = [("blk.0.attn_v.weight", (256, 256)), ("blk.0.attn_k.weight", (256, 256)), ("blk.0.attn_output.weight", (256, 256)),
         ("blk.0.ffn_down_exps.weight", (8, 256, 512)), ("blk.0.ffn_gate_inp.weight", (8, 256))]
    by = {c.name: c for c in plan_types(t, "Q4_K_M", n_layer=1, n_expert=8)}
    assert by["blk.0.attn_v.weight"].ggml_type == T.Q8_0
    assert by["blk.0.attn_k.weight"].ggml_type == T.Q8_0
    assert by["blk.0.attn_output.weight"].ggml_type == T.Q5_K
    assert by["blk.0.ffn_down_exps.weight"].ggml_type == T.Q6_K  # layer 0 of 1 parsed from the name
    assert not by["blk.0.ffn_gate_inp.weight"].quantized
    with pytest.raises(QuantizationError, match="bad layer"):
        plan_types([("blk.3.ffn_down_exps.weight", (8, 256, 512))], "Q4_K_M", n_layer=2, n_expert=8)


def test_ftype_ids_and_errors():
    assert FTYPE_IDS == {"Q8_0": 7, "Q4_K_M": 15}
    assert ftype_id("q4_k_m") == 15 and ftype_id(7) == 7
    with pytest.raises(QuantizationError, match="unsupported file type"):
        plan_types([], "Q5_K_M", 1)
    with pytest.raises(QuantizationError, match="duplicate"):
        plan_types([("a.weight", (32, 32)), ("a.weight", (32, 32))], "Q8_0", 1)
