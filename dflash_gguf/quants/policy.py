"""llama-quantize's per-tensor type choice, by GGUF tensor name and shape.

A pure re-statement of llama.cpp ``src/llama-quant.cpp`` (read at commit 007dbbf3) for the
file types ``Q8_0`` (ftype 7) and ``Q4_K_M`` (ftype 15), without user overrides
(``--tensor-type``, ``--output-tensor-type``, ``--pure``, ``--leave-output-tensor``) and
without an importance matrix. Works on any architecture's names: only substrings decide.

Not modelled (they need hparams llama.cpp has and a GGUF name list does not): Falcon's
ffn_down/attn_output rules and the LLaMA-70B attn_v bump to Q5_K. MoE is modelled through
``n_expert``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from ..errors import QuantizationError
from ..fileio.header_records import show

#: ``general.file_type`` values (llama_ftype) of the supported mixes.
FTYPE_IDS: dict[str, int] = {"Q8_0": 7, "Q4_K_M": 15}
#: llama_ftype_get_default_type
DEFAULT_TYPE: dict[str, T] = {"Q8_0": T.Q8_0, "Q4_K_M": T.Q4_K}


@dataclass(frozen=True)
class TypeChoice:
    name: str
    shape: tuple[int, ...]  # NumPy order: shape[-1] is ggml's ne0 (the row)
    ggml_type: T
    reason: str  # e.g. "attn_v: use_more_bits(2,5) → Q6_K", "1-D: kept F32"
    category: str  # llama-quant's tensor_category, lower case ("attn_v", "other", ...)
    quantized: bool  # False: stored in its input type, untouched


def resolve_ftype(ftype: str | int) -> str:
    """Canonical mix name (``"Q8_0"`` / ``"Q4_K_M"``) from a case-insensitive name or id."""
    if isinstance(ftype, int) and not isinstance(ftype, bool):
        for k, v in FTYPE_IDS.items():
            if v == ftype:
                return k
    elif isinstance(ftype, str) and ftype.strip().upper() in FTYPE_IDS:
        return ftype.strip().upper()
    raise QuantizationError(f"unsupported file type {ftype!r}; supported: {', '.join(FTYPE_IDS)}")


def ftype_id(ftype: str | int) -> int:
    """The ``general.file_type`` id of a mix (Q8_0 -> 7, Q4_K_M -> 15)."""
    return FTYPE_IDS[resolve_ftype(ftype)]


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
_ATTN_V_LIKE = frozenset({"attn_v", "attn_qkv", "attn_kv_b"})


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
_NEVER_NAMES = ("position_embd.weight", "token_types.weight")  # LLM_TENSOR_POS_EMBD / TOKEN_TYPES


def ggml_n_dims(shape: Sequence[int]) -> int:
    """ggml_n_dims on a NumPy-order shape: trailing ggml dims of size 1 do not count."""
    ne = list(reversed(tuple(shape)))
    for i in range(len(ne) - 1, 0, -1):
        if ne[i] > 1:
            return i + 1
    return 1


def quantization_block_reason(name: str, shape: Sequence[int]) -> str | None:
    """Why llama-quantize leaves this tensor in its input type, or None if it may quantize it."""
    if ggml_n_dims(shape) < 2:
        return "1-D"
    if not name.endswith("weight"):
        return "name does not end in 'weight'"
    if "_norm.weight" in name:
        return "norm (_norm.weight)"
    for sub in _NEVER_SUBSTRINGS:
        if sub in name:
            return f"never quantized ({sub})"
    if name in _NEVER_NAMES:
        return f"never quantized ({name})"
    return None


def tensor_allows_quantization(name: str, shape: Sequence[int]) -> bool:
    return quantization_block_reason(name, shape) is None


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


def _fallback(name: str, t: T, ne0: int) -> tuple[T, str | None]:
    bs = _block(t)
    if ne0 % bs == 0:
        return t, None
    if t not in _FALLBACK:
        raise QuantizationError(
            f"tensor '{show(name)}': ne0 = {ne0} is not divisible by {bs} (required for {t.name}) and "
            f"llama-quantize has no tensor type fallback for {t.name}; it aborts here too"
        )
    f = _FALLBACK[t]
    if ne0 % _block(f) != 0:
        return T.F16, f"ne0 % {_block(f)} != 0: {t.name} → F16"
    return f, f"ne0 % {bs} != 0: {t.name} → {f.name}"


# --- the plan -----------------------------------------------------------------------------
def plan_types(
    tensors: Sequence[tuple[str, tuple[int, ...]]] | Sequence[tuple[str, tuple[int, ...], T]],
    ftype: str | int,
    n_layer: int,
    *,
    n_expert: int = 0,
) -> list[TypeChoice]:
    """The ggml type llama-quantize gives each tensor, in llama-quantize's processing order.

    ``tensors``: ``(name, shape)`` with NumPy-order shapes (last axis = ne0), optionally
    ``(name, shape, input_type)``; tensors llama-quantize leaves alone keep ``input_type``
    (default F32, what converters write for norms). ``n_layer``: the model's block_count
    (ffn_down's use_more_bits denominator). ``n_expert``: MoE expert count (0/1 = dense).

    Raises:
        QuantizationError: unknown ftype, duplicate names, a Q8_0 target whose ne0 is not a
            multiple of 32 (llama-quantize aborts: no fallback), or an unparsable MoE layer.
    """
    mix = resolve_ftype(ftype)
    default = DEFAULT_TYPE[mix]
    entries: dict[str, tuple[tuple[int, ...], T]] = {}
    for item in tensors:
        name, shape = item[0], tuple(int(s) for s in item[1])
        in_type = item[2] if len(item) > 2 else T.F32
        if name in entries:
            raise QuantizationError(f"duplicate tensor name '{show(name)}'")
        entries[name] = (shape, in_type)

    order = processing_order(list(entries))
    cats = {n: tensor_category(n) for n in order}
    n_attention_wv = sum(c in _ATTN_V_LIKE for c in cats.values())  # over all tensors
    tied = "output" not in cats.values()  # no output.weight: token_embd doubles as output
    i_attention_wv = i_ffn_down = i_ffn_gate = i_ffn_up = 0
    moe = max(1, n_expert) > 1

    def layer_info(i_layer: int, name: str) -> int:
        if moe:  # experts are not consecutive: parse the layer from the name
            i_layer = layer_of(name)
            if not _BLK.match(name):
                raise QuantizationError(f"failed to determine layer for tensor '{show(name)}'")
            if i_layer < 0 or i_layer >= n_layer:
                raise QuantizationError(f"bad layer {i_layer} for tensor '{show(name)}'; must be in [0, {n_layer})")
        return i_layer

    plan: list[TypeChoice] = []
    for name in order:
        shape, in_type = entries[name]
        cat = cats[name]
        blocked = quantization_block_reason(name, shape)
        if blocked is not None:
            plan.append(TypeChoice(name, shape, in_type, f"{blocked}: kept {in_type.name}", cat, False))
            continue
        ne0 = shape[-1]
        new, why = default, f"{cat}: default {default.name}"
        # llama_tensor_get_type_impl, restricted to Q8_0 / Q4_K_M
        if cat == "output" or (tied and cat == "token_embd"):
            label = "output" if cat == "output" else "token_embd (tied, no output.weight)"
            if ne0 % _block(new) != 0:
                new, why = T.Q8_0, f"{label}: ne0 % {_block(default)} != 0 → Q8_0"
            elif new != T.Q8_0:
                new, why = T.Q6_K, f"{label} → Q6_K"
            else:
                why = f"{label} → Q8_0"
        elif cat == "token_embd":
            why = f"token_embd (output.weight exists): default {default.name}"
        elif cat in _ATTN_V_LIKE:
            if mix == "Q4_K_M" and use_more_bits(i_attention_wv, n_attention_wv):
                new = T.Q6_K
                why = f"{cat}: use_more_bits({i_attention_wv},{n_attention_wv}) → Q6_K"
            elif mix == "Q4_K_M":
                why = f"{cat}: not use_more_bits({i_attention_wv},{n_attention_wv}) → Q4_K"
            if n_expert == 8:
                new, why = T.Q8_0, f"{cat}: 8-expert model → Q8_0"
            i_attention_wv += 1
        elif cat == "attn_k":
            if n_expert == 8:
                new, why = T.Q8_0, "attn_k: 8-expert model → Q8_0"
        elif cat == "ffn_down":
            i_layer = layer_info(i_ffn_down, name)
            if mix == "Q4_K_M":
                if use_more_bits(i_layer, n_layer):
                    new, why = T.Q6_K, f"ffn_down: use_more_bits({i_layer},{n_layer}) → Q6_K"
                else:
                    why = f"ffn_down: not use_more_bits({i_layer},{n_layer}) → Q4_K"
            i_ffn_down += 1
        elif cat == "attn_output":
            if n_expert == 8 and mix == "Q4_K_M":
                new, why = T.Q5_K, "attn_output: 8-expert model → Q5_K"
        elif cat == "ffn_gate":
            layer_info(i_ffn_gate, name)
            i_ffn_gate += 1
        elif cat == "ffn_up":
            layer_info(i_ffn_up, name)
            i_ffn_up += 1

        fb, fb_why = _fallback(name, new, ne0)
        if fb_why is not None:
            new, why = fb, f"{why}; {fb_why}"
        plan.append(TypeChoice(name, shape, new, why, cat, True))
    return plan
