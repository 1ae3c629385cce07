"""Target config.json → TargetConfig: the few sizes the tools check a drafter against.

Read more leniently than a drafter's: only hidden_size, num_hidden_layers and vocab_size are
required; multimodal configs nest the language model under ``text_config``, which is flattened.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

#: GGUF target architectures the torch reference loads (reference/from_gguf.py), here so that code
#: without torch (diagnose's stage planning) can ask.
REFERENCE_GGUF_TARGET_ARCHS = ("qwen3", "llama")
from .attention import HFAttention, parse_hf_attention, parse_layer_names
from .rope import RopeScaling, parse_rope
from .values import MAX_HEAD_DIM, MAX_LAYERS, Resolver, flag, read_config_json


@dataclass(frozen=True)
class TargetConfig:
    """What the tools need from a target model's config.json (``text_config`` flattened)."""

    path: Path
    architecture: str
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    intermediate_size: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None
    rms_norm_eps: float | None
    rope_theta: float | None
    rope_scaling: RopeScaling | None
    partial_rotary_factor: float | None
    max_position_embeddings: int | None
    tie_word_embeddings: bool
    attention_bias: bool
    bos_token_id: int | None
    eos_token_id: int | tuple[int, ...] | None
    uses_mrope: bool = False  # multimodal RoPE (Qwen3.5/3.6, Qwen-VL): drafters rope on the temporal section
    hidden_act: str | None = "silu"  # transformers' default when absent; None: an explicit null
    mlp_bias: bool = False  # Llama's MLP biases
    layer_types: tuple[str, ...] | None = None  # as declared (hybrid targets name other layer kinds too)
    hf_attention: HFAttention = field(default_factory=HFAttention)


def load_target_config(target_dir: str | Path) -> TargetConfig:
    """Read a Hugging Face target's config.json; multimodal ``text_config`` nesting is flattened.

    Raises:
        ConfigError: missing file, bad JSON, or missing hidden_size / num_hidden_layers / vocab_size.
    """
    top, cfg_path = read_config_json(target_dir, "target config.json not found (--target-dir must be a Hugging "
                                                 "Face model dir)")
    return parse_target_config(top, cfg_path)


def parse_target_config(top: dict[str, Any], cfg_path: Path) -> TargetConfig:
    """Resolve a parsed target config dict (see load_target_config)."""
    text = top.get("text_config")
    raw = {**top, **text} if isinstance(text, dict) else dict(top)
    r = Resolver(raw, cfg_path)
    hidden = r.top_int("hidden_size")
    n_head = r.top_int("num_attention_heads", required=False)
    head_dim = r.top_int("head_dim", required=False, hi=MAX_HEAD_DIM)
    if head_dim is None and n_head:
        head_dim = hidden // n_head
    rope = parse_rope(raw, cfg_path, required=False)
    archs = top.get("architectures") or [""]
    if not isinstance(archs, list):
        raise ConfigError(f"{cfg_path}: architectures must be a list of class names, got {archs!r:.80}")
    eos = raw.get("eos_token_id")
    act = raw.get("hidden_act", "silu")
    if act is not None and not isinstance(act, str):
        raise ConfigError(f"{cfg_path}: hidden_act must be an activation name, got {act!r:.80}")
    return TargetConfig(
        path=cfg_path,
        architecture=str(archs[0]),
        model_type=str(raw.get("model_type", "")),
        hidden_size=hidden,
        num_hidden_layers=r.top_int("num_hidden_layers", hi=MAX_LAYERS),  # per-layer lists are built from it
        vocab_size=r.top_int("vocab_size"),
        intermediate_size=r.top_int("intermediate_size", required=False),
        num_attention_heads=n_head,
        num_key_value_heads=r.top_int("num_key_value_heads", required=False, default=n_head),
        head_dim=head_dim,
        rms_norm_eps=r.top_float("rms_norm_eps", required=False),
        rope_theta=rope.theta,
        rope_scaling=rope.scaling,
        partial_rotary_factor=rope.partial_rotary_factor,
        max_position_embeddings=r.top_int("max_position_embeddings", required=False),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=bool(raw.get("attention_bias", False)),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
        uses_mrope=uses_mrope(top),
        hidden_act=act,
        mlp_bias=bool(flag(raw.get("mlp_bias"), "mlp_bias", cfg_path)),
        layer_types=parse_layer_names(raw, cfg_path),
        hf_attention=parse_hf_attention(raw, cfg_path),
    )


def uses_mrope(top: dict[str, Any]) -> bool:
    """True when the target ropes with sections (``mrope_section``), read where mainline's
    DFlashModel reads it: ``text_config`` when present (not merged), else the top level."""
    cfg = top.get("text_config", top)
    if not isinstance(cfg, dict):
        return False
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return isinstance(rope, dict) and "mrope_section" in rope
