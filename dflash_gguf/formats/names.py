"""The one table of tensor names: checkpoint (Hugging Face) name ↔ GGUF name.

Drafters and the targets they pair with (Qwen3/Llama-style decoders) share one per-layer
table; a drafter format only chooses three names of its own (fc, hidden norm, pre-FFN norm,
see ``Format``). Everything that maps names — convert, retarget, check, compare, the torch
reference and parity's target quantization — reads these tables, nothing else.
"""
from __future__ import annotations

import re

# Per-layer tensors: checkpoint suffix (after "layers.N.") -> GGUF suffix (after "blk.N.").
# The pre-FFN norm is format-specific and filled in by each format (PRE_FFN_NORM).
PRE_FFN_NORM = "post_attention_layernorm.weight"
LAYER_TENSORS: dict[str, str] = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    # DFlash2 grouped dynamic causal conv (mainline names; base kernels carry no ".weight" on disk)
    "attention_conv.base_kernel": "attn_conv_base",  # no suffix: the runtime loads it by this name (F32)
    "attention_conv.kernel_projection.weight": "attn_conv_proj.weight",
    "mlp_conv.base_kernel": "ffn_conv_base",
    "mlp_conv.kernel_projection.weight": "ffn_conv_proj.weight",
    # MiMo: a learned per-head sink logit; on disk without ".weight" (mainline appends it)
    "self_attn.attention_sink_bias": "attn_sinks.weight",
}
DFLASH2_LAYER = ("attention_conv.base_kernel", "attention_conv.kernel_projection.weight",
                 "mlp_conv.base_kernel", "mlp_conv.kernel_projection.weight")
# Global tensors shared by all formats (fc and hidden_norm are per format).
FC, HIDDEN_NORM = "fc.weight", "hidden_norm.weight"
GLOBAL_TENSORS: dict[str, str] = {
    "norm.weight": "output_norm.weight",
    # DFlash2 candidate selector; codebooks have no ".weight" on disk (the torch loader remaps them)
    "candidate_selector.predecessor_codebook": "selector_predecessor.weight",
    "candidate_selector.successor_codebook": "selector_successor.weight",
    "candidate_selector.hidden_projection.weight": "selector_hidden.weight",
}
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
OPTIONAL_TENSORS: dict[str, str] = {"embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight"}
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
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight"}
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
