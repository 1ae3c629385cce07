"""The one table of drafter hyperparameters: config field ↔ ``<arch>.<suffix>`` GGUF key ↔ type.

Read forward by ``meta_from_config`` (convert writes these keys, in this order, as llama.cpp's
``DFlashModel.set_gguf_parameters`` does) and backward by ``decode_hparams`` (the torch
reference rebuilds a drafter's config.json from a GGUF's keys, so parity runs with the
constants a runtime would use). A new constant is one row here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..config import DrafterConfig
from ..errors import GGUFFormatError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_kv import get_bool, get_bools, get_float, get_int, get_str
from ..fileio.types import KV

HParam = tuple[str, Any, T, "T | None"]  # (suffix, value, type, array sub-type), as DrafterMeta holds them
_MISSING = object()


class KeyReader:
    """Typed reads of a GGUF's ``<arch>.<suffix>`` keys: a key of the wrong type, NaN, or a size
    of 0 is one GGUFFormatError naming the key (``fileio.gguf_kv``)."""

    def __init__(self, kvs: dict[str, KV], arch: str | None, path: str, why: str) -> None:
        self.kvs, self.arch, self.path, self.why = kvs, arch, path, why

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def has(self, suffix: str) -> bool:
        return self.key(suffix) in self.kvs

    def _default(self, suffix: str, default: Any) -> Any:
        if default is _MISSING:
            raise GGUFFormatError(f"{self.path}: {self.key(suffix)} is missing; {self.why}")
        return default

    def int(self, suffix: str, default: Any = _MISSING, lo: int = 1) -> Any:
        if not self.has(suffix):
            return self._default(suffix, default)
        return get_int(self.kvs, self.key(suffix), None, path=self.path, lo=lo)

    def float(self, suffix: str, default: Any = _MISSING, positive: bool = False) -> Any:
        if not self.has(suffix):
            return self._default(suffix, default)
        return get_float(self.kvs, self.key(suffix), None, path=self.path, positive=positive)

    def bool(self, suffix: str) -> bool:
        return get_bool(self.kvs, self.key(suffix), None, path=self.path)

    def bools(self, suffix: str) -> tuple[bool, ...]:
        return get_bools(self.kvs, self.key(suffix), None, path=self.path)

    def str(self, suffix: str) -> str:
        return get_str(self.kvs, self.key(suffix), None, path=self.path)


def _set(raw: dict, path: str, value: Any) -> None:
    """``raw["a"]`` or, for ``"dflash_config.a"``, ``raw["dflash_config"]["a"]``."""
    *outer, last = path.split(".")
    for part in outer:
        raw = raw.setdefault(part, {})
    raw[last] = value


@dataclass(frozen=True)
class Key:
    """One scalar hyperparameter: written from ``DrafterConfig.<field>`` when ``written(cfg)``
    (default: the field is not None), read back into config.json's ``raw`` spelling."""

    suffix: str
    type: T
    field: str
    raw: str  # where config.json spells it ("dflash_config.x" for a nested knob)
    written: Callable[[DrafterConfig], bool] | None = None
    required: bool = False  # a GGUF without it cannot be rebuilt into a config
    positive: bool = False  # floats that must be > 0 to mean anything (theta)

    @property
    def suffixes(self) -> tuple[str, ...]:
        return (self.suffix,)

    def encode(self, cfg: DrafterConfig) -> list[HParam]:
        value = getattr(cfg, self.field)
        if (self.written(cfg) if self.written else value is not None):
            value = bool(value) if self.type == T.BOOL else float(value) if self.type == T.FLOAT32 else value
            return [(self.suffix, value, self.type, None)]
        return []

    def decode(self, keys: KeyReader, raw: dict) -> None:
        if not self.required and not keys.has(self.suffix):
            return
        if self.type == T.UINT32:
            value = keys.int(self.suffix)
        elif self.type == T.FLOAT32:
            value = keys.float(self.suffix, positive=self.positive)
        else:
            value = keys.bool(self.suffix)
        _set(raw, self.raw, value)


class RopeScalingKeys:
    """``rope.scaling.*``: written per scaling type (llama3 writes none: the plan adds a
    ``rope_freqs`` tensor instead), read back into a ``rope_scaling`` dict."""

    field = "rope_scaling"
    suffixes = ("rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
                "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor", "rope.scaling.yarn_beta_fast",
                "rope.scaling.yarn_beta_slow")
    YARN = (("extrapolation_factor", "yarn_ext_factor"), ("attention_factor", "yarn_attn_factor"),
            ("attn_factor", "yarn_attn_factor"), ("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"))

    def encode(self, cfg: DrafterConfig) -> list[HParam]:
        rs = cfg.rope_scaling
        if rs is None or rs.type not in ("linear", "yarn", "longrope", "su"):
            return []
        from gguf import RopeScalingType  # here: convert imports gguf-py anyway; inspect and checks do not

        if rs.type in ("longrope", "su"):
            return [("rope.scaling.type", RopeScalingType.LONGROPE.value, T.STRING, None)]
        out: list[HParam] = [
            ("rope.scaling.type", (RopeScalingType.LINEAR if rs.type == "linear" else RopeScalingType.YARN).value,
             T.STRING, None),
            ("rope.scaling.factor", rs.factor, T.FLOAT32, None)]
        if rs.type == "yarn":
            out.append(("rope.scaling.original_context_length", rs.original_context_length, T.UINT32, None))
            for src_key, suffix in self.YARN:
                if src_key in rs.params and not any(s == f"rope.scaling.{suffix}" for s, *_ in out):
                    out.append((f"rope.scaling.{suffix}", rs.params[src_key], T.FLOAT32, None))
        return out

    def decode(self, keys: KeyReader, raw: dict) -> None:
        if not keys.has("rope.scaling.type"):
            return
        typ = keys.str("rope.scaling.type")
        if typ == "none":
            return
        out: dict[str, Any] = {"rope_type": typ, "factor": keys.float("rope.scaling.factor", 1.0, positive=True)}
        if keys.has("rope.scaling.original_context_length"):
            out["original_max_position_embeddings"] = keys.int("rope.scaling.original_context_length")
        for name, suffix in self.YARN:
            if name != "attn_factor" and keys.has(f"rope.scaling.{suffix}"):
                out[name] = keys.float(f"rope.scaling.{suffix}")
        raw["rope_scaling"] = out


class RopeDimKey:
    """``rope.dimension_count``: the rotated dims of a partial-rotary head; config.json says it
    as a fraction of head_dim."""

    field, suffixes = "partial_rotary_factor", ("rope.dimension_count",)

    def encode(self, cfg: DrafterConfig) -> list[HParam]:
        return [] if cfg.partial_rotary_factor is None else [("rope.dimension_count", cfg.rope_dim, T.UINT32, None)]

    def decode(self, keys: KeyReader, raw: dict) -> None:
        if keys.has("rope.dimension_count"):
            raw["partial_rotary_factor"] = keys.int("rope.dimension_count") / raw["head_dim"]


class SlidingWindowKeys:
    """``attention.sliding_window`` and its per-layer pattern (BOOL array, true = sliding):
    every layer under vLLM's ``use_swa``, else the config's ``layer_types``."""

    field, suffixes = "sliding_window", ("attention.sliding_window", "attention.sliding_window_pattern")

    def encode(self, cfg: DrafterConfig) -> list[HParam]:
        if not cfg.sliding_window:
            return []
        out: list[HParam] = [("attention.sliding_window", cfg.sliding_window, T.UINT32, None)]
        if cfg.swa_every_layer:
            pattern = [True] * cfg.num_hidden_layers
        else:
            pattern = [t == "sliding_attention" for t in (cfg.layer_types or ())]
        if pattern:  # llama.cpp's writer drops an empty array; so do we
            out.append(("attention.sliding_window_pattern", pattern, T.ARRAY, T.BOOL))
        return out

    def decode(self, keys: KeyReader, raw: dict) -> None:
        if not keys.has("attention.sliding_window"):
            return
        n_layers = raw["num_hidden_layers"]
        raw["use_sliding_window"] = True
        raw["sliding_window"] = keys.int("attention.sliding_window")
        pattern = (True,) * n_layers
        if keys.has("attention.sliding_window_pattern"):
            pattern = keys.bools("attention.sliding_window_pattern")
            if len(pattern) != n_layers:
                raise GGUFFormatError(f"{keys.path}: {keys.key('attention.sliding_window_pattern')} has "
                                      f"{len(pattern)} entries for {n_layers} layers (corrupt metadata; re-convert)")
        raw["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]


def _head_dim_written(cfg: DrafterConfig) -> bool:
    return cfg.head_dim_in_config


# In the order llama.cpp's converter writes them (byte-identical files depend on it).
HPARAMS = (
    Key("block_count", T.UINT32, "num_hidden_layers", "num_hidden_layers", required=True),
    Key("context_length", T.UINT32, "max_position_embeddings", "max_position_embeddings"),
    Key("embedding_length", T.UINT32, "hidden_size", "hidden_size", required=True),
    Key("feed_forward_length", T.UINT32, "intermediate_size", "intermediate_size", required=True),
    Key("attention.head_count", T.UINT32, "num_attention_heads", "num_attention_heads", required=True),
    Key("attention.head_count_kv", T.UINT32, "num_key_value_heads", "num_key_value_heads"),
    Key("attention.causal", T.BOOL, "is_causal", "is_causal"),
    RopeScalingKeys(),
    Key("rope.freq_base", T.FLOAT32, "rope_theta", "rope_theta", lambda c: c.rope_theta_in_config, required=True,
        positive=True),
    Key("attention.layer_norm_rms_epsilon", T.FLOAT32, "rms_norm_eps", "rms_norm_eps", required=True),
    Key("attention.key_length", T.UINT32, "head_dim", "head_dim", _head_dim_written),
    Key("attention.value_length", T.UINT32, "head_dim", "head_dim", _head_dim_written),
    RopeDimKey(),
    Key("attention.value_scale", T.FLOAT32, "attention_value_scale", "dflash_config.attention_value_scale"),
    Key("logit_scale", T.FLOAT32, "output_multiplier", "dflash_config.output_multiplier"),
    Key("final_logit_softcapping", T.FLOAT32, "final_logit_softcapping", "dflash_config.final_logit_softcapping"),
    Key("embedding_scale", T.FLOAT32, "input_embedding_scale", "dflash_config.input_embedding_scale"),
    SlidingWindowKeys(),
)


def encode_hparams(cfg: DrafterConfig) -> list[HParam]:
    """Every hyperparameter key convert writes for ``cfg``, in the converter's order."""
    return [hp for row in HPARAMS for hp in row.encode(cfg)]


def config_field(suffix: str) -> str | None:
    """The DrafterConfig field a hyperparameter key is written from (None: not in the table)."""
    return next((row.field for row in HPARAMS if suffix in row.suffixes), None)


def decode_hparams(keys: KeyReader, raw: dict) -> None:
    """Fill a config.json dict (``raw``, holding ``head_dim``) from a drafter GGUF's keys."""
    for row in HPARAMS:
        row.decode(keys, raw)
