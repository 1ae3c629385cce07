"""DSpark drafters (DFlash + a semi-autoregressive Markov head): the config knobs they add and
the schemas they are published in, normalised to DFlash's before the drafter parser runs.

Ground truth: ``DSparkModel`` (``conversion/qwen.py``) and ``Gemma4DSparkModel``
(``conversion/gemma.py``) in llama.cpp's converter (vendored in llama-cpp-python 0.3.36), and
mlx-dspark's ``config.py`` (the reference implementation's config reader). Three schemas exist:

- DFlash-lineage (``DSparkDraftModel``, ``Qwen3DSparkModel``, …): Qwen3 keys at the top level,
  taps and mask id at the top level or under ``dflash_config``; the first block slot is
  sampled (``sample_from_anchor`` defaults to true).
- EAGLE3-style vLLM-speculators exports (``DSparkSpeculator``): the backbone under
  ``transformer_layer_config``, taps as ``aux_hidden_state_layer_ids`` (layer-*input* ids,
  i.e. z-lab id + 1); the first slot is a bonus anchor (``sample_from_anchor`` defaults false).
- ``Gemma4DSparkModel``: a Gemma 4 block (k=v attention over ``global_head_dim``, GELU,
  sandwich norms, proportional RoPE). Mainline reads it as a DFlash config (no speculators
  normalisation) and refuses every variant its runtime lacks; we refuse the same ones, with
  mainline's reason, before anything else is parsed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import MAX_HEAD_DIM, coerce, flag

DSPARK_ARCHS = ("DSparkDraftModel", "Qwen3DSparkModel", "DSparkSpeculator", "Lfm2DSparkDraftModel", "LingDSparkModel")
GEMMA4_DSPARK_ARCH = "Gemma4DSparkModel"
ALL_DSPARK_ARCHS = (*DSPARK_ARCHS, GEMMA4_DSPARK_ARCH)
# Gemma4TextConfig's RoPE when a config has no rope_parameters (mainline bakes the same default)
GEMMA4_DEFAULT_ROPE = {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                          "rope_theta": 1000000.0}}
GEMMA4_ACT = "gelu_pytorch_tanh"
# A speculators export builds its block as the transformers config class of
# transformer_layer_config.model_type, so a RoPE theta it omits is that class's default
# (Qwen3Config.default_theta); mainline then writes no rope.freq_base and its runtime's own
# default is the same 10,000. Other layer types are refused rather than guessed.
LAYER_CONFIG_DEFAULT_THETA = {"qwen3": 10000.0}
MLX_DEFAULT_MARKOV_RANK = 256  # mlx-dspark's DSparkConfig default


@dataclass(frozen=True)
class Gemma4Layout:
    """What a Gemma4 DSpark block needs beyond the Qwen3 keys."""

    global_head_dim: int  # the width the drafter's attention really uses (head_dim is the sliding one)
    num_global_key_value_heads: int  # k = v: one projection serves both
    rope_type: str  # "default" | "proportional"
    rotary_fraction: float  # proportional RoPE: the rotated share of each head (rope_freqs masks the rest)


@dataclass(frozen=True)
class MlxKnobs:
    """What mlx-dspark's config reader (the torch reference follows it) takes beyond mainline's
    keys. The head knobs are read at the top level, then under ``dflash_config``; the attention
    and backbone knobs at the top level only."""

    markov_rank: int | None = None  # None: not declared (mlx-dspark builds rank 256; a load reads the weights)
    confidence_head: bool = True  # enable_confidence_head
    confidence_head_with_markov: bool = True  # the confidence head also reads markov_w1[prev]
    has_lm_head: bool = True  # False: the target's head gives the logits
    query_causal: bool = False  # dflash_query_causal: the block attends causally
    sliding_window_non_causal: bool = False  # a speculators export's sliding layers attend both ways
    attention_sink_bias: bool = False  # the top-level spelling (DFlash declares it under dflash_config)
    qwen35_gated_q_proj: bool = False  # enable_qwen35_gated_q_proj: a backbone the reference lacks
    log_snr_conditioning: bool = False  # a conditioning the reference lacks

    @property
    def built_markov_rank(self) -> int:
        """The rank mlx-dspark builds a fresh Markov head with."""
        return MLX_DEFAULT_MARKOV_RANK if self.markov_rank is None else self.markov_rank


@dataclass(frozen=True)
class DSparkSpec:
    """What a DSpark drafter adds to a DFlash one."""

    architecture: str
    eagle3_style: bool  # published as a vLLM-speculators export
    sample_from_anchor: bool  # False: block slot 0 is a bonus anchor passed through unbiased
    markov_head_type: str  # only "vanilla" exists in any runtime
    draft_vocab_size: int  # == vocab_size unless the head predicts a reduced vocabulary (d2t)
    reduced_vocab: bool = False  # draft_vocab_size < vocab_size: d2t maps draft ids to target ids
    markov_rank: int | None = None  # top-level config.json, as mainline reads it; the tensors decide when absent
    gemma4_layout: Gemma4Layout | None = None
    mlx: MlxKnobs = MlxKnobs()

    @property
    def gemma4(self) -> bool:
        return self.architecture == GEMMA4_DSPARK_ARCH


def normalize_dspark(raw: dict[str, Any], arch: str, path: Path) -> dict[str, Any]:
    """The config as the DFlash parser reads it: speculators' nesting flattened and the taps
    and mask id moved under ``dflash_config`` (only where that object is absent, as mainline);
    a Gemma4 DSpark config checked against mainline's refusals and given Gemma 4's default
    RoPE when it has none. The input dict is not modified.

    Raises:
        ConfigError: a Gemma4 DSpark variant mainline's converter refuses (its reason, verbatim).
    """
    if arch == GEMMA4_DSPARK_ARCH:
        _refuse_gemma4(raw, path)
        if not raw.get("rope_parameters"):
            return {**raw, "rope_parameters": GEMMA4_DEFAULT_ROPE}
        return raw
    if arch not in DSPARK_ARCHS:
        return raw
    out = dict(raw)
    tlc = raw.get("transformer_layer_config")
    if tlc is not None:
        if not isinstance(tlc, dict):
            raise ConfigError(f"{path}: transformer_layer_config must be an object, got {type(tlc).__name__}")
        out.update(tlc)
    if "dflash_config" not in out:
        aux = out.get("aux_hidden_state_layer_ids")
        if aux is not None:
            if not isinstance(aux, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in aux):
                raise ConfigError(f"{path}: aux_hidden_state_layer_ids must be a list of integers, got {aux!r:.80}")
            # speculators stores layer-input ids; z-lab/DFlash ids name the layer whose output is tapped
            out["dflash_config"] = {"mask_token_id": out.get("mask_token_id"),
                                    "target_layer_ids": [i - 1 for i in aux]}
        else:
            out["dflash_config"] = {k: out[k] for k in ("target_layer_ids", "mask_token_id") if k in out}
    return out


def layer_config_default_theta(raw: dict[str, Any], normalized: dict[str, Any], path: Path) -> float | None:
    """The RoPE theta a speculators export runs with when neither its top level nor its
    ``transformer_layer_config`` names one; None when one is named or ``raw`` is no such export.

    Raises:
        ConfigError: no theta is named and the layer type's default is not known here.
    """
    tlc = raw.get("transformer_layer_config")
    params = normalized.get("rope_parameters")
    if not isinstance(tlc, dict) or normalized.get("rope_theta") is not None or (
            isinstance(params, dict) and params.get("rope_theta") is not None):
        return None
    model_type = tlc.get("model_type")
    if model_type not in LAYER_CONFIG_DEFAULT_THETA:
        raise ConfigError(f"{path}: transformer_layer_config names no rope_theta and its model_type {model_type!r:.40} "
                          f"has no default known here (known: {', '.join(LAYER_CONFIG_DEFAULT_THETA)}); "
                          "add rope_theta to transformer_layer_config")
    return LAYER_CONFIG_DEFAULT_THETA[model_type]


def parse_dspark(raw: dict[str, Any], arch: str, vocab_size: int, path: Path,
                 normalized: dict[str, Any] | None = None) -> DSparkSpec | None:
    """DSpark knobs of a config, or None for a plain DFlash drafter. ``raw`` is the config as
    published (``sample_from_anchor``'s default depends on its schema); ``normalized`` is what
    ``normalize_dspark`` made of it (the merged backbone mainline reads everything else from).

    Raises:
        ConfigError: a Markov head other than "vanilla", or a draft vocabulary larger than the
            target's (both refused by mainline's converter with the same reason).
    """
    if arch not in ALL_DSPARK_ARCHS:
        return None
    merged = raw if normalized is None else normalized
    dflash = merged.get("dflash_config") if isinstance(merged.get("dflash_config"), dict) else {}
    if arch == GEMMA4_DSPARK_ARCH:
        # Gemma4DSparkModel subclasses DFlashModel: no speculators schema, anchor sampled by default
        eagle3 = False
        anchor = raw.get("sample_from_anchor", True)
        head = dflash.get("markov_head_type", merged.get("markov_head_type", "vanilla"))
    else:
        eagle3 = "transformer_layer_config" in raw or "aux_hidden_state_layer_ids" in raw
        anchor = raw.get("sample_from_anchor", not eagle3)
        # DSparkModel reads the head type from the merged top level only (not dflash_config)
        head = merged.get("markov_head_type", "vanilla")
        if head != "vanilla":
            raise ConfigError(f"{path}: unsupported markov_head_type {head!r:.40} (only 'vanilla' is supported); "
                              "no runtime implements another head and mainline llama.cpp refuses it too")
    # mainline writes the value as given; an explicit null packs as false
    anchor = False if anchor is None else flag(anchor, "sample_from_anchor", path)
    draft = merged.get("draft_vocab_size")
    draft = vocab_size if not draft else coerce(draft, int, "draft_vocab_size", path)
    if draft > vocab_size:
        raise ConfigError(f"{path}: draft_vocab_size {draft} exceeds vocab_size {vocab_size}; the draft vocabulary "
                          "is a subset of the target's (fix config.json)")
    rank = merged.get("markov_rank")
    rank = None if rank is None else coerce(rank, int, "markov_rank", path, lo=0)
    return DSparkSpec(architecture=arch, eagle3_style=eagle3, sample_from_anchor=bool(anchor),
                      markov_head_type=head, draft_vocab_size=draft, markov_rank=rank,
                      gemma4_layout=_gemma4_layout(merged, path) if arch == GEMMA4_DSPARK_ARCH else None,
                      reduced_vocab=draft < vocab_size, mlx=_mlx_knobs(merged, dflash, path))


def _mlx_knobs(merged: dict[str, Any], dflash: dict[str, Any], path: Path) -> MlxKnobs:
    def head(key: str) -> tuple[Any, str]:
        if merged.get(key) is None and dflash.get(key) is not None:
            return dflash[key], f"dflash_config.{key}"
        return merged.get(key), key

    def on(key: str, default: bool, nested: bool = False) -> bool:
        value = flag(*(head(key) if nested else (merged.get(key), key)), path)
        return default if value is None else value

    rank, where = head("markov_rank")
    return MlxKnobs(
        markov_rank=None if rank is None else coerce(rank, int, where, path, lo=0),
        confidence_head=on("enable_confidence_head", True, nested=True),
        confidence_head_with_markov=on("confidence_head_with_markov", True, nested=True),
        has_lm_head=on("has_lm_head", True, nested=True),
        query_causal=on("dflash_query_causal", False),
        sliding_window_non_causal=on("sliding_window_non_causal", False),
        attention_sink_bias=on("attention_sink_bias", False),
        qwen35_gated_q_proj=on("enable_qwen35_gated_q_proj", False),
        log_snr_conditioning=on("log_snr_conditioning", False),
    )


# --- Gemma4 DSpark: mainline's refusals, in its order, with its reasons ------------------------
def _gemma4_rope(raw: dict[str, Any]) -> dict[str, Any]:
    rope = raw.get("rope_parameters") or GEMMA4_DEFAULT_ROPE
    if not isinstance(rope, dict):
        return {}
    if "full_attention" in rope:
        return rope["full_attention"] if isinstance(rope["full_attention"], dict) else {}
    # a flat object: transformers' loader mirrors the top-level knobs into it first
    out = dict(rope)
    if "rope_type" not in out and out.get("type") is not None:
        out["rope_type"] = out["type"]
    if "partial_rotary_factor" not in out and raw.get("partial_rotary_factor") is not None:
        out["partial_rotary_factor"] = raw["partial_rotary_factor"]
    return out


def _refuse_gemma4(raw: dict[str, Any], path: Path) -> None:
    def no(reason: str) -> ConfigError:
        return ConfigError(f"{path}: {reason} (llama.cpp's Gemma4 DSpark runtime has no other variant; "
                           "mainline's converter refuses it too)")

    n_layers = raw.get("num_hidden_layers")
    dflash = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    if not raw.get("attention_k_eq_v", False):
        raise no("Gemma4 DSpark currently requires attention_k_eq_v")
    layer_types = raw.get("layer_types")
    # compared item by item: ``["full_attention"] * n_layers`` would build a list as long as the config says
    if (not isinstance(n_layers, int) or not isinstance(layer_types, list) or len(layer_types) != n_layers
            or any(t != "full_attention" for t in layer_types)):
        raise no("Gemma4 DSpark currently requires uniform full_attention layer types")
    if raw.get("hidden_activation", GEMMA4_ACT) != GEMMA4_ACT:
        raise no(f"Gemma4 DSpark currently requires hidden_activation={GEMMA4_ACT}")
    if raw.get("attention_bias", False) or raw.get("enable_moe_block", False):
        raise no("Gemma4 DSpark attention bias and MoE are not supported")
    if (raw.get("draft_vocab_size") or raw.get("vocab_size")) != raw.get("vocab_size"):
        raise no("Gemma4 DSpark currently requires a full draft vocabulary")
    if dflash.get("markov_head_type", raw.get("markov_head_type", "vanilla")) != "vanilla":
        raise no("Gemma4 DSpark currently requires a vanilla Markov head")
    if _gemma4_rope(raw).get("rope_type") not in ("default", "proportional"):
        raise no("Gemma4 DSpark requires default or proportional RoPE")
    if dflash.get("mask_token_id", raw.get("mask_token_id")) is None:
        raise no("Gemma4 DSpark requires mask_token_id")
    for key in ("global_head_dim", "num_global_key_value_heads"):
        if raw.get(key) is None:
            raise ConfigError(f"{path}: required key {key} is missing; a Gemma4 DSpark block attends with it "
                              "(add it to config.json)")
    if not dflash.get("target_layer_ids", raw.get("target_layer_ids")):
        raise no("Gemma4 DSpark requires target_layer_ids")
    if raw.get("final_logit_softcapping"):
        raise no("Gemma4 DSpark logit softcapping is not supported")
    if dflash.get("use_swa", False):
        window = dflash.get("swa_window_size")
        if window is None:
            raise ConfigError(f"{path}: dflash_config.use_swa is true but dflash_config.swa_window_size is missing; "
                              "add the window the drafter was trained with")
        if isinstance(window, (int, float)) and not isinstance(window, bool) and window <= 0:
            raise no("Gemma4 DSpark swa_window_size must be positive")
    rope = _gemma4_rope(raw)
    if rope.get("rope_type") == "proportional":
        fraction = rope.get("partial_rotary_factor", 0.25)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise no("Gemma4 DSpark partial_rotary_factor must be numeric")
        head_dim = raw["global_head_dim"]
        if isinstance(head_dim, int) and not isinstance(head_dim, bool):
            n_rot = int(head_dim * float(fraction) / 2)
            if not 0 < fraction <= 1 or head_dim * float(fraction) != 2 * n_rot:
                raise no("Gemma4 DSpark rotary dimension count must be positive and even")


def _gemma4_layout(raw: dict[str, Any], path: Path) -> Gemma4Layout:
    rope = _gemma4_rope(raw)
    return Gemma4Layout(
        global_head_dim=coerce(raw["global_head_dim"], int, "global_head_dim", path, hi=MAX_HEAD_DIM),
        num_global_key_value_heads=coerce(raw["num_global_key_value_heads"], int, "num_global_key_value_heads", path),
        rope_type=rope["rope_type"],
        rotary_fraction=float(rope.get("partial_rotary_factor", 0.25)),
    )
