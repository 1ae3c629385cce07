"""RoPE settings from a config.json, parsed in one place for drafters and targets.

transformers spells them two ways: the newer ``rope_parameters`` object (theta and scaling
together, or one object per layer type, Gemma style) and the older top-level ``rope_theta`` +
``rope_scaling``. ``rope_parameters`` wins where both are present.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import FLOAT32_MAX, coerce, flag

_NEEDS_FACTOR = ("linear", "yarn", "llama3", "dynamic")
_NEEDS_ORIGINAL = ("yarn", "llama3")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE scaling as transformers spells it; ``params`` keeps every numeric field verbatim."""

    type: str  # "yarn" | "linear" | "llama3" | "dynamic" | "longrope" ...
    factor: float | None
    original_context_length: int | None
    params: dict[str, float] = field(default_factory=dict)
    truncate: bool = True  # yarn: round the correction range to whole dims (a bool, so not in params)

    @property
    def llama3_freq_factors(self) -> tuple[float, float]:
        """llama3's (low_freq_factor, high_freq_factor), with transformers' defaults."""
        return llama3_freq_factors(self.params)


def llama3_freq_factors(params: dict[str, float]) -> tuple[float, float]:
    return params.get("low_freq_factor", 1.0), params.get("high_freq_factor", 4.0)


@dataclass(frozen=True)
class Rope:
    """The resolved RoPE settings and where each came from."""

    theta: float | None
    scaling: RopeScaling | None
    partial_rotary_factor: float | None
    sources: dict[str, str] = field(default_factory=dict)


def parse_rope(raw: dict[str, Any], path: Path, *, required: bool = True) -> Rope:
    """Theta from ``rope_parameters.rope_theta`` then top-level ``rope_theta``; scaling from a
    typed ``rope_parameters`` then ``rope_scaling``.

    ``required`` (drafters): theta must be present — never a default; baking one is the bug
    that silently collapsed long-context acceptance in earlier converters (Qwen3.6 publishes
    theta only under rope_parameters) — and so must the factor / original context of the
    scaling types that use them. Targets pass ``required=False``: absent values are None.
    Present values are type-checked either way.

    Raises:
        ConfigError: a required value is missing, or a present one has the wrong type or range.
    """
    sources: dict[str, str] = {}
    params = raw.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise ConfigError(f"{path}: rope_parameters must be an object")
    params = params or {}
    # Per-layer-type rope (Gemma style) keeps the full-attention entry as the drafter's rope.
    if isinstance(params.get("full_attention"), dict):
        params = params["full_attention"]

    theta = None
    if params.get("rope_theta") is not None:
        value, source = params["rope_theta"], "rope_parameters.rope_theta"
    elif raw.get("rope_theta") is not None:
        value, source = raw["rope_theta"], "config.rope_theta"
    elif required:
        raise ConfigError(
            f"{path}: no RoPE theta (looked for rope_parameters.rope_theta and top-level rope_theta); "
            "add the value the drafter was trained with — guessing one silently ruins acceptance"
        )
    else:
        value = source = None
    if source is not None:
        if not _positive(value):
            raise ConfigError(f"{path}: {source} = {value!r:.80} is not a positive finite number; fix config.json")
        sources["rope_theta"] = source
        theta = float(value)

    scaling_src = params if params.get("rope_type") not in (None, "default") else (raw.get("rope_scaling") or {})
    if not isinstance(scaling_src, dict):
        raise ConfigError(f"{path}: rope_scaling must be an object or null")
    where = "rope_parameters" if scaling_src is params else "rope_scaling"
    rope_type = scaling_src.get("rope_type", scaling_src.get("type"))
    if rope_type is not None and not isinstance(rope_type, str):
        raise ConfigError(f"{path}: {where}.rope_type must be a string such as \"yarn\", got {rope_type!r:.80}")
    scaling = None
    if rope_type not in (None, "default"):
        factor = scaling_src.get("factor")
        if required and rope_type in _NEEDS_FACTOR and factor is None:
            raise ConfigError(f"{path}: rope scaling type {rope_type!r:.80} has no factor")
        orig = scaling_src.get("original_max_position_embeddings")
        if required and rope_type in _NEEDS_ORIGINAL and orig is None:
            raise ConfigError(
                f"{path}: rope scaling {rope_type!r:.80} needs original_max_position_embeddings; add it to config.json"
            )
        if factor is not None and not _positive(factor):
            raise ConfigError(f"{path}: {where}.factor = {factor!r:.80} is not a positive finite number; fix config.json")
        if orig is not None:
            orig = coerce(orig, int, f"{where}.original_max_position_embeddings", path)
        numeric = {}
        for k, v in scaling_src.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "rope_theta":
                numeric[k] = coerce(v, float, f"{where}.{k}", path)
        if rope_type == "llama3":
            _check_llama3(numeric, where, path)
        scaling = RopeScaling(
            type=rope_type,
            factor=None if factor is None else float(factor),
            original_context_length=orig,
            params=numeric,
            truncate=_truncate(raw, path),
        )
        sources["rope_scaling"] = where if where == "rope_parameters" else "config.rope_scaling"

    partial = params.get("partial_rotary_factor", raw.get("partial_rotary_factor"))
    if partial is not None:
        partial = coerce(partial, float, "partial_rotary_factor", path)
        if not 0 < partial <= 1:
            raise ConfigError(f"{path}: partial_rotary_factor={partial} must be in (0, 1]")
    return Rope(theta, scaling, partial, sources)


def _truncate(raw: dict[str, Any], path: Path) -> bool:
    """transformers' yarn ``truncate`` (default True), from ``rope_scaling`` then ``rope_parameters``.
    An explicit null reads as false, as transformers' ``if truncate:`` does."""
    for key in ("rope_scaling", "rope_parameters"):
        src = raw.get(key)
        if isinstance(src, dict) and "truncate" in src:
            return bool(flag(src["truncate"], f"{key}.truncate", path))
    return True


def _positive(value: Any) -> bool:
    """A positive finite number that fits a GGUF float32 (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return 0 < float(value) <= FLOAT32_MAX
    except OverflowError:  # an int too large for a double
        return False


def _check_llama3(params: dict[str, float], where: str, path: Path) -> None:
    # The rope_freqs maths divides by both factors and by their difference; transformers
    # requires high > low too.
    low, high = llama3_freq_factors(params)
    if not 0 < low < high:
        raise ConfigError(
            f"{path}: {where} llama3 needs 0 < low_freq_factor < high_freq_factor, got {low} and {high}; fix config.json"
        )
