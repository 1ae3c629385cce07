"""llama-quantize's per-tensor type choice, by GGUF tensor name and shape.

A pure re-statement of llama.cpp ``src/llama-quant.cpp`` as vendored in llama-cpp-python 0.3.36:
``tensor_allows_quantization``, ``llama_tensor_get_type`` (the user overrides: ``--tensor-type``
patterns, ``--output-tensor-type``, ``--token-embedding-type``, ``--pure``), its
``llama_tensor_get_type_impl`` (every file type's mix), ``tensor_type_fallback``, the counters of
``init_quantize_state_counters``, and the checks of ``llama_model_quantize_impl`` that refuse a
plan (``tensor_requires_imatrix``, gguf_set_tensor_type's block-size assert). Works on any
architecture's names: only names, shapes and a few hparams (:func:`.ftypes.plan_hparams`) decide.
File type names, ids and option syntax live in :mod:`.ftypes`.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import QuantizationError
from ..fileio.gguf_constants import GGMLQuantizationType as T
from ..fileio.header_records import show
from .ftypes import (  # noqa: F401  (FTYPE_IDS, DEFAULT_TYPE, ftype_id, Overrides: this module's API too)
    DEFAULT_TYPE, FTYPE_IDS, IMATRIX_FTYPES, LLAMA_DEFAULT_TYPE, NOT_OFFERED, Overrides, ftype_id, ftype_refusal,
    ecmascript_regex, ggml_type_name, resolve_ftype, tensor_requires_imatrix,
)
from .tensors import (  # noqa: F401  (the name rules: re-exported, the plan's vocabulary)
    _ATTN_V_LIKE, _BLK, _block, ggml_n_dims, layer_of, processing_order, quantization_block_reason,
    tensor_allows_quantization, tensor_category, tensor_type_fallback, use_more_bits,
)


@dataclass(frozen=True)
class TypeChoice:
    name: str
    shape: tuple[int, ...]  # NumPy order: shape[-1] is ggml's ne0 (the row)
    ggml_type: T
    reason: str  # e.g. "attn_v: use_more_bits(2,5) → Q6_K", "1-D: kept F32"
    category: str  # llama-quant's tensor_category, lower case ("attn_v", "other", ...)
    quantized: bool  # llama-quantize's allows_quantization; False: stored in its input type, untouched


# --- llama_tensor_get_type_impl -----------------------------------------------------------
_IQ2_GROUP = frozenset({"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"})
_OUT_Q5_K = _IQ2_GROUP | {"IQ3_XXS"}
_ATTN_OUT_MOE_Q5_K = frozenset({"Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M",
                                "IQ3_S", "IQ3_M", "IQ4_XS"})
_ATTN_OUT = {"Q2_K": T.Q3_K, "IQ3_XXS": T.IQ3_S, "Q3_K_M": T.Q4_K, "Q3_K_L": T.Q5_K, "IQ3_M": T.Q4_K}


class _State:
    """quantize_state_impl: the model facts and the running counters."""

    def __init__(self, ftype: str, n_layer: int, n_expert: int, n_gqa: int, arch: str, is_70b: bool,
                 ov: Overrides, n_attention_wv: int, tied: bool) -> None:
        self.ftype, self.n_layer, self.n_expert, self.n_gqa, self.arch, self.is_70b = (
            ftype, n_layer, n_expert, n_gqa, arch, is_70b)
        self.ov, self.n_attention_wv, self.tied = ov, n_attention_wv, tied
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0

    def layer_info(self, i_layer: int, name: str) -> tuple[int, int]:
        if max(1, self.n_expert) > 1:  # experts are not consecutive: parse the layer from the name
            if not _BLK.match(name):
                raise QuantizationError(f"failed to determine layer for tensor '{show(name)}'")
            i_layer = layer_of(name)
            if i_layer < 0 or i_layer >= self.n_layer:
                raise QuantizationError(
                    f"bad layer {i_layer} for tensor '{show(name)}'; must be in [0, {self.n_layer})")
        return i_layer, self.n_layer

    def impl(self, new: T, name: str, shape: tuple[int, ...], cat: str) -> tuple[T, str]:
        """llama_tensor_get_type_impl (without an importance matrix: has_imatrix is false)."""
        f, arch, ne0, n_exp, gqa = self.ftype, self.arch, shape[-1], self.n_expert, self.n_gqa
        default = new

        def to(t: T, why: str) -> tuple[T, str]:
            return t, f"{why} → {t.name}"

        if (arch == "glm5-next" and any(s in name for s in ("attn_q_a", "attn_q_b", "nextn.eh_proj"))
                and new not in (T.F32, T.BF16, T.F16)):
            return to(T.Q8_0, f"{cat}: glm5-next keeps it at Q8_0")
        if cat == "output" or (self.tied and cat == "token_embd"):
            label = "output" if cat == "output" else "token_embd (tied, no output.weight)"
            if self.ov.output_tensor_type is not None:
                return to(self.ov.output_tensor_type, f"{label}: --output-tensor-type")
            if f == "MXFP4_MOE":
                return to(T.Q8_0, f"{label}: MXFP4_MOE")
            if arch == "falcon":
                return to(T.Q8_0, f"{label}: falcon")
            if ne0 % _block(new) != 0:
                return to(T.Q8_0, f"{label}: ne0 % {_block(new)} != 0")
            if f in _OUT_Q5_K:
                return to(T.Q5_K, f"{label}: {f}")
            return to(T.Q6_K if new != T.Q8_0 else new, label)
        if f == "MXFP4_MOE":
            bailing_expert = arch == "bailingmoe3" and cat in ("ffn_up", "ffn_gate", "ffn_down")
            ne2 = shape[-3] if len(shape) >= 3 else 1
            if ne2 > 1 and (arch != "bailingmoe3" or bailing_expert):
                return to(T.MXFP4, f"{cat}: MXFP4_MOE expert tensor")
            return to(T.Q8_0, f"{cat}: MXFP4_MOE non-expert tensor")
        if cat == "token_embd":
            if self.ov.token_embedding_type is not None:
                return to(self.ov.token_embedding_type, "token_embd: --token-embedding-type")
            if f in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
                return to(T.Q2_K, f"token_embd: {f}")
            if f in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
                return to(T.IQ3_S, f"token_embd: {f}")
            if f in ("TQ1_0", "TQ2_0", "Q2_0"):
                return to(T.Q4_K, f"token_embd: {f}")
            return new, f"token_embd (output.weight exists): default {default.name}"
        low = T.IQ3_S if f in ("IQ2_S", "IQ2_M") else T.Q2_K
        if f in _IQ2_GROUP:
            if cat in _ATTN_V_LIKE:
                i = self.i_attention_wv
                self.i_attention_wv += 1
                if gqa >= 4 or n_exp >= 4:
                    return to(T.Q4_K, f"{cat}: {f}, n_gqa {gqa} / n_expert {n_exp} >= 4")
                return to(low, f"{cat} {i}: {f}")
            if n_exp == 8 and cat == "attn_k":
                return to(T.Q4_K, "attn_k: 8-expert model")
            if cat == "ffn_down":
                i = self.i_ffn_down
                self.i_ffn_down += 1
                if i < self.n_layer // 8:
                    return to(low, f"ffn_down: {i} < {self.n_layer}/8")
            elif cat == "attn_output":
                if n_exp == 8:
                    return to(T.Q5_K, "attn_output: 8-expert model")
                if f in ("IQ1_S", "IQ1_M"):
                    return to(T.IQ2_XXS, f"attn_output: {f}")
                if f in ("IQ2_S", "IQ2_M"):
                    return to(T.IQ3_S, f"attn_output: {f}")
            return new, f"{cat}: default {default.name}"
        if cat in _ATTN_V_LIKE:
            i, n = self.i_attention_wv, self.n_attention_wv
            why = f"{cat}: default {default.name}"
            if f == "Q2_K":
                new, why = to(T.Q4_K if gqa >= 4 else T.Q3_K, f"{cat}: Q2_K, n_gqa {gqa}")
            elif f == "Q2_K_S" and gqa >= 4:
                new, why = to(T.Q4_K, f"{cat}: Q2_K_S, n_gqa {gqa} >= 4")
            elif f == "IQ3_XXS":
                new, why = to(T.Q4_K if gqa >= 4 else T.IQ3_S, f"{cat}: IQ3_XXS, n_gqa {gqa}")
            elif f in ("IQ3_XS", "IQ3_S") and gqa >= 4:
                new, why = to(T.Q4_K, f"{cat}: {f}, n_gqa {gqa} >= 4")
            elif f == "IQ3_M":
                new, why = to(T.Q4_K, f"{cat}: IQ3_M")
            elif f == "Q3_K_M":
                new, why = to(T.Q5_K if i < 2 else T.Q4_K, f"{cat} {i}: Q3_K_M (first two Q5_K)")
            elif f == "Q3_K_L":
                new, why = to(T.Q5_K, f"{cat}: Q3_K_L")
            elif f in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
                new, why = to(T.Q5_K, f"{cat}: {f}, n_gqa {gqa} >= 4")
            elif f in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, n):
                new, why = to(T.Q6_K, f"{cat}: use_more_bits({i},{n})")
            elif f in ("Q4_K_M", "Q5_K_M"):
                why = f"{cat}: not use_more_bits({i},{n}) → {new.name}"
            elif f == "Q4_K_S" and i < 4:
                new, why = to(T.Q5_K, f"{cat} {i}: Q4_K_S (first four Q5_K)")
            if self.is_70b and new in (T.Q3_K, T.Q4_K):
                new, why = to(T.Q5_K, f"{why}; 70B model")
            if n_exp == 8:
                new, why = to(T.Q8_0, f"{cat}: 8-expert model")
            self.i_attention_wv += 1
            return new, why
        if cat in ("attn_k", "attn_q"):
            if cat == "attn_k" and n_exp == 8:
                return to(T.Q8_0, "attn_k: 8-expert model")
            if f == "IQ3_XS":
                return to(T.IQ3_XXS, f"{cat}: IQ3_XS")
            if f == "IQ3_XXS":
                return to(T.IQ2_S, f"{cat}: IQ3_XXS")
            return new, f"{cat}: default {default.name}"
        if cat == "ffn_down":
            il, n = self.layer_info(self.i_ffn_down, name)
            self.i_ffn_down += 1
            more = use_more_bits(il, n)
            rule = {
                "Q2_K": lambda: T.Q3_K,
                "Q2_K_S": lambda: T.Q4_K if il < n // 8 else new,
                "IQ3_XXS": lambda: T.Q4_K if il < n // 8 else T.Q3_K,
                "Q3_K_M": lambda: T.Q5_K if il < n // 16 else T.Q4_K if arch != "falcon" or more else T.Q3_K,
                "IQ3_M": lambda: T.Q4_K if il < n // 8 or (n_exp == 8 and more) else new,
                "Q3_K_L": lambda: T.Q4_K if arch == "falcon" else T.Q5_K,
                "Q4_K_M": lambda: ((T.Q6_K if il < n // 16 else T.Q5_K if more else T.Q4_K) if arch == "falcon"
                                   else T.Q6_K if more else new),
                "IQ4_NL": lambda: T.Q5_K if il < n // 8 else new,
                "IQ4_XS": lambda: T.Q5_K if il < n // 8 else new,
                "Q5_K_M": lambda: T.Q6_K if more else new,
                "Q4_K_S": lambda: T.Q5_K if arch != "falcon" and il < n // 8 else new,
            }.get(f, lambda: new)()  # Q4_0/Q5_0's ffn_down rule needs an imatrix
            tag = f"use_more_bits({il},{n})" if more else f"not use_more_bits({il},{n})"
            if f == "Q4_K_M" and arch != "falcon":
                return (to(rule, f"ffn_down: {tag}") if rule != new else (new, f"ffn_down: {tag} → {new.name}"))
            return (to(rule, f"ffn_down {il}/{n}: {f}") if rule != new else (new, f"ffn_down: default {new.name}"))
        if cat == "attn_output":
            if arch != "falcon":
                if n_exp == 8:
                    if f in _ATTN_OUT_MOE_Q5_K:
                        return to(T.Q5_K, "attn_output: 8-expert model")
                elif f in _ATTN_OUT:
                    return to(_ATTN_OUT[f], f"attn_output: {f}")
            elif f == "Q3_K_L":
                return to(T.Q4_K, "attn_output: falcon Q3_K_L")
            return new, f"attn_output: default {new.name}"
        # (the ATTENTION_QKV branch here is unreachable: attn_qkv is attn_v-like, handled above)
        if cat in ("ffn_gate", "ffn_up"):
            il, n = self.layer_info(self.i_ffn_gate if cat == "ffn_gate" else self.i_ffn_up, name)
            if cat == "ffn_gate":
                self.i_ffn_gate += 1
            else:
                self.i_ffn_up += 1
            if f == "IQ3_XS" and n // 8 <= il < 7 * n // 8:
                return to(T.IQ3_XXS, f"{cat} {il}/{n}: IQ3_XS middle layers")
        return new, f"{cat}: default {new.name}"


# --- the plan -----------------------------------------------------------------------------
def llama_plan(
    tensors: Sequence[tuple[str, tuple[int, ...]]] | Sequence[tuple[str, tuple[int, ...], T]],
    ftype: str | int,
    n_layer: int,
    *,
    n_expert: int = 0,
    n_gqa: int = 0,
    arch: str = "",
    is_70b: bool = False,
    overrides: Overrides | None = None,
) -> list[TypeChoice]:
    """What llama-quantize (``llama_model_quantize_impl``, no importance matrix) gives each
    tensor for any of its file types, in its processing order, or the error it stops with.
    :func:`plan_types` is this for the file types dflash_gguf writes; arguments as there."""
    mix = resolve_ftype(ftype)
    default = LLAMA_DEFAULT_TYPE[mix]
    if default is None:
        raise QuantizationError(f"{mix}: gguf-py has no ggml type for it")
    ov = overrides if overrides is not None else Overrides()
    patterns = [(ecmascript_regex(p), p, t) for p, t in ov.tensor_types]
    entries: dict[str, tuple[tuple[int, ...], T]] = {}
    for item in tensors:
        name, shape = item[0], tuple(int(s) for s in item[1])
        in_type = item[2] if len(item) > 2 else T.F32
        if name in entries:
            raise QuantizationError(f"duplicate tensor name '{show(name)}'")
        entries[name] = (shape, in_type)

    order = processing_order(list(entries))
    cats = {n: tensor_category(n) for n in order}
    st = _State(mix, n_layer, n_expert, n_gqa, arch, is_70b, ov,
                n_attention_wv=sum(c in _ATTN_V_LIKE for c in cats.values()),  # over all tensors
                tied="output" not in cats.values())  # no output.weight: token_embd doubles as output
    plan: list[TypeChoice] = []
    for name in order:
        shape, in_type = entries[name]
        cat = cats[name]
        blocked = quantization_block_reason(name, shape, arch=arch, leave_output_tensor=ov.leave_output_tensor,
                                            only_copy=mix == "COPY")
        if blocked is not None:
            plan.append(TypeChoice(name, shape, in_type, f"{blocked}: kept {in_type.name}", cat, False))
            continue
        new, why = _get_type(st, patterns, default, name, shape, cat)
        if tensor_requires_imatrix(name, new, mix):  # llama_model_quantize_impl's preliminary loop
            raise QuantizationError(
                f"this quantization requires an importance matrix! offending tensor: {show(name)}, target type: "
                f"{ggml_type_name(new)} (llama-quantize refuses {mix} without --imatrix, and dflash_gguf has no "
                "importance matrix support)")
        plan.append(TypeChoice(name, shape, new, why, cat, True))
    for c in plan:  # the main loop: gguf_set_tensor_type asserts whole blocks (an override has no fallback)
        if c.quantized and c.ggml_type != entries[c.name][1] and c.shape[-1] % _block(c.ggml_type):
            raise QuantizationError(
                f"tensor '{show(c.name)}': ne0 = {c.shape[-1]} is not a multiple of the {c.ggml_type.name} block "
                f"size {_block(c.ggml_type)} ({c.reason}); llama-quantize applies this override without a fallback "
                "and aborts (GGML_ASSERT: tensor row size not divisible by block size of new type)")
    return plan


def _get_type(st: _State, patterns: list[tuple[re.Pattern[bytes], str, T]], default: T, name: str,
              shape: tuple[int, ...], cat: str) -> tuple[T, str]:
    """llama_tensor_get_type for a tensor that tensor_allows_quantization lets through."""
    ov = st.ov
    # per_layer_token_embd follows --token-embedding-type unless a --tensor-type pattern names it
    if ov.token_embedding_type is not None and cat == "token_embd" and (
            name != "per_layer_token_embd.weight" or not any(rx.search(name.encode()) for rx, _p, _t in patterns)):
        return ov.token_embedding_type, f"token_embd: --token-embedding-type → {ov.token_embedding_type.name}"
    if ov.output_tensor_type is not None and cat == "output":
        return ov.output_tensor_type, f"output: --output-tensor-type → {ov.output_tensor_type.name}"
    if _block(default) == 1:  # not ggml_is_quantized: F32 / F16 / BF16 files take no mix, no override
        return default, f"{cat}: {st.ftype} → {default.name}"
    new, why = default, f"{cat}: default {default.name}"
    for rx, p, t in patterns:
        if rx.search(name.encode()):
            new, why = t, f"--tensor-type {p}={ggml_type_name(t)} → {t.name}"
            break
    else:
        if ov.pure:
            why = f"--pure: {default.name}"
        else:
            new, why = st.impl(new, name, shape, cat)
    fb, fb_why = tensor_type_fallback(name, new, shape[-1])
    if fb_why is not None:
        new, why = fb, f"{why}; {fb_why}"
    return new, why


def plan_types(
    tensors: Sequence[tuple[str, tuple[int, ...]]] | Sequence[tuple[str, tuple[int, ...], T]],
    ftype: str | int,
    n_layer: int,
    *,
    n_expert: int = 0,
    n_gqa: int = 0,
    arch: str = "",
    is_70b: bool = False,
    overrides: Overrides | None = None,
) -> list[TypeChoice]:
    """The ggml type llama-quantize gives each tensor, in llama-quantize's processing order.

    ``tensors``: ``(name, shape)`` with NumPy-order shapes (last axis = ne0), optionally
    ``(name, shape, input_type)``; tensors llama-quantize leaves alone keep ``input_type``
    (default F32, what converters write for norms). ``ftype``: one of :data:`FTYPE_IDS` (any
    case, llama-quantize's aliases and ids too). ``n_layer``: the model's block_count
    (hparams.n_layer_all: ffn_down's use_more_bits denominator). ``n_expert``: MoE expert count
    (0/1 = dense). ``n_gqa``: n_head / n_head_kv of layer 0. ``arch``: general.architecture
    (falcon, glm5-next and bailingmoe3 have rules). ``is_70b``: llama.cpp's LLM_TYPE_70B.
    :func:`.ftypes.plan_hparams` reads these from a GGUF's KVs. ``overrides``: the user's.

    Raises:
        QuantizationError: an unknown file type, one that needs an importance matrix or one
            dflash_gguf does not write; duplicate names; where llama-quantize stops: a target
            with no fallback, an override whose block does not divide ne0, an unparsable MoE layer.
    """
    mix = resolve_ftype(ftype)
    if mix in NOT_OFFERED and mix != "MXFP4_MOE":
        raise QuantizationError(ftype_refusal(mix))
    # an importance-matrix type: llama-quantize's own refusal (naming the tensor) where it gives one,
    # ours where this model's shapes make every such tensor fall back (llama-quantize then accepts)
    plan = llama_plan(tensors, mix, n_layer, n_expert=n_expert, n_gqa=n_gqa, arch=arch, is_70b=is_70b,
                      overrides=overrides)
    if mix == "MXFP4_MOE":
        # written only where every MXFP4 expert tensor already is MXFP4 (a DeepSeek-V4 DSpark draft):
        # those are copied, the rest is Q8_0; encoding MXFP4 from floats we do not do
        given = {row[0]: (row[2] if len(row) > 2 else T.F32) for row in tensors}
        if any(c.ggml_type == T.MXFP4 and given.get(c.name) != T.MXFP4 for c in plan):
            raise QuantizationError(ftype_refusal(mix) + "; MXFP4_MOE is written only for a file whose "
                                    "expert tensors already are MXFP4")
    if mix in IMATRIX_FTYPES:
        raise QuantizationError(ftype_refusal(mix))
    return plan
