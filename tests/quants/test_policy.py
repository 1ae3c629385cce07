"""llama-quantize's per-tensor type choice (dflash_gguf.quants.policy)."""
from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as T

from dflash_gguf.errors import QuantizationError
from dflash_gguf.quants.ftypes import (
    DEFAULT_TYPE,
    copy_file_type,
    ecmascript_regex,
    parse_ggml_type,
    parse_tensor_type,
    parse_tensor_type_file,
    plan_hparams,
    resolve_ftype,
)
from dflash_gguf.quants.policy import (
    FTYPE_IDS,
    Overrides,
    ftype_id,
    layer_of,
    llama_plan,
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
def test_q8_0_target_with_ne0_not_multiple_of_32_is_f16(ftype):
    # tensor_type_fallback: a 32-block target has no smaller block to demote to -> F16 (the
    # vendored llama.cpp; older ones aborted here)
    name = "output.weight" if ftype == "Q4_K_M" else "blk.0.attn_q.weight"
    (c,) = plan_types([(name, (64, 100))], ftype, 1)
    assert c.ggml_type == T.F16 and c.reason.endswith("ne0 % 32 != 0: Q8_0 → F16")


def test_a_block_over_32_without_fallback_aborts():
    with pytest.raises(QuantizationError, match='no tensor type fallback is defined for type q8_K"'):
        plan_types([("blk.0.attn_q.weight", (64, 288))], "Q4_K_M", 1,
                   overrides=Overrides(tensor_types=[("attn_q", "q8_K")]))
    with pytest.raises(QuantizationError, match="no tensor type fallback is defined for type q1_0"):
        llama_plan([("blk.0.attn_q.weight", (64, 96))], "Q1_0", 1)


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
    assert FTYPE_IDS == {"Q8_0": 7, "Q6_K": 18, "Q5_K_M": 17, "Q5_K_S": 16, "Q5_1": 9, "Q5_0": 8, "Q4_K_M": 15,
                         "Q4_K_S": 14, "Q4_1": 3, "Q4_0": 2, "Q3_K_L": 13, "Q3_K_M": 12, "Q3_K_S": 11, "Q2_K": 10,
                         "IQ4_XS": 30, "IQ4_NL": 25, "F16": 1, "BF16": 32, "F32": 0, "COPY": 0}
    assert ftype_id("q4_k_m") == 15 and ftype_id(7) == 7
    with pytest.raises(QuantizationError, match="unsupported file type 'Q9_K'.*Q4_K_M"):
        plan_types([], "Q9_K", 1)
    with pytest.raises(QuantizationError, match="duplicate"):
        plan_types([("a.weight", (32, 32)), ("a.weight", (32, 32))], "Q8_0", 1)



# --- file type names, aliases and ids (quantize.cpp's try_parse_ftype) --------------------------------
@pytest.mark.parametrize("spelling,want", [
    ("q4_k", "Q4_K_M"), ("Q5_K", "Q5_K_M"), ("q3_K", "Q3_K_M"), ("iq4_xs", "IQ4_XS"), ("Copy", "COPY"),
    (0, "F32"), ("0", "F32"), (12, "Q3_K_M"), ("15", "Q4_K_M"), (" 7 ", "Q8_0"), ("7abc", "Q8_0"),  # std::stoi
    (32, "BF16"), ("iq2_xxs", "IQ2_XXS"), (21, "Q2_K_S"),
])
def test_resolve_ftype(spelling, want):
    assert resolve_ftype(spelling) == want


@pytest.mark.parametrize("bad", ["q4_k_x", "", "abc7", 99, 5, True, None])
def test_resolve_ftype_refuses(bad):
    with pytest.raises(QuantizationError, match="unsupported file type"):
        resolve_ftype(bad)


def test_default_types():
    assert DEFAULT_TYPE == {
        "Q8_0": T.Q8_0, "Q6_K": T.Q6_K, "Q5_K_M": T.Q5_K, "Q5_K_S": T.Q5_K, "Q5_1": T.Q5_1, "Q5_0": T.Q5_0,
        "Q4_K_M": T.Q4_K, "Q4_K_S": T.Q4_K, "Q4_1": T.Q4_1, "Q4_0": T.Q4_0, "Q3_K_L": T.Q3_K, "Q3_K_M": T.Q3_K,
        "Q3_K_S": T.Q3_K, "Q2_K": T.Q2_K, "IQ4_XS": T.IQ4_XS, "IQ4_NL": T.IQ4_NL, "F16": T.F16, "BF16": T.BF16,
        "F32": T.F32, "COPY": T.F32}


@pytest.mark.parametrize("ftype,says", [
    ("IQ2_XXS", "offending tensor: blk.0.attn_q.weight, target type: iq2_xxs "),
    ("IQ1_M", "offending tensor: blk.0.attn_q.weight, target type: iq1_m "),
    ("Q2_K_S", "offending tensor: blk.0.attn_q.weight, target type: q2_K "),
    ("IQ3_XXS", "offending tensor: blk.0.attn_q.weight, target type: iq2_s "),  # attn_q: IQ3_XXS -> IQ2_S
])
def test_importance_matrix_types_are_refused_as_llama_quantize_does(ftype, says):
    t = [("token_embd.weight", (16, 256)), ("blk.0.attn_q.weight", (64, 256)), ("blk.1.attn_q.weight", (64, 256))]
    with pytest.raises(QuantizationError, match="this quantization requires an importance matrix!") as e:
        plan_types(t, ftype, 2)
    assert says in str(e.value)


def test_importance_matrix_type_accepted_by_llama_quantize_is_still_refused():
    # every IQ3_XXS target falls back (ne0 = 64): llama-quantize accepts; we do not offer the type
    t = [("blk.0.attn_q.weight", (64, 64)), ("blk.0.ffn_up.weight", (64, 256))]
    assert {c.ggml_type for c in llama_plan(t, "IQ3_XS", 1)} == {T.IQ4_NL, T.IQ3_S}
    with pytest.raises(QuantizationError, match="IQ3_XS needs an importance matrix in llama-quantize"):
        plan_types(t, "IQ3_XS", 1)


@pytest.mark.parametrize("ftype", ["IQ3_S", "IQ3_M", "TQ1_0", "TQ2_0", "Q1_0", "Q2_0"])
def test_types_without_a_quantizer_are_refused(ftype):
    with pytest.raises(QuantizationError, match=f"{ftype} is not supported by dflash_gguf"):
        plan_types([("blk.0.attn_q.weight", (64, 256))], ftype, 1)


def test_mxfp4_moe_is_written_only_where_no_tensor_needs_an_mxfp4_encoding():
    """MXFP4_MOE: experts MXFP4, the rest Q8_0. Experts already MXFP4 (a DeepSeek-V4 DSpark
    draft) are copied and the file is written; experts in floats would need an MXFP4 encoder."""
    exps, shexp = ("blk.0.ffn_up_exps.weight", (4, 64, 256)), ("blk.0.ffn_up_shexp.weight", (64, 256))
    plan = plan_types([(*exps, T.MXFP4), (*shexp, T.BF16)], "MXFP4_MOE", 1, n_expert=4)
    assert [(c.name, c.ggml_type) for c in plan] == [(exps[0], T.MXFP4), (shexp[0], T.Q8_0)]
    with pytest.raises(QuantizationError, match="MXFP4_MOE is not supported by dflash_gguf .*already are MXFP4"):
        plan_types([(*exps, T.F16), (*shexp, T.BF16)], "MXFP4_MOE", 1, n_expert=4)
    # a dense drafter: no expert tensor, everything Q8_0
    assert {c.ggml_type for c in plan_types([("blk.0.attn_q.weight", (64, 256), T.F16)], "MXFP4_MOE", 1)} == {T.Q8_0}


# --- the mixes beyond Q8_0 / Q4_K_M (hand-derived from llama_tensor_get_type_impl) -------------------------
def layers(n, kinds=("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"), ne0=256):
    return [(f"blk.{i}.{k}.weight", (64, ne0)) for i in range(n) for k in kinds]


def types_of(plan, kind):
    return [c.ggml_type for c in plan if c.name.endswith(f".{kind}.weight")]


def test_q3_k_m():
    plan = plan_types(layers(16), "Q3_K_M", 16)
    assert types_of(plan, "attn_v") == [T.Q5_K, T.Q5_K] + [T.Q4_K] * 14  # i_attention_wv < 2
    assert types_of(plan, "ffn_down") == [T.Q5_K] + [T.Q4_K] * 15  # i < 16/16, then not falcon -> Q4_K
    assert set(types_of(plan, "attn_output")) == {T.Q4_K} and set(types_of(plan, "attn_q")) == {T.Q3_K}


@pytest.mark.parametrize("gqa,attn_v", [(1, T.Q3_K), (4, T.Q4_K)])
def test_q2_k(gqa, attn_v):
    plan = plan_types(layers(2), "Q2_K", 2, n_gqa=gqa)
    assert set(types_of(plan, "attn_v")) == {attn_v}
    assert set(types_of(plan, "ffn_down")) == {T.Q3_K} and set(types_of(plan, "attn_output")) == {T.Q3_K}
    assert set(types_of(plan, "ffn_up")) == {T.Q2_K}


def test_q4_k_s_and_q5_k_m():
    plan = plan_types(layers(16), "Q4_K_S", 16)
    assert types_of(plan, "attn_v") == [T.Q5_K] * 4 + [T.Q4_K] * 12
    assert types_of(plan, "ffn_down") == [T.Q5_K] * 2 + [T.Q4_K] * 14
    plan = plan_types(layers(8), "Q5_K_M", 8)
    six = [T.Q6_K if use_more_bits(i, 8) else T.Q5_K for i in range(8)]
    assert types_of(plan, "attn_v") == six and types_of(plan, "ffn_down") == six


@pytest.mark.parametrize("gqa", [1, 4])
@pytest.mark.parametrize("ftype", ["IQ4_NL", "IQ4_XS"])
def test_iq4(ftype, gqa):
    plan = plan_types(layers(16), ftype, 16, n_gqa=gqa)
    base = T[ftype]
    assert types_of(plan, "ffn_down") == [T.Q5_K] * 2 + [base] * 14
    assert set(types_of(plan, "attn_v")) == {T.Q5_K if gqa >= 4 else base}


def test_70b_bumps_attn_v_and_falcon_rules():
    plan = plan_types(layers(8, ("attn_v",)), "Q3_K_S", 8, is_70b=True)
    assert set(types_of(plan, "attn_v")) == {T.Q5_K}
    t = [("output.weight", (16, 256))] + layers(16, ("attn_output", "ffn_down"))
    plan = plan_types(t, "Q4_K_M", 16, arch="falcon")
    assert plan[0].ggml_type == T.Q8_0  # falcon's output
    assert types_of(plan, "ffn_down") == [T.Q6_K] + [T.Q5_K if use_more_bits(i, 16) else T.Q4_K for i in range(1, 16)]
    assert set(types_of(plan_types(t, "Q3_K_L", 16, arch="falcon"), "attn_output")) == {T.Q4_K}


def test_glm5_next_rules():
    t = [("blk.0.attn_q_a.weight", (64, 256)), ("blk.0.indexer.proj.weight", (64, 256)), ("blk.0.hc_x.weight", (64, 256))]
    by = {c.name: c for c in plan_types(t, "Q4_K_M", 1, arch="glm5-next")}
    assert by["blk.0.attn_q_a.weight"].ggml_type == T.Q8_0
    assert not by["blk.0.indexer.proj.weight"].quantized and not by["blk.0.hc_x.weight"].quantized
    assert all(c.ggml_type == T.Q4_K for c in plan_types(t, "Q4_K_M", 1, arch="llama"))


@pytest.mark.parametrize("ftype,want", [("F16", T.F16), ("BF16", T.BF16), ("F32", T.F32)])
def test_float_file_types_take_no_mix_and_no_tensor_type(ftype, want):
    t = [("output.weight", (16, 100)), ("blk.0.attn_v.weight", (64, 100)), ("blk.0.attn_norm.weight", (100,))]
    ov = Overrides(tensor_types=[("attn_v", "q8_0")])
    by = {c.name: c.ggml_type for c in plan_types(t, ftype, 1, overrides=ov)}
    assert by == {"output.weight": want, "blk.0.attn_v.weight": want, "blk.0.attn_norm.weight": T.F32}
    # --output-tensor-type applies before the file type's default
    by = {c.name: c.ggml_type for c in plan_types(t[:1], ftype, 1, overrides=Overrides(output_tensor_type="f32"))}
    assert by == {"output.weight": T.F32}


def test_copy_keeps_every_type():
    t = [("output.weight", (16, 256), T.BF16), ("blk.0.attn_v.weight", (64, 256), T.F16)]
    plan = plan_types(t, "copy", 1, overrides=Overrides(output_tensor_type="q8_0"))
    assert [(c.ggml_type, c.quantized) for c in plan] == [(T.BF16, False), (T.F16, False)]


# --- overrides (llama_tensor_get_type) ---------------------------------------------------------------
def test_tensor_types_first_match_wins_and_skips_the_mix():
    ov = Overrides(tensor_types=[(r"blk\.1\.", "q4_0"), ("attn_v", "q8_0")])
    by = {c.name: c for c in plan_types(layers(2, ("attn_v", "attn_q")), "Q4_K_M", 2, overrides=ov)}
    assert by["blk.1.attn_v.weight"].ggml_type == T.Q4_0 and by["blk.0.attn_v.weight"].ggml_type == T.Q8_0
    assert by["blk.0.attn_q.weight"].ggml_type == T.Q4_K
    assert by["blk.1.attn_v.weight"].reason == r"--tensor-type blk\.1\.=q4_0 → Q4_0"


def test_a_manual_tensor_does_not_advance_the_counters():
    # Q3_K_M: the first two attn_v the mix sees are Q5_K; an overridden one is not seen
    ov = Overrides(tensor_types=[(r"blk\.0\.attn_v", "q8_0")])
    plan = plan_types(layers(4, ("attn_v",)), "Q3_K_M", 4, overrides=ov)
    assert types_of(plan, "attn_v") == [T.Q8_0, T.Q5_K, T.Q5_K, T.Q4_K]


def test_manual_types_fall_back():
    ov = Overrides(tensor_types=[("attn_q", "q6_K")])
    (c,) = plan_types([("blk.0.attn_q.weight", (64, 96))], "Q4_K_M", 1, overrides=ov)
    assert c.ggml_type == T.Q8_0 and c.reason.endswith("ne0 % 256 != 0: Q6_K → Q8_0")


def test_output_tensor_type():
    ov = Overrides(output_tensor_type="q4_K")
    # tied: token_embd takes it through the mix, and falls back
    (c,) = plan_types([("token_embd.weight", (16, 96))], "Q8_0", 1, overrides=ov)
    assert c.ggml_type == T.Q5_0
    # output.weight takes it as is: llama-quantize then asserts on the row size
    with pytest.raises(QuantizationError, match="tensor row size not divisible by block size of new type"):
        plan_types([("output.weight", (16, 96))], "Q8_0", 1, overrides=ov)
    (c,) = plan_types([("output.weight", (16, 512))], "Q8_0", 1, overrides=ov)
    assert c.ggml_type == T.Q4_K and "--output-tensor-type" in c.reason


def test_token_embedding_type():
    ov = Overrides(token_embedding_type="q5_1", tensor_types=[("per_layer", "q8_0")])
    t = [("token_embd.weight", (16, 96)), ("per_layer_token_embd.weight", (16, 96)), ("output.weight", (16, 256))]
    by = {c.name: c.ggml_type for c in plan_types(t, "Q4_K_M", 1, overrides=ov)}
    # per_layer_token_embd follows --token-embedding-type unless a --tensor-type pattern names it
    assert by == {"token_embd.weight": T.Q5_1, "per_layer_token_embd.weight": T.Q8_0, "output.weight": T.Q6_K}
    # an imatrix target on token_embd is no refusal (tensor_requires_imatrix exempts it)
    (c,) = plan_types([("token_embd.weight", (16, 256))], "Q4_K_M", 1,
                      overrides=Overrides(token_embedding_type="iq2_xxs"))
    assert c.ggml_type == T.IQ2_XXS


def test_pure_and_leave_output_tensor():
    t = [("output.weight", (16, 256)), ("token_embd.weight", (16, 256))] + layers(4, ("attn_v", "ffn_down"))
    plan = plan_types(t, "Q4_K_M", 4, overrides=Overrides(pure=True))
    assert {c.ggml_type for c in plan} == {T.Q4_K}
    by = {c.name: c for c in plan_types(t, "Q4_K_M", 4, overrides=Overrides(leave_output_tensor=True))}
    assert not by["output.weight"].quantized and by["output.weight"].reason == "--leave-output-tensor: kept F32"
    assert by["token_embd.weight"].ggml_type == T.Q4_K  # still untied


def test_a_tensor_type_needing_an_imatrix_is_refused():
    ov = Overrides(tensor_types=[("ffn_down", "iq2_xxs")])
    assert types_of(plan_types(layers(1, ("ffn_down",), ne0=96), "Q4_K_M", 1, overrides=ov), "ffn_down") == [T.IQ4_NL]
    with pytest.raises(QuantizationError, match="offending tensor: blk.0.ffn_down.weight, target type: iq2_xxs"):
        plan_types(layers(1, ("ffn_down",)), "Q4_K_M", 1, overrides=ov)


# --- option syntax -------------------------------------------------------------------------------
def test_parse_tensor_type():
    assert parse_tensor_type(r"ATTN_\D=Q8_0") == (r"attn_\d", T.Q8_0)  # the whole pattern lower-cased
    assert parse_tensor_type_file("attn_v=q8_0\n ffn_down=BF16 ") == [("attn_v", T.Q8_0), ("ffn_down", T.BF16)]
    for bad, says in [("attn_v", "malformed"), ("=q8_0", "missing tensor name"), ("attn=", "missing quantization type"),
                      ("attn=q9_0", "invalid quantization type 'q9_0'"),
                      ("a=b=q8_0", "invalid quantization type 'b=q8_0'")]:  # split at the first '='
        with pytest.raises(QuantizationError, match=says):
            parse_tensor_type(bad)
    assert parse_ggml_type("q4_k") == T.Q4_K and parse_ggml_type(T.F16) == T.F16
    with pytest.raises(QuantizationError, match="invalid ggml_type"):
        parse_ggml_type("q4_k_m")


@pytest.mark.parametrize("pattern,name,hit", [
    (r"[[:alpha:]]_v", "blk.0.attn_v.weight", True),  # a POSIX class, not a set of ':', 'a', 'l', ...
    (r"[]a]ttn", "blk.0.attn_q.weight", False),  # "[]" matches nothing
    (r"[^]ttn", "blk.0.attn_q.weight", True),  # "[^]" matches anything
    (r"\attn", "blk.0.attn_q.weight", True),  # an identity escape, not BEL
    (r"\cf\cf", "blk.0.ffn_up.weight", True),  # libstdc++ reads \cX as X
    (r"\0", "a\0b", True),
    (r"weight$", "x.weight\n", False),  # '$' is the end only
    (r"a.b", "a\nb", False),
    (r"a.b", "a\rb", False),
    (r"\w", "é", False),  # char-wise, C locale
    (r"^.{2}$", "é", True),  # two bytes
    (r"ffn_(up)\1", "ffn_upup", True),
])
def test_ecmascript_regex(pattern, name, hit):
    assert (ecmascript_regex(pattern).search(name.encode()) is not None) is hit


@pytest.mark.parametrize("pattern", [r"(?i)a", r"a{2,1}", r"x{,3}", r"a{", r"[[:foo:]]", "a\\", r"(a", r"[z-a]"])
def test_ecmascript_regex_refuses(pattern):
    with pytest.raises(QuantizationError, match="std::regex refuses it"):
        Overrides(tensor_types=[(pattern, "q8_0")])


# --- the model facts -----------------------------------------------------------------------------
def test_plan_hparams():
    kv = {"general.architecture": "llama", "llama.block_count": 80, "llama.attention.head_count": 64,
          "llama.attention.head_count_kv": 8}
    assert plan_hparams(kv) == {"n_layer": 80, "n_expert": 0, "n_gqa": 8, "arch": "llama", "is_70b": True}
    assert plan_hparams({**kv, "llama.attention.head_count_kv": 64})["is_70b"] is False  # 65B
    assert plan_hparams({**kv, "llama.expert_count": 8})["is_70b"] is False
    assert plan_hparams({**kv, "llama.nextn_predict_layers": 1})["is_70b"] is False
    q = {"general.architecture": "qwen2", "qwen2.block_count": 80, "qwen2.attention.head_count": [40] * 80}
    assert plan_hparams(q) == {"n_layer": 80, "n_expert": 0, "n_gqa": 1, "arch": "qwen2", "is_70b": True}
    d = {"general.architecture": "dflash", "dflash.block_count": 2, "dflash.attention.head_count_kv": 2}
    assert plan_hparams(d)["n_gqa"] == 0  # no head_count: 0 / 2
    with pytest.raises(QuantizationError, match="block_count"):
        plan_hparams({"general.architecture": "dflash"})


def test_copy_file_type():
    assert copy_file_type(7, [T.F32]) == 7
    assert copy_file_type(None, [T.F32, T.F16, T.F16, T.F32]) == 1 | 1024  # F16 reached 2 first
    assert copy_file_type(None, [T.BF16, T.F32, T.F32, T.BF16]) == 0 | 1024
    assert copy_file_type(None, []) == 1024
