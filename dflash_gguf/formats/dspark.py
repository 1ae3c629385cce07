"""DSpark in the drafter GGUF formats: the keys and tensors it adds, how a file is recognised
as DSpark, and the Gemma4 DSpark block's own tensor names.

Only mainline llama.cpp loads DSpark (``src/models/dflash.cpp``: ``markov_w1.weight``
{rank, n_vocab}, ``markov_w2.weight`` {rank, n_vocab_draft}, optional ``markov_w2.scale``,
``conf_proj.weight`` {n_embd + rank, 1}, ``conf_proj.bias`` {1}, ``d2t`` I64 {n_vocab_draft};
``common/speculative.cpp`` reads ``dflash.sample_from_anchor`` / ``dflash.has_confidence_head``).
Every other format refuses a DSpark drafter by name (``Format.supports_dspark``).
"""
from __future__ import annotations

import re
from typing import Iterable

from .family import FileFamily
from .names import D2T, DSPARK_GLOBAL, GEMMA4_DSPARK_GLOBAL, GEMMA4_DSPARK_LAYER, LAYER_RE

# "<arch>." + suffix; both BOOL, written by DSparkModel.set_gguf_parameters
SAMPLE_FROM_ANCHOR, HAS_CONFIDENCE_HEAD = "sample_from_anchor", "has_confidence_head"
DSPARK_HPARAMS = (SAMPLE_FROM_ANCHOR, HAS_CONFIDENCE_HEAD)
MARKOV_W1, MARKOV_W2, MARKOV_W2_SCALE = "markov_w1.weight", "markov_w2.weight", "markov_w2.scale"
CONF_PROJ, CONF_PROJ_BIAS = "conf_proj.weight", "conf_proj.bias"
# Global GGUF tensors only a DSpark drafter has (markov_w2.scale: a quantized export's row scale)
DSPARK_GGUF_TENSORS = frozenset({*DSPARK_GLOBAL.values(), MARKOV_W2_SCALE, D2T})
# Per-layer GGUF suffixes only a Gemma4 DSpark drafter has (its ffn_norm is the shared name)
_GEMMA4_ONLY = frozenset(v for v in GEMMA4_DSPARK_LAYER.values() if v != "ffn_norm.weight")
_BLK = re.compile(r"^blk\.\d+\.(.+)$")


def is_dspark(keys: Iterable[str], tensor_names: Iterable[str], arch: str = "dflash") -> bool:
    """A drafter file is DSpark when it carries a DSpark key or a DSpark head tensor (not by
    Gemma4's layer names alone: a fork format spells its pre-FFN norm post_attention_norm)."""
    keys = set(keys)
    if any(f"{arch}.{s}" in keys for s in DSPARK_HPARAMS):
        return True
    return any(n in DSPARK_GGUF_TENSORS for n in tensor_names)


def is_gemma4_tensor(gguf_name: str) -> bool:
    """``blk.N.post_attention_norm.weight`` and the other names only Gemma4 DSpark writes."""
    m = _BLK.match(gguf_name)
    return bool(m) and m.group(1) in _GEMMA4_ONLY


def is_gemma4_checkpoint(names: Iterable[str]) -> bool:
    """A Gemma4 DSpark checkpoint: its layers have a pre-FFN norm of their own."""
    return any((m := LAYER_RE.match(n.removeprefix("model."))) and m.group(2) == "pre_feedforward_layernorm.weight"
               for n in names)


def gemma4_gguf_name(src: str) -> str | None:
    """The GGUF name mainline's Gemma4DSparkModel gives a checkpoint tensor, or None when the
    shared DFlash table decides (the name is not one of Gemma4's own)."""
    src = src.removeprefix("model.")
    if src in GEMMA4_DSPARK_GLOBAL:
        return GEMMA4_DSPARK_GLOBAL[src]
    m = LAYER_RE.match(src)
    if m and m.group(2) in GEMMA4_DSPARK_LAYER:
        return f"blk.{m.group(1)}.{GEMMA4_DSPARK_LAYER[m.group(2)]}"
    return None


def dspark_summary(kvs, tensors: dict[str, tuple[int, ...]], arch: str) -> dict | None:
    """What ``inspect`` says about a DSpark drafter (``tensors``: name -> numpy-order shape), or
    None for any other file. Values the file does not carry are None."""
    if not is_dspark(kvs.keys(), tensors, arch):
        return None

    def value(suffix: str):
        kv = kvs.get(f"{arch}.{suffix}")
        return None if kv is None else kv.value

    w1, d2t = tensors.get(MARKOV_W1), tensors.get(D2T)
    tokens = kvs.get("tokenizer.ggml.tokens")
    return {
        "markov_rank": None if w1 is None else int(w1[-1]),
        "vocab_size": None if tokens is None else len(tokens.value),
        "draft_vocab_size": int(d2t[-1]) if d2t else None,  # None: the full vocabulary
        "confidence_head": CONF_PROJ in tensors,
        "sample_from_anchor": value(SAMPLE_FROM_ANCHOR),
        "has_confidence_head": value(HAS_CONFIDENCE_HEAD),
        "gemma4_layout": any(is_gemma4_tensor(n) for n in tensors),
    }


class DSparkFile(FileFamily):
    """DSpark drafter files: the Markov / confidence heads, ``d2t`` and Gemma4's layer names are
    claimed (in formats that load DSpark), ``attn_v`` is optional in a k=v Gemma4 file."""

    name = "dspark"

    def claims_tensor(self, fmt, gguf_name: str) -> bool:
        return fmt.supports_dspark and (gguf_name in DSPARK_GGUF_TENSORS or is_gemma4_tensor(gguf_name))

    def optional_tensor(self, fmt, gguf_name: str, tensor_names: Iterable[str]) -> bool:
        return (fmt.supports_dspark and gguf_name.endswith(".attn_v.weight")
                and any(is_gemma4_tensor(t) for t in tensor_names))

    def summary(self, kvs, tensors: dict[str, tuple[int, ...]], arch: str) -> dict | None:
        return dspark_summary(kvs, tensors, arch)


DSPARK = DSparkFile()
