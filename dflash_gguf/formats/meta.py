"""What every drafter GGUF format shares: the format-independent DrafterMeta, the tensor
name table, and the Format base class that each runtime family module specialises.

A format only decides (1) the architecture string, (2) how the DFlash-specific facts
(taps, block size, mask id, tap width) are spelled as keys, and (3) three tensor names
(fc, hidden norm, the pre-FFN norm). Everything else — the Qwen3-style hparams, rope
scaling, SWA, tokenizer — is the same key suffix under a different arch prefix. So convert
builds a DrafterMeta from config.json, retarget parses one from a GGUF, and both write it
through the same ``Format.kvs``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..errors import UsageError
from ..fileio.gguf_constants import GGUFValueType
from ..fileio.gguf_kv import I32_MAX, get_int, get_ints
from ..fileio.types import KV
from .names import (BLK_RE, DFLASH2_LAYER, FC, GLOBAL_TENSORS, HIDDEN_NORM, LAYER_RE, LAYER_TENSORS, OPTIONAL_TENSORS,
                    PRE_FFN_NORM)

T = GGUFValueType
# hparam suffix (under "<arch>.") of M-RoPE sections: a target's own, or a drafter's degenerate
# [head_dim/2, 0, 0, 0] that makes mainline rope it on the target's temporal positions
ROPE_SECTIONS = "rope.dimension_sections"

MASK_ID = "tokenizer.ggml.mask_token_id"

# Ours alone, the last key of every file convert and retarget write: the dflash-gguf version that
# wrote it. Mainline has no key for the converting tool (the source goes in general.source.*).
CONVERTER_KEY = "dflash_gguf.version"


def without_mask(tokenizer: list[KV]) -> tuple[list[KV], int | None]:
    """The target's tokenizer KVs without its mask id, and where that id stood (``mask_at``):
    the drafter's mask id wins over any the target's vocab carries."""
    keys = [kv.key for kv in tokenizer]
    at = keys.index(MASK_ID) if MASK_ID in keys else None
    return [kv for kv in tokenizer if kv.key != MASK_ID], at


@dataclass
class DrafterMeta:
    """The semantic content of a drafter GGUF, independent of any runtime's spelling.

    ``hparams`` are (suffix, value, type, sub_type) written under ``<arch>.`` by every format.
    When a file is parsed, every arch-prefixed key its format does not interpret lands here
    verbatim (re-prefixed on write), so a retarget round trip loses nothing.
    """

    taps: tuple[int, ...]  # z-lab convention: output of target layer L
    block_size: int | None
    mask_token_id: int | None
    n_target_features: int  # fc input width = n_taps * target hidden
    vocab_size: int | None = None
    general: list[KV] = field(default_factory=list)  # general.* except architecture/file_type/quant version
    hparams: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = field(default_factory=list)
    dflash2: dict[str, int] = field(default_factory=dict)  # conv_kernel_size, conv_group_size, selector_*
    tokenizer: list[KV] = field(default_factory=list)  # the target's, without its mask id (see mask_at)
    # Where the target's vocab had tokenizer.ggml.mask_token_id: a format that writes the drafter's
    # there overwrites it in place, as gguf-py's writer does for mainline's converter.
    mask_at: int | None = None
    file_type: int | None = None
    file_type_at: int | None = None  # index in hparams general.file_type is written at; None: after them
    quantization_version: int | None = None
    flavor: str | None = None  # lucebox: "qwen35" | "gemma4"
    dspark: bool = False  # a DSpark drafter (Markov head, d2t): only formats with supports_dspark carry it

    def hparam(self, suffix: str, default: Any = None) -> Any:
        for s, v, _t, _st in self.hparams:
            if s == suffix:
                return v
        return default

    @property
    def n_layers(self) -> int:
        return int(self.hparam("block_count"))

    @property
    def hidden_size(self) -> int:
        return int(self.hparam("embedding_length"))

    @property
    def causal(self) -> bool | None:
        return self.hparam("attention.causal")


@dataclass(frozen=True)
class DKey:
    """One DFlash-specific key as a format spells it (``{a}`` = the architecture) and the
    DrafterMeta fact it carries: taps, n_taps, n_target_features, block_size, mask_token_id,
    vocab_size, or a DFlash2 hparam by name. The same entry writes and parses the key."""

    key: str
    fact: str
    tail: bool = False  # written after the tokenizer keys


class Format:
    """A runtime family's spelling of a drafter. Subclasses set the class attributes and
    implement ``dflash_kvs`` / ``parse_dflash``; the rest is shared."""

    name: str = ""
    description: str = ""
    loaders: str = ""  # which runtimes load it, for docs and summaries
    needs_tokenizer: bool = True
    tap_offset: int = 0  # added to z-lab ids when stored (mainline: +1, layer-input index)
    fc_name: str = "fc.weight"
    hidden_norm_name: str = "hidden_norm.weight"
    pre_ffn_norm: str = "ffn_norm.weight"
    supports_dflash2: bool = False
    supports_dspark: bool = False  # formats/dspark.py: the keys and tensors only mainline loads
    archs: tuple[str, ...] = ()
    dflash_keys: tuple[DKey, ...] = ()  # in file order
    # What the loaders need, read by `check`: (key, level, why) with {a} = the arch; level
    # "error" (the load fails), "warning" (a silent wrong default) or "info" (a known default).
    required_keys: tuple[tuple[str, str, str], ...] = ()
    required_hparams: tuple[str, ...] = ("block_count", "embedding_length", "feed_forward_length",
                                         "attention.head_count", "attention.head_count_kv")  # under "<arch>."
    ignores_unknown_tensors: bool = False  # else an extra tensor fails the load ("wrong number of tensors")
    loads_weight_scales: bool = False  # mainline's loader: NVFP4 weights' .scale / .input_scale (names.py)

    # --- architecture and keys -------------------------------------------------------
    def arch(self, meta: DrafterMeta) -> str:
        return self.archs[0]

    def kvs(self, meta: DrafterMeta) -> tuple[str, list[KV]]:
        """(architecture, ordered KV list without general.architecture) for ``meta``."""
        if meta.dflash2 and not self.supports_dflash2:
            raise UsageError(
                f"DFlash2 drafters (conv + candidate selector) load only in mainline llama.cpp; "
                f"use --format llama.cpp instead of --format {self.name}"
            )
        if meta.dspark and not self.supports_dspark:
            raise UsageError(
                f"DSpark drafters (Markov head, reduced vocabularies) load only in mainline llama.cpp; "
                f"use --format llama.cpp instead of --format {self.name}"
            )
        if self.needs_tokenizer and not meta.tokenizer:
            raise UsageError(
                f"--format {self.name} needs the target's tokenizer in the GGUF; pass --target-gguf T.gguf "
                "(the target as GGUF) or --target-dir T/ (its Hugging Face dir)"
            )
        arch = self.arch(meta)
        out: list[KV] = list(meta.general)
        hparams = [KV(f"{arch}.{s}", v, t, st) for s, v, t, st in meta.hparams]
        at = len(hparams) if meta.file_type_at is None else meta.file_type_at
        out += hparams[:at]
        if meta.file_type is not None:
            out.append(KV("general.file_type", int(meta.file_type), T.UINT32))
        out += hparams[at:]
        out += self.dflash_kvs(arch, meta)
        if meta.quantization_version is not None:
            out.append(KV("general.quantization_version", int(meta.quantization_version), T.UINT32))
        tokenizer, tail = list(meta.tokenizer), self.tail_kvs(arch, meta)
        if meta.mask_at is not None:
            tokenizer[meta.mask_at:meta.mask_at] = [kv for kv in tail if kv.key == MASK_ID]
            tail = [kv for kv in tail if kv.key != MASK_ID]
        return arch, [*out, *tokenizer, *tail, KV(CONVERTER_KEY, __version__, T.STRING)]

    def dflash_kvs(self, arch: str, meta: DrafterMeta) -> list[KV]:
        return [kv for k in self.dflash_keys if not k.tail for kv in self._write(k, arch, meta)]

    def tail_kvs(self, arch: str, meta: DrafterMeta) -> list[KV]:
        return [kv for k in self.dflash_keys if k.tail for kv in self._write(k, arch, meta)]

    def _write(self, k: "DKey", arch: str, meta: DrafterMeta) -> list[KV]:
        key = k.key.format(a=arch)
        if k.fact == "taps":  # every format stores taps as INT32
            return [KV(key, self.stored_taps(meta), T.ARRAY, T.INT32)]
        value = {"n_taps": len(meta.taps), "n_target_features": meta.n_target_features,
                 "block_size": meta.block_size, "mask_token_id": meta.mask_token_id,
                 "vocab_size": meta.vocab_size}.get(k.fact, meta.dflash2.get(k.fact))
        return [] if value is None else [KV(key, value, T.UINT32)]

    def parse_dflash(self, arch: str, kv: dict[str, KV], meta: DrafterMeta, consumed: set[str], path: str = "") -> None:
        """Fill meta's DFlash fields from a file's keys, adding each key used to ``consumed``."""
        for k in self.dflash_keys:
            key = k.key.format(a=arch)
            if k.fact == "taps":
                stored = get_ints(kv, key, consumed, path=path, lo=0, hi=I32_MAX - 1)
                meta.taps = tuple(i - self.tap_offset for i in stored)
                continue
            value = get_int(kv, key, consumed, required=False, path=path)
            if k.fact in ("n_taps", "n_target_features"):
                continue  # derived again on write (from the taps, from the fc tensor): only consumed
            if k.fact in ("block_size", "mask_token_id", "vocab_size"):
                setattr(meta, k.fact, value)
            elif value is not None:
                meta.dflash2[k.fact] = value

    def stored_taps(self, meta: DrafterMeta) -> list[int]:
        return [i + self.tap_offset for i in meta.taps]

    # --- tensor names ------------------------------------------------------------------
    def gguf_name(self, src: str) -> str | None:
        """GGUF name for a checkpoint tensor name, or None when the name is not a drafter tensor."""
        src = src.removeprefix("model.")
        if src == FC:
            return self.fc_name
        if src == HIDDEN_NORM:
            return self.hidden_norm_name
        if src in GLOBAL_TENSORS:
            return GLOBAL_TENSORS[src]
        if src in OPTIONAL_TENSORS:
            return OPTIONAL_TENSORS[src]
        m = LAYER_RE.match(src)
        if m:
            bid, rest = m.groups()
            if rest == PRE_FFN_NORM:
                return f"blk.{bid}.{self.pre_ffn_norm}"
            if rest in LAYER_TENSORS:
                return f"blk.{bid}.{LAYER_TENSORS[rest]}"
        return None

    def source_name(self, gguf_name: str) -> str | None:
        """Inverse of gguf_name (checkpoint name without ``model.``), or None if unknown."""
        if gguf_name == self.fc_name:
            return FC
        if gguf_name == self.hidden_norm_name:
            return HIDDEN_NORM
        for table in (GLOBAL_TENSORS, OPTIONAL_TENSORS):
            for src, dst in table.items():
                if dst == gguf_name:
                    return src
        m = BLK_RE.match(gguf_name)
        if m:
            bid, rest = m.groups()
            if rest == self.pre_ffn_norm:
                return f"layers.{bid}.{PRE_FFN_NORM}"
            for src, dst in LAYER_TENSORS.items():
                if dst == rest:
                    return f"layers.{bid}.{src}"
        return None

    def required_tensors(self, n_layers: int) -> list[str]:
        """GGUF names the loaders need for an ``n_layers`` drafter: fc, hidden norm, output
        norm, then each layer's weights and pre-FFN norm (biases, DFlash2 tensors and the
        embeddings are optional)."""
        per_layer = [g for src, g in LAYER_TENSORS.items() if src.endswith(".weight") and src not in DFLASH2_LAYER]
        out = [self.fc_name, self.hidden_norm_name, GLOBAL_TENSORS["norm.weight"]]
        for i in range(n_layers):
            out += [f"blk.{i}.{g}" for g in per_layer] + [f"blk.{i}.{self.pre_ffn_norm}"]
        return out

    def rename_from(self, other: "Format", gguf_name: str) -> str | None:
        src = other.source_name(gguf_name)
        return None if src is None else self.gguf_name(src)
