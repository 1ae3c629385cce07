"""Drafter config.json → DrafterConfig: one frozen dataclass, every knob resolved once.

Two schemas exist in the wild (z-lab's published configs: Qwen3-8B-DFlash-b16 is the first, the
*-DFlash2 checkpoints the second):
flat DFlash1 (``block_size``/``rope_theta`` top level, ``dflash_config`` holds only the mask id
and taps) and nested DFlash2 (``rope_parameters``, ``dflash_config.block_size``, conv/selector
knobs). Like z-lab's ``_draft_value`` we resolve every DFlash knob as ``dflash_config[name]``,
then the top-level field, then a default — and record which one was used, so the CLI can say.
Required values have no default: a missing one raises ConfigError naming the key and file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .deepseek_v4 import is_dsv4_dspark
from .attention import HFAttention, parse_hf_attention, resolve_swa
from .dspark import (ALL_DSPARK_ARCHS, DSPARK_ARCHS, DSparkSpec, layer_config_default_theta, normalize_dspark,
                     parse_dspark)
from .quantization import QuantizationConfig, parse_quantization
from .rope import RopeScaling, parse_rope
from .values import MAX_BLOCK_SIZE, MAX_HEAD_DIM, MAX_LAYERS, Resolver, coerce, flag, read_config_json

DFLASH1_ARCH = "DFlashDraftModel"
DFLASH2_ARCH = "DFlash2DraftModel"
SUPPORTED_ARCHS = (DFLASH1_ARCH, DFLASH2_ARCH, *ALL_DSPARK_ARCHS)
# dflash_config knobs no runtime reads: written nowhere, named in the summary (never silently dropped)
UNHONOURED_KNOBS = {
    "backbone_rotary_base": "MiMo's RoPE base for the target-context keys; mainline llama.cpp ropes them with "
                            "rope.freq_base (its converter drops this key too)",
}
MASK_FILE = "mask_embedding.pt"  # MiMo's side file beside config.json: the mask token's own embedding


@dataclass(frozen=True)
class DrafterConfig:
    """Everything the converter and the reference model need from a drafter's config.json."""

    path: Path
    architecture: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    head_dim_in_config: bool  # False: hidden_size // num_attention_heads (no key/value length is written)
    rms_norm_eps: float
    max_position_embeddings: int | None
    vocab_size: int
    rope_theta: float
    rope_theta_in_config: bool  # False: a speculators layer's class default (no rope.freq_base is written)
    rope_scaling: RopeScaling | None
    partial_rotary_factor: float | None
    mask_token_id: int | None  # None only for a DSpark export without one (mainline converts it as is)
    target_layer_ids: tuple[int, ...]
    block_size: int
    num_target_layers: int | None
    target_hidden_size: int | None
    layer_types: tuple[str, ...] | None
    use_sliding_window: bool
    sliding_window: int | None  # effective window (None when SWA is off)
    is_causal: bool | None  # None: the reference's per-layer rule (sliding causal, full not)
    swa_every_layer: bool  # dflash_config.use_swa: vLLM slides every layer unless layer_types lists sliding ones
    hf_attention: HFAttention  # the top-level keys alone, as transformers' Qwen3Config (and z-lab) reads them
    attention_bias: bool
    final_logit_softcapping: float | None
    input_embedding_scale: float | None
    output_multiplier: float | None
    tie_word_embeddings: bool | None
    # DFlash2 only
    conv_kernel_size: int | None = None
    conv_group_size: int | None = None
    selector_rank: int | None = None
    selector_top_k: int | None = None
    # MiMo-style drafters (dflash_config knobs)
    attention_sink_bias: bool = False  # a learned per-head sink logit per layer (self_attn.attention_sink_bias)
    attention_value_scale: float | None = None
    rope_is_neox_style: bool = True  # False: Q/K (and their norms) are permuted to NeoX layout on convert
    # DSpark drafters (DFlash + Markov head); None for DFlash
    dspark: DSparkSpec | None = None
    # knob -> where its value came from ("dflash_config.block_size", "config.rope_theta", "default")
    sources: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    # a pre-quantized checkpoint's quantization_config (convert/prequant.py); None for plain floats
    quantization: QuantizationConfig | None = None

    @property
    def is_dflash2(self) -> bool:
        return self.architecture == DFLASH2_ARCH

    @property
    def family(self) -> str:
        """"dflash1" | "dflash2" | "dspark" | "gemma4-dspark" (docs/formats.md lists each)."""
        if self.dspark is not None:
            return "gemma4-dspark" if self.dspark.gemma4 else "dspark"
        return "dflash2" if self.is_dflash2 else "dflash1"

    @property
    def n_taps(self) -> int:
        return len(self.target_layer_ids)

    @property
    def swa_pattern(self) -> tuple[bool, ...] | None:
        """Per-layer ``True`` = sliding-window layer, or None when SWA is off."""
        if not self.sliding_window:
            return None
        if self.layer_types is None:
            return tuple(True for _ in range(self.num_hidden_layers))
        return tuple(t == "sliding_attention" for t in self.layer_types)

    @property
    def rope_dim(self) -> int:
        if self.partial_rotary_factor is None:
            return self.head_dim
        return int(self.head_dim * self.partial_rotary_factor)


def load_config(drafter_dir: str | Path) -> DrafterConfig:
    """Read and validate ``drafter_dir/config.json``.

    Raises:
        ConfigError: the file is missing or not JSON, a required key is missing, or a
            value is out of range (NaN theta, taps outside the target, ...).
    """
    raw, cfg_path = read_config_json(drafter_dir, "not found (expected the drafter's config.json next to its "
                                                  "safetensors)", "; re-download the config")
    return parse_config(raw, cfg_path)


def parse_config(raw: dict[str, Any], cfg_path: Path) -> DrafterConfig:
    """Resolve a parsed config dict (see load_config)."""
    archs = raw.get("architectures") or []
    if not isinstance(archs, list):
        raise ConfigError(f"{cfg_path}: architectures must be a list of class names, got {archs!r:.80}")
    arch = next((a for a in archs if a in SUPPORTED_ARCHS), None)
    if arch is None and is_dsv4_dspark(raw):
        raise ConfigError(
            f"{cfg_path}: a DeepSeek-V4 checkpoint carrying a DSpark draft (mtp.* stages): convert, inspect, check, "
            "quantize and compare-weights read it, but the torch reference (parity, diagnose) runs DFlash/DSpark "
            "drafters on Qwen3/Llama-style blocks only, not DeepSeek-V4's MoE and hyper-connections; measure it "
            "in the runtime with 'dflash-gguf bench'"
        )
    if arch is None:
        raise ConfigError(
            f"{cfg_path}: architectures={archs!r:.80} is not a DFlash drafter "
            f"(expected one of {', '.join(SUPPORTED_ARCHS)})"
        )
    published = raw
    raw = normalize_dspark(raw, arch, cfg_path)
    r = Resolver(raw, cfg_path)

    hidden = r.top_int("hidden_size")
    n_layers = r.top_int("num_hidden_layers", hi=MAX_LAYERS)
    n_head = r.top_int("num_attention_heads")
    n_kv = r.top_int("num_key_value_heads", default=n_head)
    head_dim = r.top_int("head_dim", default=hidden // n_head if n_head else None, hi=MAX_HEAD_DIM)
    if head_dim > MAX_HEAD_DIM:  # hidden_size // num_attention_heads
        raise ConfigError(f"{cfg_path}: head_dim = hidden_size // num_attention_heads = {head_dim} is out of range "
                          f"(1..{MAX_HEAD_DIM:,}); fix config.json")
    if n_head % n_kv != 0:
        raise ConfigError(f"{cfg_path}: num_attention_heads={n_head} is not a multiple of num_key_value_heads={n_kv}")

    default_theta = layer_config_default_theta(published, raw, cfg_path)
    rope = parse_rope(raw, cfg_path, required=default_theta is None)
    r.sources.update(rope.sources)
    theta = rope.theta
    if theta is None:
        theta = default_theta
        r.sources["rope_theta"] = "transformers' default for transformer_layer_config.model_type"
        r.warnings.append(f"rope_theta is not in config.json: the speculators layer runs with transformers' default "
                          f"{theta:g}; written without rope.freq_base, as mainline llama.cpp does (its default is the same)")

    # mainline converts a DSpark export without a mask id (and writes none)
    mask = r.knob_int("mask_token_id", required=arch not in DSPARK_ARCHS, lo=0)
    vocab = r.top_int("vocab_size")
    if mask is None:
        r.warnings.append("mask_token_id is missing: written without tokenizer.ggml.mask_token_id, as mainline "
                          "llama.cpp does; its runtime then drafts with mask id -1 (add mask_token_id to config.json)")
    elif not 0 <= mask < vocab:
        raise ConfigError(f"{cfg_path}: mask_token_id={mask} is outside the vocabulary (vocab_size={vocab})")

    num_target_layers = r.top_int("num_target_layers", required=False, hi=MAX_LAYERS)
    taps = _resolve_taps(r, num_target_layers, n_layers)

    block_size = r.knob_int("block_size", default=16, lo=None)
    if block_size < 2:
        raise ConfigError(f"{cfg_path}: block_size={block_size} must be at least 2 (1 anchor + drafted tokens)")
    if block_size > MAX_BLOCK_SIZE:  # the reference's per-block buffers are sized by it
        raise ConfigError(f"{cfg_path}: block_size={block_size} is out of range (2..{MAX_BLOCK_SIZE:,}); no drafter "
                          "drafts that many tokens a block: fix config.json")

    layer_types, use_swa, window = resolve_swa(r, n_layers)

    is_causal = r.raw.get("is_causal")
    if is_causal is None and "causal" in r.dflash:
        is_causal = r.dflash["causal"]
        r.sources["is_causal"] = "dflash_config.causal"
    elif is_causal is not None:
        r.sources["is_causal"] = "config.is_causal"
    is_causal = flag(is_causal, "is_causal", cfg_path)

    softcap = r.knob_float("final_logit_softcapping")
    if softcap is not None and softcap <= 0:
        softcap = None  # the reference treats <= 0 as "off"

    conv = {}
    if arch == DFLASH2_ARCH:
        for k in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            conv[k] = r.knob_int(k, required=True)
        if hidden % conv["conv_group_size"] != 0:
            raise ConfigError(
                f"{cfg_path}: hidden_size={hidden} is not divisible by conv_group_size={conv['conv_group_size']}"
            )

    eps = r.top_float("rms_norm_eps")
    value_scale = r.dflash.get("attention_value_scale")
    if value_scale is not None:  # the formats write it as a float32 as is
        value_scale = coerce(value_scale, float, "dflash_config.attention_value_scale", cfg_path)
    v_head_dim = r.top_int("v_head_dim", required=False)
    if v_head_dim is not None and v_head_dim != head_dim:
        # mainline writes attention.value_length = head_dim; a different V width cannot be carried
        raise ConfigError(f"{cfg_path}: v_head_dim={v_head_dim} differs from head_dim={head_dim}; no GGUF runtime "
                          "supports a separate value head width for DFlash drafters")
    sink = r.dflash.get("attention_sink_bias")
    for knob, why in UNHONOURED_KNOBS.items():
        if r.dflash.get(knob) is not None:
            r.warnings.append(f"dflash_config.{knob}={r.dflash[knob]!r:.40} is not written: {why}")
    model_type = raw.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(f"{cfg_path}: model_type must be a string, got {model_type!r:.80}")
    return DrafterConfig(
        path=cfg_path,
        architecture=arch,
        model_type="qwen3" if model_type is None else model_type,
        hidden_size=hidden,
        intermediate_size=r.top_int("intermediate_size"),
        num_hidden_layers=n_layers,
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        head_dim=head_dim,
        head_dim_in_config=raw.get("head_dim") is not None,
        rms_norm_eps=eps,
        max_position_embeddings=r.top_int("max_position_embeddings", required=False),
        vocab_size=vocab,
        rope_theta=theta,
        rope_theta_in_config=default_theta is None,
        rope_scaling=rope.scaling,
        partial_rotary_factor=rope.partial_rotary_factor,
        mask_token_id=mask,
        target_layer_ids=taps,
        block_size=block_size,
        num_target_layers=num_target_layers,
        target_hidden_size=r.knob_int("target_hidden_size"),
        layer_types=layer_types,
        use_sliding_window=use_swa,
        sliding_window=window,
        is_causal=is_causal,
        swa_every_layer=bool(r.dflash.get("use_swa")),  # a flag: resolve_swa has checked it
        hf_attention=parse_hf_attention(raw, cfg_path),
        attention_bias=bool(flag(raw.get("attention_bias"), "attention_bias", cfg_path)),
        final_logit_softcapping=softcap,
        input_embedding_scale=r.knob_float("input_embedding_scale"),
        output_multiplier=r.knob_float("output_multiplier"),
        tie_word_embeddings=flag(raw.get("tie_word_embeddings"), "tie_word_embeddings", cfg_path),
        attention_sink_bias=bool(flag(sink, "dflash_config.attention_sink_bias", cfg_path)),
        attention_value_scale=value_scale,
        rope_is_neox_style=flag(raw.get("rope_is_neox_style"), "rope_is_neox_style", cfg_path) is not False,
        dspark=parse_dspark(published, arch, vocab, cfg_path, raw) if arch in ALL_DSPARK_ARCHS else None,
        sources=dict(r.sources),
        warnings=tuple(r.warnings),
        quantization=parse_quantization(published, cfg_path),
        **conv,
    )


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """The reference's fallback: spread taps evenly over [1, num_target_layers - 3]."""
    if num_draft_layers == 1:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    span = end - start
    return tuple(int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers))


def _resolve_taps(r: Resolver, num_target_layers: int | None, n_layers: int) -> tuple[int, ...]:
    value, source = r._lookup("target_layer_ids", nested=True)
    if value is None:
        if num_target_layers is None:
            raise ConfigError(
                f"{r.path}: neither dflash_config.target_layer_ids nor num_target_layers is set; "
                "add the target layer ids the drafter was trained on"
            )
        taps = build_target_layer_ids(num_target_layers, n_layers)
        if len(set(taps)) != len(taps) or not all(0 <= i < num_target_layers for i in taps):
            raise ConfigError(
                f"{r.path}: the reference's fallback target_layer_ids for num_target_layers={num_target_layers} "
                f"and {n_layers} drafter layers would be {list(taps)!s:.80} (repeated or outside the target); "
                "add dflash_config.target_layer_ids"
            )
        r.sources["target_layer_ids"] = "computed from num_target_layers (reference fallback)"
        r.warnings.append(
            f"target_layer_ids missing: using the reference's computed fallback {list(taps)}; "
            "check it against the drafter's model card"
        )
        return taps
    if not isinstance(value, list) or not value or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ConfigError(f"{r.path}: {source} must be a non-empty list of integers, got {value!r:.80}")
    r.sources["target_layer_ids"] = source
    for i in value:
        if i < 0:
            raise ConfigError(f"{r.path}: {source} contains {i}; layer ids are >= 0")
        if num_target_layers is not None and i >= num_target_layers:
            raise ConfigError(
                f"{r.path}: {source} contains {i} but the target has only num_target_layers={num_target_layers} "
                f"layers (valid ids 0..{num_target_layers - 1})"
            )
        if i >= MAX_LAYERS:
            raise ConfigError(f"{r.path}: {source} contains {i}; no real target has {MAX_LAYERS:,} layers")
    if len(set(value)) != len(value):
        raise ConfigError(f"{r.path}: {source} has duplicate ids {value}")
    return tuple(value)
