"""DeepSeek-V4 DSpark drafts in mainline's ``dflash`` GGUF: the tensor names and the keys.

The spelling llama.cpp's converter uses (``conversion/deepseek.py``: ``DeepseekV4DSparkModel``
and the ``DeepseekV4Model`` it extends) and its loader reads (``src/models/dflash.cpp``: the
``dsv4_hc_mult > 0`` branch of ``llama_model_dflash::load_arch_hparams`` / ``load_arch_tensors``).
Only mainline loads these files, so this is the one format they have.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Mapping

from ..fileio.gguf_constants import GGUFValueType as T
from .dspark import dspark_summary
from .family import FileFamily

if TYPE_CHECKING:
    from ..config.deepseek_v4 import DSV4DSparkConfig

# ``mtp.<stage>.<name>``: these names are the draft's own, not a stage's (``_rekey_mtp_tensor_name``)
ROOT = {
    "main_proj.weight": "fc.weight",
    "main_norm.weight": "enc.output_norm.weight",
    "markov_head.markov_w1.weight": "markov_w1.weight",
    "markov_head.markov_w2.weight": "markov_w2.weight",
    "confidence_head.proj.weight": "conf_proj.weight",
    "norm.weight": "output_norm.weight",
    "hc_head_fn": "output_hc_fn.weight",
    "hc_head_base": "output_hc_base.weight",
    "hc_head_scale": "output_hc_scale.weight",
}
# a stage's tensors (``_map_dsv4_tensor_name``'s layer map, the parts a DSpark stage has)
LAYER = {
    "hc_attn_fn": "hc_attn_fn.weight", "hc_attn_base": "hc_attn_base.weight", "hc_attn_scale": "hc_attn_scale.weight",
    "hc_ffn_fn": "hc_ffn_fn.weight", "hc_ffn_base": "hc_ffn_base.weight", "hc_ffn_scale": "hc_ffn_scale.weight",
    "attn.attn_sink": "attn_sinks.weight",
    "attn.wq_a.weight": "attn_q_a.weight", "attn.wq_b.weight": "attn_q_b.weight",
    "attn.q_norm.weight": "attn_q_a_norm.weight",
    "attn.wkv.weight": "attn_kv.weight", "attn.kv_norm.weight": "attn_kv_a_norm.weight",
    "attn.wo_a.weight": "attn_output_a.weight", "attn.wo_b.weight": "attn_output_b.weight",
    "attn_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "ffn.gate.weight": "ffn_gate_inp.weight", "ffn.gate.bias": "exp_probs_b.bias",
    "ffn.shared_experts.w1.weight": "ffn_gate_shexp.weight", "ffn.shared_experts.w2.weight": "ffn_down_shexp.weight",
    "ffn.shared_experts.w3.weight": "ffn_up_shexp.weight",
}
# routed experts, stacked per stage into one MXFP4 tensor each, in this order
EXPERTS = (("w1", "ffn_gate_exps.weight"), ("w2", "ffn_down_exps.weight"), ("w3", "ffn_up_exps.weight"))
EXPERT_RE = re.compile(r"ffn\.experts\.(\d{1,7})\.(w[123])\.(weight|scale)$")
# a stage's tensors mainline drops: the multimodal hash routing (``DeepseekV4DSparkModel.modify_tensors``)
DROPPED = {"ffn.gate.bias_vl": "image-token routing bias, not part of the dflash arch",
           "ffn.gate.tid2eid": "hash-routing table, not part of the dflash arch"}
STAGE_RE = re.compile(r"mtp\.(\d{1,5})\.(.+)$")  # more digits than a real stage count: not a stage
HC_KEY = "hyper_connection.count"  # present only in this family's files: how a reader tells them apart
MXFP4_MOE = 38  # general.file_type: llama_ftype LLAMA_FTYPE_MOSTLY_MXFP4_MOE, what mainline writes


def gguf_name(rest: str, stage: int) -> str | None:
    """The GGUF name of ``mtp.<stage>.<rest>`` (routed experts aside), or None when unknown."""
    if rest in ROOT:
        return ROOT[rest]
    if rest in LAYER:
        return f"blk.{stage}.{LAYER[rest]}"
    return None


def hparams(cfg: DSV4DSparkConfig, n_stages: int) -> tuple[list[tuple], int]:
    """(hparams as ``(suffix, value, type, sub_type)`` in mainline's order, index at which
    ``general.file_type`` goes): ``TextModel.set_gguf_parameters``, then ``DeepseekV4Model``'s,
    then ``DeepseekV4DSparkModel``'s block size (its taps are the format's, written after)."""
    from ..config.deepseek_v4 import SCORING_FUNCS

    u, f = T.UINT32, T.FLOAT32
    out: list[tuple] = [("block_count", n_stages, u, None)]
    if cfg.max_position_embeddings is not None:
        out.append(("context_length", cfg.max_position_embeddings, u, None))
    out += [("embedding_length", cfg.hidden_size, u, None), ("attention.head_count", cfg.num_attention_heads, u, None),
            ("attention.head_count_kv", cfg.num_key_value_heads, u, None)]
    y = cfg.rope_yarn
    if y is not None:
        out += [("rope.scaling.type", "yarn", T.STRING, None), ("rope.scaling.factor", y.factor, f, None),
                ("rope.scaling.original_context_length", y.original_context_length, u, None)]
        out += [(k, v, f, None) for k, v in (("rope.scaling.yarn_ext_factor", y.extrapolation_factor),
                                             ("rope.scaling.yarn_attn_factor", y.attention_factor),
                                             ("rope.scaling.yarn_beta_fast", y.beta_fast),
                                             ("rope.scaling.yarn_beta_slow", y.beta_slow)) if v is not None]
    out += [("rope.freq_base", cfg.rope_theta, f, None), ("attention.layer_norm_rms_epsilon", cfg.rms_norm_eps, f, None),
            ("expert_count", cfg.n_routed_experts, u, None), ("expert_used_count", cfg.num_experts_per_tok, u, None),
            ("expert_gating_func", SCORING_FUNCS[cfg.scoring_func], u, None),
            ("attention.key_length", cfg.head_dim, u, None), ("attention.value_length", cfg.head_dim, u, None)]
    file_type_at = len(out)
    clamp = [cfg.swiglu_limit] * n_stages
    out += [("rope.dimension_count", cfg.qk_rope_head_dim, u, None), ("attention.q_lora_rank", cfg.q_lora_rank, u, None),
            ("attention.sliding_window", cfg.sliding_window, u, None),
            ("expert_feed_forward_length", cfg.moe_intermediate_size, u, None),
            ("expert_shared_count", cfg.n_shared_experts, u, None),
            ("expert_weights_scale", cfg.routed_scaling_factor, f, None),
            ("expert_weights_norm", cfg.norm_topk_prob, T.BOOL, None),
            ("swiglu_clamp_exp", clamp, T.ARRAY, f), ("swiglu_clamp_shexp", list(clamp), T.ARRAY, f),
            ("attention.indexer.head_count", cfg.index_n_heads, u, None),
            ("attention.indexer.key_length", cfg.index_head_dim, u, None),
            ("attention.indexer.top_k", cfg.index_topk, u, None),
            ("attention.output_group_count", cfg.o_groups, u, None),
            ("attention.output_lora_rank", cfg.o_lora_rank, u, None),
            # every stage attends over the uncompressed sliding window: mainline writes 0s
            ("attention.compress_ratios", [0] * n_stages, T.ARRAY, T.INT32),
            ("attention.compress_rope_freq_base", cfg.compress_rope_theta, f, None),
            (HC_KEY, cfg.hc_mult, u, None), ("hyper_connection.sinkhorn_iterations", cfg.hc_sinkhorn_iters, u, None),
            ("hyper_connection.epsilon", cfg.hc_eps, f, None), ("hash_layer_count", 0, u, None)]
    return out, file_type_at


# --- reading a file back: llama.cpp's ``dsv4_hc_mult > 0`` branch of the dflash loader --------
SQRTSOFTPLUS = 4
# keys that branch reads without a default (besides the shared dflash ones)
REQUIRED_HPARAMS = ("block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
                    "attention.key_length", "expert_count", "expert_used_count", "attention.q_lora_rank",
                    "attention.sliding_window", "expert_feed_forward_length", "expert_shared_count",
                    "expert_weights_scale", "expert_weights_norm", "expert_gating_func", "swiglu_clamp_exp",
                    "attention.output_group_count", "attention.output_lora_rank",
                    "hyper_connection.sinkhorn_iterations", "hyper_connection.epsilon")
GLOBAL_TENSORS = ("fc.weight", "enc.output_norm.weight", "output_norm.weight", *(ROOT[k] for k in (
    "hc_head_fn", "hc_head_base", "hc_head_scale")))
_LAYER_NAMES = frozenset([*LAYER.values(), *(g for _, g in EXPERTS)])
_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")


def is_dsv4_file(keys: Iterable[str], arch: str) -> bool:
    return f"{arch}.{HC_KEY}" in set(keys)


class DSV4File(FileFamily):
    """A DeepSeek-V4 DSpark draft: DeepSeek-V4 blocks (MLA-style attention with sinks, MoE with
    MXFP4 experts, hyper-connections) behind the DFlash fc, with DSpark's heads."""

    name = "dsv4-dspark"
    anchor_default_is_right = True
    all_layers_swa = True  # the loader marks every stage SWA (the draft's KV ring)

    def claims_tensor(self, fmt, gguf_name: str) -> bool:
        m = _BLK.match(gguf_name)
        if m:
            return m.group(2) in _LAYER_NAMES
        return gguf_name in ROOT.values()

    def required_hparams(self, fmt) -> tuple[str, ...]:
        return REQUIRED_HPARAMS

    def required_tensors(self, fmt, n_layers: int) -> list[str]:
        per_layer = sorted(_LAYER_NAMES)
        return [*GLOBAL_TENSORS, *(f"blk.{i}.{n}" for i in range(n_layers) for n in per_layer)]

    def problems(self, kvs: Mapping, arch: str) -> list[tuple[str, str]]:
        out = []
        gating = kvs.get(f"{arch}.expert_gating_func")
        if gating is not None and getattr(gating, "value", None) != SQRTSOFTPLUS:
            out.append((f"{arch}.expert_gating_func", f"is {gating.value!r}; the loader throws 'DSpark DSV4 draft "
                        "expects sqrtsoftplus MoE scoring' (4)"))
        ratios = kvs.get(f"{arch}.attention.compress_ratios")
        if ratios is not None and any(getattr(ratios, "value", None) or ()):
            out.append((f"{arch}.attention.compress_ratios", "has a non-zero ratio; the loader throws 'DSpark DSV4 "
                        "draft expects uncompressed attention on all stages'"))
        return out

    def summary(self, kvs, tensors: dict[str, tuple[int, ...]], arch: str) -> dict | None:
        out = dspark_summary(kvs, tensors, arch) or {}

        def value(suffix: str):
            kv = kvs.get(f"{arch}.{suffix}")
            return None if kv is None else kv.value

        exps = tensors.get("blk.0.ffn_gate_exps.weight")
        return {**out, "deepseek_v4": {"stages": value("block_count"), "routed_experts": value("expert_count"),
                                       "experts_per_token": value("expert_used_count"),
                                       "hyper_connections": value(HC_KEY), "sliding_window":
                                       value("attention.sliding_window"),
                                       "expert_shape": None if exps is None else list(exps)}}


DSV4 = DSV4File()
