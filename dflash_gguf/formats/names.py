"""The one table of tensor names: checkpoint (Hugging Face) name ↔ GGUF name.

Drafters and the targets they pair with (Qwen3/Llama-style decoders) share one per-layer
table; a drafter format only chooses three names of its own (fc, hidden norm, pre-FFN norm,
see ``Format``). Everything that maps names — convert, retarget, check, compare, the torch
reference and parity's target quantization — reads these tables, nothing else.
"""
from __future__ import annotations

import re
from typing import NamedTuple

# Each checkpoint tensor: its GGUF name, the shape config.json implies for it (numpy order, in the
# sizes below) and when a drafter has it. Sizes: H hidden, I intermediate, D head_dim, N heads,
# Q = N·D, KV = kv heads·D, K conv kernel, P conv projection rows (2·K·H / group), R selector
# rank, V vocab, F fc input (taps × target hidden). When: "" every drafter, "bias" attention_bias,
# "sinks" attention_sink_bias (MiMo), "dflash2" DFlash2 only, None never implied by the config
# alone (mapped when a family or an export adds it).
class Tensor(NamedTuple):
    gguf: str | None  # None: the drafter format names it (fc, hidden norm, pre-FFN norm: ``Format``)
    shape: tuple[str, ...] = ()
    when: str | None = ""


# Per-layer tensors: checkpoint suffix (after "layers.N.") -> GGUF suffix (after "blk.N.").
PRE_FFN_NORM = "post_attention_layernorm.weight"
LAYER: dict[str, Tensor] = {
    "input_layernorm.weight": Tensor("attn_norm.weight", ("H",)),
    PRE_FFN_NORM: Tensor(None, ("H",)),
    "self_attn.q_proj.weight": Tensor("attn_q.weight", ("Q", "H")),
    "self_attn.k_proj.weight": Tensor("attn_k.weight", ("KV", "H")),
    "self_attn.v_proj.weight": Tensor("attn_v.weight", ("KV", "H")),
    "self_attn.o_proj.weight": Tensor("attn_output.weight", ("H", "Q")),
    "self_attn.q_proj.bias": Tensor("attn_q.bias", ("Q",), "bias"),
    "self_attn.k_proj.bias": Tensor("attn_k.bias", ("KV",), "bias"),
    "self_attn.v_proj.bias": Tensor("attn_v.bias", ("KV",), "bias"),
    "self_attn.o_proj.bias": Tensor("attn_output.bias", (), None),
    "self_attn.q_norm.weight": Tensor("attn_q_norm.weight", ("D",)),
    "self_attn.k_norm.weight": Tensor("attn_k_norm.weight", ("D",)),
    "mlp.gate_proj.weight": Tensor("ffn_gate.weight", ("I", "H")),
    "mlp.up_proj.weight": Tensor("ffn_up.weight", ("I", "H")),
    "mlp.down_proj.weight": Tensor("ffn_down.weight", ("H", "I")),
    # DFlash2 grouped dynamic causal conv (mainline names; base kernels carry no ".weight" on disk,
    # and the runtime loads them by these suffix-less names, F32)
    "attention_conv.base_kernel": Tensor("attn_conv_base", ("2", "K", "H"), "dflash2"),
    "attention_conv.kernel_projection.weight": Tensor("attn_conv_proj.weight", ("P", "H"), "dflash2"),
    "mlp_conv.base_kernel": Tensor("ffn_conv_base", ("2", "K", "H"), "dflash2"),
    "mlp_conv.kernel_projection.weight": Tensor("ffn_conv_proj.weight", ("P", "H"), "dflash2"),
    # MiMo: a learned per-head sink logit; on disk without ".weight" (mainline appends it)
    "self_attn.attention_sink_bias": Tensor("attn_sinks.weight", ("N",), "sinks"),
}
LAYER_TENSORS: dict[str, str] = {k: t.gguf for k, t in LAYER.items() if t.gguf is not None}
DFLASH2_LAYER = tuple(k for k, t in LAYER.items() if t.when == "dflash2")
# Global tensors (fc and hidden_norm are named by each format).
FC, HIDDEN_NORM = "fc.weight", "hidden_norm.weight"
GLOBAL: dict[str, Tensor] = {
    FC: Tensor(None, ("H", "F")),
    HIDDEN_NORM: Tensor(None, ("H",)),
    "norm.weight": Tensor("output_norm.weight", ("H",)),
    # DFlash2 candidate selector; codebooks have no ".weight" on disk (the torch loader remaps them)
    "candidate_selector.hidden_projection.weight": Tensor("selector_hidden.weight", ("R", "H"), "dflash2"),
    "candidate_selector.predecessor_codebook": Tensor("selector_predecessor.weight", ("V", "R"), "dflash2"),
    "candidate_selector.successor_codebook": Tensor("selector_successor.weight", ("V", "R"), "dflash2"),
}
GLOBAL_TENSORS: dict[str, str] = {k: t.gguf for k, t in GLOBAL.items() if t.gguf is not None}
# DSpark heads (mainline names): markov_w1 is target-vocab indexed, markov_w2 emits the draft vocab
DSPARK_GLOBAL: dict[str, str] = {
    "markov_head.markov_w1.weight": "markov_w1.weight",
    "markov_head.markov_w2.weight": "markov_w2.weight",
    "confidence_head.proj.weight": "conf_proj.weight",
    "confidence_head.proj.bias": "conf_proj.bias",
}
GLOBAL_TENSORS.update(DSPARK_GLOBAL)
D2T = "d2t"  # DSpark reduced vocab: draft id -> absolute target id, I64, no ".weight" (mainline's name)
T2D = "t2d"  # DSpark reduced vocab: target-side membership mask; only the trainer uses it (dropped)
# Gemma4 DSpark's own names (mainline's Gemma4DSparkModel): the sandwich norms, the per-layer
# output scale, and the confidence head's spelling. Kept out of LAYER_TENSORS on purpose: its
# post_attention_layernorm is a post-attention norm, not the Qwen pre-FFN norm of the same name.
GEMMA4_DSPARK_LAYER: dict[str, str] = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "layer_scalar": "layer_output_scale.weight",  # no ".weight" on disk (mainline appends it)
}
GEMMA4_DSPARK_GLOBAL: dict[str, str] = {"confidence_proj.weight": "conf_proj.weight",
                                        "confidence_proj.bias": "conf_proj.bias"}
# Optional tensors some exports ship; the runtimes borrow the target's when absent.
TOKEN_EMBD, OUTPUT = "token_embd.weight", "output.weight"
OPTIONAL_TENSORS: dict[str, str] = {"embed_tokens.weight": TOKEN_EMBD, "lm_head.weight": OUTPUT}
# Generated by the converter, from no checkpoint tensor: llama3 rope factors, Gemma4 proportional rope
ROPE_FREQS = "rope_freqs.weight"
# Known extras with an explicit rule: dropped, and reported as such.
# (DSpark drafters keep d2t and drop t2d: convert/dspark.py claims both before this table is read.)
DROPPED_TENSORS: dict[str, str] = {
    # mainline's DFlashModel has no GGUF name for either and stops ("Can not map tensor 'model.d2t'")
    "d2t": "reduced-vocab map; a DFlash drafter drafts over the target's whole vocabulary, so no runtime reads it",
    "t2d": "reduced-vocab map; a DFlash drafter drafts over the target's whole vocabulary, so no runtime reads it",
}

# A target's own tensors as llama.cpp's converter names them: the same per-layer table with
# llama.cpp's standard pre-FFN norm (DFlash2's conv tensors exist only in drafters).
TARGET_LAYER_TENSORS: dict[str, str] = {
    **{k: v for k, v in LAYER_TENSORS.items() if k not in DFLASH2_LAYER}, PRE_FFN_NORM: "ffn_norm.weight"}
TARGET_GLOBAL_TENSORS: dict[str, str] = {
    "model.embed_tokens.weight": TOKEN_EMBD, "model.norm.weight": GLOBAL_TENSORS["norm.weight"],
    "lm_head.weight": OUTPUT}
# Per-tensor scales of a pre-quantized (NVFP4) weight that mainline's loader reads for any
# architecture (llama-model.cpp, the generic pass after load_arch_tensors): "blk.N.<w>.scale" and
# "blk.N.<w>.input_scale" beside "blk.N.<w>.weight"; and the dflash loader's own "fc.scale".
SCALED_LAYER_WEIGHTS = frozenset({
    "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_gate", "ffn_gate", "ffn_down", "ffn_up",
    "ffn_gate_shexp", "ffn_down_shexp", "ffn_up_shexp", "ffn_gate_exps", "ffn_down_exps", "ffn_up_exps",
})
WEIGHT_SCALES = (".scale", ".input_scale")
FC_SCALE = "fc.scale"

LAYER_RE = re.compile(r"^layers\.(\d+)\.(.+)$")
BLK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


def target_gguf_name(hf: str) -> str | None:
    """GGUF name of a target checkpoint tensor (``model.layers.N.…`` / globals), or None."""
    if hf in TARGET_GLOBAL_TENSORS:
        return TARGET_GLOBAL_TENSORS[hf]
    m = LAYER_RE.match(hf.removeprefix("model."))
    if m and m.group(2) in TARGET_LAYER_TENSORS:
        return f"blk.{m.group(1)}.{TARGET_LAYER_TENSORS[m.group(2)]}"
    return None


def target_hf_name(gguf_name: str) -> str | None:
    """Inverse of ``target_gguf_name``."""
    for hf, g in TARGET_GLOBAL_TENSORS.items():
        if g == gguf_name:
            return hf
    m = BLK_RE.match(gguf_name)
    if m:
        for hf, g in TARGET_LAYER_TENSORS.items():
            if g == m.group(2):
                return f"model.layers.{m.group(1)}.{hf}"
    return None
