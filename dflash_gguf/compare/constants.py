"""compare-weights on constants: every key ``convert`` would derive from the checkpoint's
config.json for the file's format, against the file's own.

A GGUF can hold every tensor bit for bit and still run wrong: a converter that hard-codes a
RoPE theta, drops a sliding-window pattern or stores taps one off changes what the runtime
computes, not the weights. The expected keys come from the conversion itself
(``meta_from_config`` + the family's keys + the format's spelling: one source of these facts);
floats are compared at the precision GGUF stores them (float32).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..config import DrafterConfig
from ..convert.plan import Routes
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_reader import GGUFFile
from ..fileio.types import KV
from ..formats import Format, meta_from_config
from ..formats.hparams import config_field
from ..formats.meta import MASK_ID, ROPE_SECTIONS, DrafterMeta
from .report import CONST_EXTRA as EXTRA, CONST_MISSING as MISSING, DIFFERS, SAME

# Format facts (``DKey.fact``) -> the config field they come from
_FACT_FIELDS = {"taps": "target_layer_ids", "n_taps": "target_layer_ids", "block_size": "block_size",
                "mask_token_id": "mask_token_id", "vocab_size": "vocab_size"}


@dataclass
class ConstantComparison:
    """One key: what convert would write (``ours``, None: it would not write the key) against the
    file (``theirs``, None: absent), and where ours came from."""

    key: str
    ours: Any
    theirs: Any
    source: str
    status: str  # SAME | DIFFERS | MISSING (ours only) | EXTRA (the file's only)

    @property
    def passed(self) -> bool:
        return self.status == SAME

    @property
    def detail(self) -> str:
        if self.status == MISSING:
            return f"{self.key} is not in the file; convert writes {_show(self.ours)} (from {self.source})"
        if self.status == EXTRA:
            return f"{self.key} = {_show(self.theirs)} in the file; convert would not write it ({self.source})"
        return f"{self.key} = {_show(self.theirs)} in the file, {_show(self.ours)} from {self.source}"

    def to_json(self) -> dict:
        return {"key": self.key, "status": self.status, "ours": _plain(self.ours), "theirs": _plain(self.theirs),
                "source": self.source, "detail": "" if self.passed else self.detail}


def compare_constants(cfg: DrafterConfig, fmt: Format, routes: Routes, f: GGUFFile, file_meta: DrafterMeta,
                      ) -> list[ConstantComparison]:
    """Every DFlash key of ``f`` against what converting ``cfg`` to ``fmt`` writes. The target's
    tokenizer, the fc width and whether the target uses M-RoPE are taken from the file: they
    come from the target, not from config.json, and the tensors are compared on their own."""
    arch = f.arch or ""
    tokenizer = [kv for k, kv in f.kvs.items() if k.startswith("tokenizer.") and k != MASK_ID]
    meta = meta_from_config(cfg, n_target_features=file_meta.n_target_features, tokenizer=tokenizer,
                            target_mrope=f"{arch}.{ROPE_SECTIONS}" in f.kvs)
    routes.family.apply(meta)
    our_arch, kvs = fmt.kvs(meta)
    ours = {kv.key.replace(f"{our_arch}.", f"{arch}.", 1): kv for kv in kvs if _compared(kv.key, our_arch)}
    theirs = {k: kv for k, kv in f.kvs.items() if _compared(k, arch)}
    return pair_constants(ours, theirs, our_arch, arch, _sources(cfg, fmt, arch))


def pair_constants(ours: dict[str, KV], theirs: dict[str, KV], our_arch: str, arch: str,
                   sources: Callable[[str], str]) -> list[ConstantComparison]:
    """Key by key, what convert writes (``ours``) against the file's (``theirs``), both under the
    file's arch; ``sources(key)`` says where each value of ours comes from."""
    out = []
    if our_arch != arch:
        out.append(ConstantComparison("general.architecture", our_arch, arch, "the format and config.json", DIFFERS))
    for key in [*ours, *(k for k in theirs if k not in ours)]:
        a, b = ours.get(key), theirs.get(key)
        src = sources(key)
        if b is None:
            out.append(ConstantComparison(key, a.value, None, src, MISSING))
        elif a is None:
            out.append(ConstantComparison(key, None, b.value, src, EXTRA))
        else:
            out.append(ConstantComparison(key, a.value, b.value, src, SAME if _equal(a, b) else DIFFERS))
    return out


def _compared(key: str, arch: str) -> bool:
    return key.startswith(f"{arch}.") or key == MASK_ID


def _sources(cfg: DrafterConfig, fmt: Format, arch: str):
    facts = {k.key.format(a=arch): k.fact for k in fmt.dflash_keys}

    def source(key: str) -> str:
        fact = facts.get(key)
        field = (_FACT_FIELDS.get(fact, fact) if fact is not None else "mask_token_id" if key == MASK_ID
                 else config_field(key.removeprefix(f"{arch}.")))
        if fact == "n_target_features":
            return "the fc tensor's width (taps × target hidden)"
        if field is None:
            return "the drafter family's rules (config.json and checkpoint)"
        return field_source(cfg.sources, field)

    return source


def field_source(sources: dict[str, str], field: str) -> str:
    """Where config field ``field``'s value came from, as a constant's message names it."""
    where = sources.get(field)
    if where == "default":
        return f"the default for {field}"
    return where or f"config.json ({field})"


def _equal(a: KV, b: KV) -> bool:
    """Equal as GGUF stores them: floats at float32, arrays element by element, types alike
    in kind (an INT32 and a UINT32 3 are the same constant)."""
    if (a.type == T.ARRAY) != (b.type == T.ARRAY):
        return False
    va, vb = (list(a.value), list(b.value)) if a.type == T.ARRAY else ([a.value], [b.value])
    if len(va) != len(vb):
        return False
    floats = {T.FLOAT32, T.FLOAT64}
    as_float = (a.sub_type if a.type == T.ARRAY else a.type) in floats or (
        b.sub_type if b.type == T.ARRAY else b.type) in floats
    for x, y in zip(va, vb):
        if isinstance(x, bool) != isinstance(y, bool):
            return False
        if as_float:
            try:
                if np.float32(x) != np.float32(y):
                    return False
            except (TypeError, ValueError):
                return False
        elif x != y:
            return False
    return True


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)
    return v


def _show(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_show(x) for x in list(v)[:8])
        return f"[{inner}{', …' if len(v) > 8 else ''}]"
    if isinstance(v, float):
        return format(v, ".9g")
    return repr(v) if isinstance(v, str) else str(v)
