"""Which published reference a drafter's attention follows, resolved once per config.

Three references define drafter attention, and they disagree on details, so the reference
picks one per drafter and says which (``AttentionRules.source``, shown in docs/parity.md):

* **z-lab** (PyPI ``dflash`` 0.1.0 on transformers 5.15): every DFlash1/DFlash2 drafter that
  declares none of the knobs below. Bit-for-bit the behaviour ``test_zlab_crosscheck`` pins:
  transformers' ``Qwen3Config`` reading of ``layer_types``/``use_sliding_window``, sliding
  layers causal, and RoPE over the *whole* head even when ``partial_rotary_factor`` is set
  (transformers' default rope ignores it).
* **vLLM** (``qwen3_dflash.py``): DFlash drafters that declare a knob only vLLM's drafter
  implements: ``dflash_config.attention_sink_bias``, ``.attention_value_scale`` or ``.use_swa``
  (Xiaomi's MiMo drafter declares all three). ``_resolve_layer_attention``'s table decides the
  layers, ``get_rope`` rotates ``int(head_dim * partial_rotary_factor)`` dims.
* **mlx-dspark** (PyPI 0.20.3, the DSpark reference): DSpark drafters. One attention config for
  every layer: causal only when declared, the window when declared, RoPE over the whole head
  (mlx-dspark treats ``partial_rotary_factor`` on stock DSpark heads as config noise copied
  from the target; only its qwen3_5-native heads rope a slice, and those are refused here).

``rope_is_neox_style: false`` (interleaved / GPT-J pairs) is honoured under every source: it
describes how the checkpoint's Q/K rows were trained, so running it any other way is wrong.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import DrafterConfig
from ..errors import ConfigError

ZLAB, VLLM, MLX_DSPARK = "z-lab dflash 0.1.0", "vLLM qwen3_dflash", "mlx-dspark 0.20.3"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class AttentionRules:
    """Everything about a drafter's attention that is not a weight."""

    source: str  # ZLAB | VLLM | MLX_DSPARK
    layers: tuple[tuple[bool, int | None], ...]  # (causal, sliding window) per layer
    rotary_dim: int | None  # dims of each head that RoPE rotates; None = the whole head, z-lab's exact path
    interleaved: bool  # GPT-J pairs (2i, 2i+1) instead of NeoX halves
    sinks: bool  # a learned per-head logit joins every softmax denominator
    value_scale: float | None  # V (context and block rows) × this, before attention


def follows_vllm(cfg: DrafterConfig) -> bool:
    """A DFlash drafter z-lab's reference cannot run as trained: it declares a knob only vLLM implements."""
    return cfg.dspark is None and (cfg.attention_sink_bias or cfg.attention_value_scale is not None
                                   or cfg.swa_every_layer)


def attention_rules(cfg: DrafterConfig) -> AttentionRules:
    """The rules ``cfg`` runs under (see the module docstring).

    Raises:
        ConfigError: a DSpark backbone the reference does not implement (gemma4, qwen3_5
            gated or offset-norm heads, log-SNR conditioning).
    """
    interleaved = not cfg.rope_is_neox_style
    if cfg.dspark is not None:
        _refuse_unimplemented_dspark(cfg)
        return AttentionRules(MLX_DSPARK, _mlx_dspark_layers(cfg), None, interleaved,
                              sinks=cfg.attention_sink_bias or cfg.dspark.mlx.attention_sink_bias,
                              value_scale=cfg.attention_value_scale)
    if follows_vllm(cfg):
        return AttentionRules(VLLM, _vllm_layers(cfg), cfg.rope_dim, interleaved, sinks=cfg.attention_sink_bias,
                              value_scale=cfg.attention_value_scale)
    # z-lab: a full-head rotation keeps the exact transformers op order (rotary_dim None)
    return AttentionRules(ZLAB, tuple(zlab_layers(cfg)), None if not interleaved else cfg.head_dim, interleaved,
                          sinks=False, value_scale=None)


def zlab_layers(cfg: DrafterConfig) -> list[tuple[bool, int | None]]:
    """(is_causal, sliding_window) per layer, as z-lab's reference reads them.

    z-lab takes these from transformers' ``Qwen3Config``: ``sliding_window`` only counts when
    ``use_sliding_window`` is true, missing ``layer_types`` are derived from
    ``max_window_layers`` (default 28), and only top-level ``is_causal`` overrides the per-layer
    rule (sliding layers causal, full layers not). The vLLM-only spellings that DrafterConfig
    also honours (``dflash_config.use_swa``/``swa_window_size``/``causal``) are ignored here.
    """
    hf = cfg.hf_attention
    window = hf.sliding_window
    types = cfg.layer_types
    if types is None:
        types = [SLIDING if window is not None and i >= hf.max_window_layers else "full_attention"
                 for i in range(cfg.num_hidden_layers)]
    rules = []
    for t in types:
        sliding = t == SLIDING
        rules.append((sliding if hf.is_causal is None else hf.is_causal, window if sliding else None))
    return rules


def _vllm_layers(cfg: DrafterConfig) -> tuple[tuple[bool, int | None], ...]:
    """vLLM's ``_resolve_layer_attention``: ``use_swa`` makes every layer sliding when
    ``layer_types`` is absent or lists no sliding layer; causality is ``is_causal``, then
    ``dflash_config.causal`` (both folded into ``cfg.is_causal``), then "sliding per
    ``layer_types``", and False without ``layer_types`` (MiMo: sliding and bidirectional)."""
    use_swa = cfg.swa_every_layer
    types = cfg.layer_types
    any_sliding = types is not None and SLIDING in types
    window = cfg.sliding_window
    out = []
    for i in range(cfg.num_hidden_layers):
        sliding = use_swa if (types is None or (use_swa and not any_sliding)) else types[i] == SLIDING
        if sliding and window is None:
            raise ConfigError(f"{cfg.path}: sliding attention needs dflash_config.swa_window_size or sliding_window")
        causal = cfg.is_causal if cfg.is_causal is not None else (types is not None and types[i] == SLIDING)
        out.append((bool(causal), window if sliding else None))
    return tuple(out)


def _mlx_dspark_layers(cfg: DrafterConfig) -> tuple[tuple[bool, int | None], ...]:
    """mlx-dspark's ``DSparkConfig.from_json`` (qwen3 family): the block is causal only when
    declared (``is_causal``/``dflash_config.causal``/``dflash_query_causal``; a speculators
    export with sliding ``layer_types`` is causal unless ``sliding_window_non_causal``), and the
    declared window applies to every layer."""
    mlx = cfg.dspark.mlx
    causal = cfg.is_causal
    if causal is None and cfg.dspark.eagle3_style and cfg.layer_types and SLIDING in cfg.layer_types \
            and cfg.sliding_window:
        causal = not mlx.sliding_window_non_causal
    if causal is None:
        causal = mlx.query_causal
    return tuple((bool(causal), cfg.sliding_window) for _ in range(cfg.num_hidden_layers))


def _refuse_unimplemented_dspark(cfg: DrafterConfig) -> None:
    why, mlx = None, cfg.dspark.mlx
    if cfg.dspark.gemma4:
        why = "the gemma4 DSpark backbone (k_eq_v attention, v_norm, sandwich norms)"
    elif mlx.qwen35_gated_q_proj or cfg.model_type == "qwen3_5":
        why = "qwen3_5-native DSpark heads (gated q_proj, offset RMSNorm weights, partial rotary)"
    elif mlx.log_snr_conditioning:
        why = "log-SNR conditioned DSpark heads"
    if why:
        raise ConfigError(f"{cfg.path}: the torch reference does not implement {why}; parity cannot run this drafter")
