"""Drafter checks: is a DFlash drafter loadable by the runtime its format targets?

The format is detected and parsed by ``dflash_gguf.formats``; every per-format fact (tensor
names, required keys, how the loaders treat extra tensors) is asked of the ``Format``, never
re-stated here. Every finding has category ``drafter``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..errors import GGUFFormatError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_header import GGUFHeader, show
from ..fileio.string_array import StringArray
from ..formats import FORMATS, DrafterMeta, FileFamily, Format, detect_format, file_family, meta_from_gguf
from ..formats.names import BLK_RE, DROPPED_TENSORS, FC_SCALE, ROPE_FREQS, SCALED_LAYER_WEIGHTS, WEIGHT_SCALES
from ..fileio.types import type_name
from .findings import Finding, Severity, as_int, finding

# Tensors outside every format's name table that a drafter may carry: the llama3 RoPE table
# the converter generates, and the reduced-vocab maps formats/ knows as extras.
_EXTRA_TENSORS = frozenset({ROPE_FREQS, *DROPPED_TENSORS})
# A hostile block_count must not build a huge inventory.
_MAX_LAYERS = 256


@dataclass(frozen=True)
class DrafterView:
    """A file as a drafter: what the drafter, DSpark and pairing checks read of it, worked out
    once per file (``run_checks``)."""

    fmt: Format | None  # None: not a drafter file
    meta: DrafterMeta | None = None  # None: its DFlash keys do not parse (``problem`` says why)
    problem: str | None = None
    family: FileFamily | None = None  # what the family adds to the shared rules (``formats.file_family``)


def drafter_view(h: GGUFHeader) -> DrafterView:
    """The drafter format of ``h`` and its parsed keys (or the reason they do not parse)."""
    names = [t.name for t in h.tensors]
    fmt = detect_format(h.arch or "", h.kv, names)
    if fmt is None:
        return DrafterView(None)
    family = file_family(h.kv, names, h.arch or "")
    try:
        _, meta = meta_from_gguf(h.kv, {t.name: t.shape for t in h.tensors}, h.path)
    except GGUFFormatError as exc:
        return DrafterView(fmt, None, str(exc).removeprefix(f"{h.path}: "), family)
    except (TypeError, ValueError, OverflowError) as exc:  # a key of the wrong type in a hostile file
        return DrafterView(fmt, None, f"DFlash keys of unexpected types ({type(exc).__name__}: {exc})", family)
    return DrafterView(fmt, meta, None, family)


def _d(h: GGUFHeader, sev: Severity, code: str, msg: str, where: str = "") -> Finding:
    return finding(h, sev, code, msg, where, "drafter")


def check_drafter(h: GGUFHeader, view: DrafterView | None = None) -> Iterator[Finding]:
    """``view``: ``drafter_view(h)``, which run_checks computes once for all the checks that read it."""
    view = view or drafter_view(h)
    fmt, meta, problem = view.fmt, view.meta, view.problem
    if fmt is None:
        return
    a = show(h.arch or "")
    for key, level, why in fmt.required_keys:
        k = key.format(a=h.arch)
        if k not in h.kv:
            yield _d(h, Severity(level), "drafter-key-missing", f"{show(k)} is missing ({fmt.name} format): {why}",
                     f"key {show(k)}")
    family = view.family or file_family(h.kv, [t.name for t in h.tensors], h.arch or "")
    for suffix in family.required_hparams(fmt):
        k = f"{h.arch}.{suffix}"
        if k not in h.kv:
            yield _d(h, Severity.ERROR, "drafter-key-missing", f"{show(k)} is missing: loaders read it", f"key {show(k)}")
    for key, why in family.problems(h.kv, h.arch or ""):
        yield _d(h, Severity.ERROR, "drafter-key-value", f"{show(key)} {why}", f"key {show(key)}")
    if fmt.needs_tokenizer and not isinstance(h.get("tokenizer.ggml.tokens"), StringArray):
        yield _d(h, Severity.ERROR, "drafter-no-tokenizer",
                 f"no tokenizer: the {fmt.name} runtimes need the target's vocabulary in the drafter GGUF "
                 f"(re-convert with --target-gguf or --target-dir)", "key tokenizer.ggml.tokens")
    if problem:
        yield _d(h, Severity.ERROR, "drafter-format", f"not a loadable {fmt.name} drafter: {problem}")
    yield from _drafter_tensors(h, fmt, view.family)
    if meta is not None:
        yield from _drafter_shapes(h, fmt, meta, a)
    if not family.all_layers_swa:
        yield from _drafter_swa(h, a)


def _drafter_tensors(h: GGUFHeader, fmt: Format, family: FileFamily) -> Iterator[Finding]:
    n = as_int(h.get(f"{h.arch}.block_count"))
    names = set(h.tensors_by_name)
    missing = [e for e in family.required_tensors(fmt, min(n or 0, _MAX_LAYERS))
               if e not in names and not family.optional_tensor(fmt, e, names)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        yield _d(h, Severity.ERROR, "drafter-tensor-missing",
                 f"{len(missing)} tensor(s) the {fmt.name} loader needs are missing: {shown}", f"tensor {missing[0]}")
    for name in sorted(names):
        if name in _EXTRA_TENSORS or fmt.source_name(name) is not None or family.claims_tensor(fmt, name):
            continue
        if fmt.loads_weight_scales and _weight_scale(name, names):
            continue
        other = next((f.name for f in FORMATS.values() if f is not fmt and f.source_name(name)), None)
        hint = f" ({other} format's name: converted for another runtime?)" if other else ""
        sev = Severity.WARNING if fmt.ignores_unknown_tensors else Severity.ERROR
        yield _d(h, sev, "drafter-tensor-unclaimed",
                 f"tensor {show(name)} is not part of a {fmt.name} drafter{hint}; llama.cpp-family loaders "
                 f"fail with 'wrong number of tensors'", f"tensor {show(name)}")


def _weight_scale(name: str, names: set[str]) -> bool:
    """A pre-quantized weight's scale the loader reads (``names.SCALED_LAYER_WEIGHTS``)."""
    if name == FC_SCALE:
        return True
    suffix = next((s for s in WEIGHT_SCALES if name.endswith(s)), None)
    m = BLK_RE.match(name) if suffix else None
    if m is None:
        return False
    base = m.group(2).removesuffix(suffix)
    return base in SCALED_LAYER_WEIGHTS and f"blk.{m.group(1)}.{base}.weight" in names


def _drafter_shapes(h: GGUFHeader, fmt, meta, a: str) -> Iterator[Finding]:
    fc = h.tensors_by_name.get(fmt.fc_name)
    taps = meta.taps
    hidden = as_int(h.get(f"{h.arch}.embedding_length"))
    if fc is not None and len(fc.shape_ne) == 2:
        width, rows = fc.shape_ne
        if hidden is not None and rows != hidden:
            yield _d(h, Severity.ERROR, "drafter-fc-shape",
                     f"{fmt.fc_name} has ne {list(fc.shape_ne)}; its output must be {a}.embedding_length = {hidden}",
                     f"tensor {fmt.fc_name}")
        if not taps:
            yield _d(h, Severity.ERROR, "drafter-taps", "the target-layer list is empty", "")
        elif width % len(taps):
            yield _d(h, Severity.ERROR, "drafter-fc-width",
                     f"{fmt.fc_name} input width {width:,} is not a multiple of the {len(taps)} taps "
                     f"(it must be n_taps x target hidden size)", f"tensor {fmt.fc_name}")
        key = f"{h.arch}.dflash.n_target_features"
        v = as_int(h.get(key))
        if v is not None and v != width:
            yield _d(h, Severity.ERROR, "drafter-fc-width",
                     f"{show(key)} = {v:,} but {fmt.fc_name} is {width:,} wide: the loader builds a wrong-size fc",
                     f"key {show(key)}")
    n_tl = as_int(h.get(f"{h.arch}.dflash.n_target_layers"))
    if n_tl is not None and taps and n_tl != len(taps):
        why = (" (that looks like the target's depth: config.json's num_target_layers is not the tap count)"
               if n_tl > len(taps) else "")
        yield _d(h, Severity.ERROR, "drafter-tap-count",
                 f"{a}.dflash.n_target_layers = {n_tl} but there are {len(taps)} target layers{why}; Lucebox "
                 f"prefers this key and sizes fc from it", f"key {a}.dflash.n_target_layers")
    stored = [i + fmt.tap_offset for i in taps]
    if any(i < 0 for i in stored):
        yield _d(h, Severity.ERROR, "drafter-taps", f"negative target layer in {stored} (stored values)", "")
    elif fmt.tap_offset and 0 in stored:
        yield _d(h, Severity.ERROR, "drafter-taps-offset",
                 f"target layers {stored} contain 0: {fmt.name} stores z-lab id + 1 (the input of that layer), so 0 "
                 f"would tap the embeddings; the ids were written without the +1", "")
    if list(taps) != sorted(set(taps)):
        yield _d(h, Severity.WARNING, "drafter-taps", f"target layers {stored} are not strictly increasing", "")
    mask = meta.mask_token_id
    tokens = h.get("tokenizer.ggml.tokens")
    if isinstance(tokens, StringArray) and mask is not None and not 0 <= mask < len(tokens):
        yield _d(h, Severity.ERROR, "drafter-mask-token",
                 f"mask token id {mask:,} is outside the {len(tokens):,}-token vocabulary", "")


def _drafter_swa(h: GGUFHeader, a: str) -> Iterator[Finding]:
    pk, wk = f"{h.arch}.attention.sliding_window_pattern", f"{h.arch}.attention.sliding_window"
    pat, window, n = h.kv.get(pk), as_int(h.get(wk)), as_int(h.get(f"{h.arch}.block_count"))
    if pat is not None:
        if pat.type != T.ARRAY or pat.sub_type != T.BOOL:
            yield _d(h, Severity.ERROR, "drafter-swa-pattern",
                     f"{a}.attention.sliding_window_pattern is {type_name(pat.type, pat.sub_type)}; runtimes read "
                     f"ARRAY[BOOL] only (Lucebox ignores it otherwise: full attention on SWA layers)", f"key {show(pk)}")
        elif n is not None and len(pat.value) != n:
            yield _d(h, Severity.ERROR, "drafter-swa-pattern",
                     f"{a}.attention.sliding_window_pattern has {len(pat.value)} entries for {n} layers",
                     f"key {show(pk)}")
        elif any(pat.value) and not window:
            yield _d(h, Severity.WARNING, "drafter-swa-pattern",
                     f"SWA layers in the pattern but no {a}.attention.sliding_window: they run full attention",
                     f"key {show(wk)}")
    elif window:
        yield _d(h, Severity.WARNING, "drafter-swa-pattern",
                 f"{a}.attention.sliding_window = {window} without a per-layer pattern: ik_llama makes every "
                 f"layer SWA (wrong when the last layer is full attention, as in Qwen3.6 drafters)", f"key {show(wk)}")

