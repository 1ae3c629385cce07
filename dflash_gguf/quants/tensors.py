"""Which tensors llama-quantize re-encodes and how it sees them, by GGUF name and shape: the
category of a name (``tensor_category``), the tensors it never quantizes
(``tensor_allows_quantization``), the layer a name belongs to, its processing order, the
``use_more_bits`` layer pattern, and the fallback when a row does not divide a type's block
(``tensor_type_fallback``). Restated from ``src/llama-quant.cpp`` as vendored in
llama-cpp-python 0.3.36; the per-type mixes that use these are :mod:`.policy`.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import QuantizationError
from ..fileio.gguf_constants import GGML_QUANT_SIZES, GGMLQuantizationType as T
from ..fileio.header_records import show
from .ftypes import ggml_type_name


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant's use_more_bits: the first and last eighth of the layers, and every third
    in between (C integer division; i_layer >= n_layers/8 in the last term)."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


# --- tensor_get_category: exact names first, then substrings, first hit wins -----------------
_CATEGORY_SUBSTRINGS = (
    ("attn_qkv.weight", "attn_qkv"),
    ("attn_kv_b.weight", "attn_kv_b"),
    ("attn_v.weight", "attn_v"),
    ("attn_k.weight", "attn_k"),
    ("attn_q.weight", "attn_q"),
    ("attn_output.weight", "attn_output"),
    ("ffn_up", "ffn_up"),
    ("ffn_gate", "ffn_gate"),
    ("ffn_down", "ffn_down"),
)
_ATTN_V_LIKE = frozenset({"attn_v", "attn_qkv", "attn_kv_b"})  # category_is_attn_v


def tensor_category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for sub, cat in _CATEGORY_SUBSTRINGS:
        if sub in name:
            return cat
    return "other"


# --- tensor_allows_quantization -----------------------------------------------------------
_NEVER_SUBSTRINGS = (
    "ffn_gate_inp.weight",  # expert gating
    "ffn_gate_tid2eid.weight",  # DeepSeek-V4 routing table
    "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight",
    "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
    "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
    "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
    "a.rvq.codebook", "mm.a.code_embd",
)
_GLM5_NEXT_NEVER = ("hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
                    "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight",
                    "ssm_g_b.weight", "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight",
                    "attn_v_b.weight")
_NEVER_NAMES = ("position_embd.weight", "token_types.weight")  # LLM_TENSOR_POS_EMBD / TOKEN_TYPES


def ggml_n_dims(shape: Sequence[int]) -> int:
    """ggml_n_dims on a NumPy-order shape: trailing ggml dims of size 1 do not count."""
    ne = list(reversed(tuple(shape)))
    for i in range(len(ne) - 1, 0, -1):
        if ne[i] > 1:
            return i + 1
    return 1


def quantization_block_reason(name: str, shape: Sequence[int], *, arch: str = "", leave_output_tensor: bool = False,
                              only_copy: bool = False) -> str | None:
    """Why llama-quantize leaves this tensor in its input type, or None if it may quantize it."""
    if only_copy:
        return "COPY"
    if ggml_n_dims(shape) < 2:
        return "1-D"
    if not name.endswith("weight"):
        return "name does not end in 'weight'"
    if "_norm.weight" in name:
        return "norm (_norm.weight)"
    if leave_output_tensor and name == "output.weight":
        return "--leave-output-tensor"
    for sub in _NEVER_SUBSTRINGS + (_GLM5_NEXT_NEVER if arch == "glm5-next" else ()):
        if sub in name:
            return f"never quantized ({sub})"
    if name in _NEVER_NAMES:
        return f"never quantized ({name})"
    return None


def tensor_allows_quantization(name: str, shape: Sequence[int], *, arch: str = "", leave_output_tensor: bool = False,
                               only_copy: bool = False) -> bool:
    """llama-quant.cpp's tensor_allows_quantization."""
    return quantization_block_reason(name, shape, arch=arch, leave_output_tensor=leave_output_tensor,
                                     only_copy=only_copy) is None


# --- weight_name_comparer -----------------------------------------------------------------
# sscanf(name, "blk.%d.", &layer): "blk." then %d (C whitespace, optional sign, digits); the
# trailing "." need not match for the layer to be assigned. No match: layer -1.
_BLK = re.compile(r"blk\.[ \t\n\v\f\r]*([+-]?[0-9]+)")


def layer_of(name: str) -> int:
    m = _BLK.match(name)
    return int(m.group(1)) if m else -1


def processing_order(names: Sequence[str]) -> list[str]:
    """llama-quantize's tensor order (the loader's std::map with weight_name_comparer):
    non-``blk.N.`` names first, then by layer number, ties by byte-wise name."""
    return sorted(names, key=lambda n: (layer_of(n), n.encode("utf-8")))


# --- tensor_type_fallback -----------------------------------------------------------------
_FALLBACK = {
    T.Q4_K: T.Q5_0,
    T.Q5_K: T.Q5_1,
    T.Q6_K: T.Q8_0,
    T.Q2_K: T.Q4_0,
    T.Q3_K: T.Q4_0,
    T.TQ1_0: T.Q4_0,
    T.TQ2_0: T.Q4_0,
    **{t: T.IQ4_NL for t in (T.IQ1_S, T.IQ1_M, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ4_XS)},
}


def _block(t: T) -> int:
    return GGML_QUANT_SIZES[t][0]


def tensor_type_fallback(name: str, t: T, ne0: int) -> tuple[T, str | None]:
    """tensor_type_fallback: ``t`` if its block divides ``ne0``, else the fallback type (and why).
    A 32-block type has no smaller block to demote to: F16, as for a fallback that does not fit.

    Raises:
        QuantizationError: no fallback is defined for ``t`` (a block over 32 outside the table).
    """
    bs = _block(t)
    if ne0 % bs == 0:
        return t, None
    if t in _FALLBACK:
        f = _FALLBACK[t]
    elif bs <= 32:
        f = t
    else:
        raise QuantizationError(
            f"tensor '{show(name)}': ne0 = {ne0} is not divisible by {bs} (required for {t.name}) and "
            f"llama-quantize has no tensor type fallback for {t.name} (\"no tensor type fallback is defined for "
            f"type {ggml_type_name(t)}\"); it aborts here too")
    if ne0 % _block(f) != 0:
        return T.F16, f"ne0 % {_block(f)} != 0: {t.name} → F16"
    return f, f"ne0 % {bs} != 0: {t.name} → {f.name}"
