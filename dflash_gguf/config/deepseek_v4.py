"""A DeepSeek-V4 checkpoint's config.json, read for the DSpark draft it carries (``mtp.*`` stages).

DeepSeek ships the draft inside the target's checkpoint: ``DeepseekV4ForCausalLM`` with
``dspark_*`` keys (deepseek-ai/DeepSeek-V4-Flash-DSpark). llama.cpp's converter reads it with
``--dspark`` (``conversion/deepseek.py``: ``DeepseekV4Model.set_gguf_parameters`` and
``DeepseekV4DSparkModel``); every value here is one it writes, under the key named beside it in
``formats/deepseek_v4.py``. Only parsed here: the plan is ``convert/deepseek_v4.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import MAX_BLOCK_SIZE, Resolver, coerce, flag

ARCH = "DeepseekV4ForCausalLM"
SCORING_FUNCS = {"softmax": 1, "sigmoid": 2, "sqrtsoftplus": 4}  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE


def is_dsv4_dspark(raw: dict[str, Any]) -> bool:
    """A DeepSeek-V4 checkpoint whose ``mtp.*`` stages are a DSpark draft (its ``dspark_*`` keys
    say so; a plain DeepSeek-V4's ``mtp.0`` is a NextN head, not a drafter)."""
    archs = raw.get("architectures")
    return isinstance(archs, list) and ARCH in archs and "dspark_block_size" in raw


@dataclass(frozen=True)
class YarnScaling:
    factor: float
    original_context_length: int
    extrapolation_factor: float | None
    attention_factor: float | None
    beta_fast: float | None
    beta_slow: float | None


@dataclass(frozen=True)
class DSV4DSparkConfig:
    path: Path
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups: int
    vocab_size: int
    max_position_embeddings: int | None
    rms_norm_eps: float
    rope_theta: float
    rope_yarn: YarnScaling | None
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int
    moe_intermediate_size: int
    scoring_func: str
    routed_scaling_factor: float
    norm_topk_prob: bool
    swiglu_limit: float
    sliding_window: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    compress_rope_theta: float
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    block_size: int  # dspark_block_size
    target_layer_ids: tuple[int, ...]  # dspark_target_layer_ids: 0-based, as the checkpoint says
    noise_token_id: int  # dspark_noise_token_id: the runtime's mask token
    num_hidden_layers: int  # the target's layers (taps must fall inside)
    sources: dict[str, str] = field(default_factory=dict)

    family = "dsv4-dspark"
    warnings: tuple[str, ...] = ()


def parse_dsv4_dspark(raw: dict[str, Any], cfg_path: Path) -> DSV4DSparkConfig:
    """The values llama.cpp's converter writes for this draft, typed and range-checked.

    Raises:
        ConfigError: a key it reads is missing or of the wrong type, taps outside the model.
    """
    r = Resolver(raw, cfg_path)
    n_layers = r.top_int("num_hidden_layers")
    taps = raw.get("dspark_target_layer_ids")
    if not isinstance(taps, list) or not taps:
        raise ConfigError(f"{cfg_path}: dspark_target_layer_ids must be a non-empty list of layer indices, "
                          f"got {taps!r:.80}")
    taps = tuple(coerce(t, int, f"dspark_target_layer_ids[{i}]", cfg_path, lo=0) for i, t in enumerate(taps))
    r.sources["target_layer_ids"] = "config.dspark_target_layer_ids"
    if max(taps) >= n_layers:
        raise ConfigError(f"{cfg_path}: dspark_target_layer_ids {list(taps)} name a layer past num_hidden_layers "
                          f"{n_layers}; the config does not belong to this checkpoint")
    score = raw.get("scoring_func", "sqrtsoftplus")
    if score not in SCORING_FUNCS:
        raise ConfigError(f"{cfg_path}: scoring_func {score!r:.40} is not one llama.cpp's converter knows "
                          f"({', '.join(SCORING_FUNCS)})")
    norm_topk = flag(raw.get("norm_topk_prob"), "norm_topk_prob", cfg_path)
    if norm_topk is None:
        raise ConfigError(f"{cfg_path}: required key norm_topk_prob is missing; add it to config.json")
    return DSV4DSparkConfig(
        path=cfg_path, hidden_size=r.top_int("hidden_size"), num_attention_heads=r.top_int("num_attention_heads"),
        num_key_value_heads=r.top_int("num_key_value_heads"), head_dim=r.top_int("head_dim"),
        qk_rope_head_dim=r.top_int("qk_rope_head_dim"), q_lora_rank=r.top_int("q_lora_rank"),
        o_lora_rank=r.top_int("o_lora_rank"), o_groups=r.top_int("o_groups"), vocab_size=r.top_int("vocab_size"),
        max_position_embeddings=r.top_int("max_position_embeddings", required=False),
        rms_norm_eps=r.top_float("rms_norm_eps"), rope_theta=r.top_float("rope_theta", default=10000.0),
        rope_yarn=_yarn(raw, cfg_path), n_routed_experts=r.top_int("n_routed_experts"),
        num_experts_per_tok=r.top_int("num_experts_per_tok"), n_shared_experts=r.top_int("n_shared_experts"),
        moe_intermediate_size=r.top_int("moe_intermediate_size"), scoring_func=score,
        routed_scaling_factor=r.top_float("routed_scaling_factor"), norm_topk_prob=norm_topk,
        swiglu_limit=r.top_float("swiglu_limit"), sliding_window=r.top_int("sliding_window"),
        index_n_heads=r.top_int("index_n_heads"), index_head_dim=r.top_int("index_head_dim"),
        index_topk=r.top_int("index_topk"), compress_rope_theta=r.top_float("compress_rope_theta"),
        hc_mult=r.top_int("hc_mult"), hc_sinkhorn_iters=r.top_int("hc_sinkhorn_iters"), hc_eps=r.top_float("hc_eps"),
        block_size=r.top_int("dspark_block_size", hi=MAX_BLOCK_SIZE), target_layer_ids=taps,
        noise_token_id=r.top_int("dspark_noise_token_id", lo=0), num_hidden_layers=n_layers,
        sources={**r.sources, "block_size": "config.dspark_block_size"})


def _yarn(raw: dict[str, Any], path: Path) -> YarnScaling | None:
    """``rope_scaling`` as mainline's DeepSeek-V4 workaround reads it: only a YaRN one with a
    factor becomes keys (``TextModel.set_gguf_parameters``)."""
    rs = raw.get("rope_scaling")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ConfigError(f"{path}: rope_scaling must be an object, got {rs!r:.80}")
    kind = rs.get("rope_type", rs.get("type"))
    if kind != "yarn" or rs.get("factor") is None:
        if kind not in (None, "default"):
            raise ConfigError(f"{path}: rope_scaling type {kind!r:.40} on a DeepSeek-V4 checkpoint; llama.cpp's "
                              "converter writes only YaRN scaling for it")
        return None

    def num(key: str, kind: type = float, **bounds):
        v = rs.get(key)
        return None if v is None else coerce(v, kind, f"rope_scaling.{key}", path, **bounds)

    if rs.get("original_max_position_embeddings") is None:
        raise ConfigError(f"{path}: rope_scaling (yarn) has no original_max_position_embeddings; add it")
    attn = "attention_factor" if rs.get("attention_factor") is not None else "attn_factor"
    return YarnScaling(num("factor"), num("original_max_position_embeddings", int), num("extrapolation_factor"),
                       num(attn), num("beta_fast"), num("beta_slow"))


def hub_files(snapshot: Path) -> list[str] | None:
    """For a Hub download (``hub.resolve_dir``'s ``narrow``): the shards a DeepSeek-V4 checkpoint's
    index lists ``mtp.*`` tensors in, as llama.cpp's ``--remote`` fetches them for ``--dspark``
    (``DeepseekV4DSparkModel.index_tensors``); None for any other checkpoint (all its weights).
    A config or index that does not read is None too: the conversion then says what is wrong."""
    import json

    try:
        raw = json.loads((snapshot / "config.json").read_text(encoding="utf-8"))
        index = json.loads((snapshot / "model.safetensors.index.json").read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        if not (isinstance(raw, dict) and is_dsv4_dspark(raw) and isinstance(weight_map, dict)):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sorted({str(f) for n, f in weight_map.items() if str(n).startswith("mtp.")})
