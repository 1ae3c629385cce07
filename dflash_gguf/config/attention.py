"""Attention settings of a config.json: layer types, sliding windows and causality.

Two readings of the same keys coexist, so both are resolved here once:

- the converter's (DrafterConfig's ``use_sliding_window``/``sliding_window``/``is_causal``): the
  top-level keys *or* the ``dflash_config`` spellings only vLLM's drafter reads (``use_swa``,
  ``swa_window_size``, ``causal``), which mainline's converter writes too;
- transformers' ``Qwen3Config`` (``HFAttention``): top-level keys only. z-lab's reference
  builds its drafter from that config, and the reference target is a Qwen3/Llama model, so
  both run on this reading, not on the converter's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import Resolver, coerce, flag

LAYER_TYPES = ("sliding_attention", "full_attention")
QWEN3_MAX_WINDOW_LAYERS = 28  # Qwen3Config's default


@dataclass(frozen=True)
class HFAttention:
    """Attention as transformers' ``Qwen3Config`` reads a config.json (top-level keys only)."""

    is_causal: bool | None = None  # top-level is_causal; None: sliding layers causal, full ones not
    sliding_window: int | None = None  # None unless use_sliding_window is true (Qwen3Config drops it)
    max_window_layers: int = QWEN3_MAX_WINDOW_LAYERS  # without layer_types: layers from here on slide


def parse_hf_attention(raw: dict[str, Any], path: Path) -> HFAttention:
    """The top-level keys Qwen3Config reads, type-checked.

    Raises:
        ConfigError: a flag that is not a boolean, a window or layer index that is not an integer
            in range.
    """
    use = flag(raw.get("use_sliding_window"), "use_sliding_window", path)
    # Qwen3Config ignores the window when use_sliding_window is off (Qwen2.5-style configs ship one)
    window = raw.get("sliding_window") if use else None
    if window is not None:
        window = coerce(window, int, "sliding_window", path)
    first = raw.get("max_window_layers")
    first = QWEN3_MAX_WINDOW_LAYERS if first is None else coerce(first, int, "max_window_layers", path, lo=0)
    return HFAttention(is_causal=flag(raw.get("is_causal"), "is_causal", path), sliding_window=window,
                       max_window_layers=first)


def parse_layer_names(raw: dict[str, Any], path: Path) -> tuple[str, ...] | None:
    """A target's ``layer_types`` as declared (any names: hybrid targets list linear-attention
    layers too); None when absent or empty.

    Raises:
        ConfigError: not a list of strings.
    """
    types = raw.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{path}: layer_types must be a list of layer type names, got {types!r:.80}")
    return tuple(types) or None


def resolve_swa(r: Resolver, n_layers: int) -> tuple[tuple[str, ...] | None, bool, int | None]:
    """A drafter's (layer_types, use_sliding_window, effective window), the converter's reading."""
    layer_types = r.raw.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != n_layers:
            raise ConfigError(
                f"{r.path}: layer_types must list one entry per layer ({n_layers}), got {layer_types!r:.80}"
            )
        bad = [t for t in layer_types if t not in LAYER_TYPES]
        if bad:
            raise ConfigError(f"{r.path}: layer_types has unknown entries {bad}; allowed: {', '.join(LAYER_TYPES)}")
        layer_types = tuple(layer_types)

    use_swa = bool(flag(r.raw.get("use_sliding_window"), "use_sliding_window", r.path)
                   or flag(r.dflash.get("use_swa"), "dflash_config.use_swa", r.path))
    window = r.dflash.get("swa_window_size") or r.raw.get("sliding_window")
    if window is not None:
        window = coerce(window, int, "sliding_window", r.path, lo=None)
        if window <= 0:
            raise ConfigError(f"{r.path}: sliding_window={window} must be positive")
    has_sliding = layer_types is not None and "sliding_attention" in layer_types
    if has_sliding and window is None:
        raise ConfigError(f"{r.path}: layer_types has sliding_attention layers but sliding_window is not set")
    if has_sliding and not use_swa:
        # transformers only honours the window when use_sliding_window is true; so does the
        # reference, so the layers run as full attention. Say so rather than guess.
        r.warnings.append("layer_types lists sliding layers but use_sliding_window is false: no SWA written")
    effective = window if (use_swa and window) else None
    if effective is not None:
        r.sources["sliding_window"] = "dflash_config.swa_window_size" if r.dflash.get("swa_window_size") else "config.sliding_window"
    return layer_types, use_swa, effective
