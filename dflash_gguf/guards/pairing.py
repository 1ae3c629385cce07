"""``check --target``: does the drafter fit the target it will run with (roles, vocabulary,
fc width, tap layers, RoPE)? Every finding here has category ``pairing`` (exit 13).
"""
from __future__ import annotations

import re
from typing import Iterator

from ..config import build_target_layer_ids
from ..fileio.gguf_header import GGUFHeader, show
from ..fileio.string_array import StringArray
from ..formats.legacy_dspark import is_legacy_dspark
from ..formats.meta import ROPE_SECTIONS
from .drafter_checks import DrafterView, drafter_view
from .findings import Finding, Severity, as_int, finding
from .instruct import Verdict, classify

DRAFTER_ARCH_RE = re.compile(r"^(dflash|dflash-draft|.+-dflash-draft|eagle3?)$")


def pair_roles(d: GGUFHeader, t: GGUFHeader) -> Iterator[Finding]:
    # a legacy DSpark file is a drafter: legacy-dspark already says what it is and how to migrate it
    if not (d.arch and DRAFTER_ARCH_RE.match(d.arch)) and not is_legacy_dspark(d.arch):
        yield finding(d, Severity.WARNING, "pair-not-drafter",
                      f"general.architecture = {show(d.arch or '')!r} is not a DFlash drafter; --target expects FILE to be the drafter",
                      "key general.architecture", "pairing")
    if t.arch and DRAFTER_ARCH_RE.match(t.arch):
        yield finding(t, Severity.ERROR, "pair-target-is-drafter",
                      f"the target is itself a drafter (arch {show(t.arch)!r}); pass the model the drafter was trained for",
                      "key general.architecture", "pairing")
    v = classify(t)
    if v.verdict == Verdict.BASE:
        yield finding(t, Severity.ERROR, "pair-target-base",
                      f"the target looks like a base model ({v.reason}); DFlash drafters are trained on the instruct "
                      f"model and acceptance collapses on its base: use the -Instruct / -it release",
                      "", "pairing")
    elif v.verdict == Verdict.UNKNOWN:
        yield finding(t, Severity.WARNING, "pair-target-unknown",
                      f"cannot tell whether the target is instruct ({v.reason}); run check-instruct on it",
                      "", "pairing")


def pair_vocab(d: GGUFHeader, t: GGUFHeader) -> Iterator[Finding]:
    dt, tt = d.get("tokenizer.ggml.tokens"), t.get("tokenizer.ggml.tokens")
    if not isinstance(tt, StringArray):
        yield finding(t, Severity.WARNING, "pair-target-no-vocab", "the target has no vocabulary to compare with",
                      "key tokenizer.ggml.tokens", "pairing")
        return
    if isinstance(dt, StringArray) and not dt.same_as(tt):
        if len(dt) != len(tt):
            detail = f"{len(dt):,} tokens vs {len(tt):,} in the target"
        else:
            i = next(i for i in range(len(dt)) if dt[i] != tt[i])
            detail = f"first difference at token {i:,}: '{show(dt[i], 40)}' vs '{show(tt[i], 40)}'"
        yield finding(d, Severity.ERROR, "pair-vocab-mismatch",
                      f"the drafter's vocabulary differs from the target's ({detail}): re-convert the drafter with "
                      f"this target's tokenizer", "key tokenizer.ggml.tokens", "pairing")
    for key in [k for k in d.kv_order if k.endswith("mask_token_id") and k.isprintable()]:
        v = d.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v < len(tt):
            yield finding(d, Severity.ERROR, "pair-mask-token",
                          f"{key} = {v:,} is not a token of the target ({len(tt):,} tokens): the drafter was made "
                          f"for another model family", f"key {key}", "pairing")


# Target architectures whose mainline graph also exposes the last layer's output as "layer
# n_layer's input" (src/models/{deepseek4,mimo2,nemotron-h}.cpp set t_layer_inp[n_layer]).
_CAPTURES_LAST_LAYER = frozenset({"deepseek4", "mimo2", "nemotron_h", "nemotron_h_moe"})


def pair_drafter(d: GGUFHeader, t: GGUFHeader, view: DrafterView | None = None) -> Iterator[Finding]:
    """``view``: ``drafter_view(d)``, which run_checks computes once for all the checks that read it."""
    view = view or drafter_view(d)
    fmt, meta = view.fmt, view.meta
    if fmt is None or meta is None:
        return
    ta = t.arch or ""
    depth, hidden = as_int(t.get(f"{ta}.block_count")), as_int(t.get(f"{ta}.embedding_length"))
    fc = d.tensors_by_name.get(fmt.fc_name)
    taps = list(meta.taps)
    stored = [i + fmt.tap_offset for i in taps]
    p = lambda sev, code, msg, where="": finding(d, sev, code, msg, where, "pairing")  # noqa: E731
    if fc is not None and len(fc.shape_ne) == 2 and hidden and taps and fc.shape_ne[0] != len(taps) * hidden:
        yield p(Severity.ERROR, "pair-fc-width",
                f"{fmt.fc_name} takes {fc.shape_ne[0]:,} features = {len(taps)} taps x "
                f"{fc.shape_ne[0] / len(taps):g}, but the target's hidden size is {hidden:,}: a drafter for "
                f"another target size", f"tensor {fmt.fc_name}")
    if depth and taps:
        if max(taps) > depth - 1:
            yield p(Severity.ERROR, "pair-taps-depth",
                    f"target layers {stored} (stored; z-lab ids {taps}) reach past the target's {depth} layers",
                    "")
        elif fmt.name == "llama.cpp" and max(taps) == depth - 1 and ta not in _CAPTURES_LAST_LAYER:
            # mainline captures the *input* of layer i + 1, and the last layer's output is the input
            # of no layer: llama-server aborts on the first request ("layer input tensor is null").
            yield p(Severity.ERROR, "pair-taps-last-layer",
                    f"target layer {max(stored)} (stored; z-lab id {max(taps)}) is the output of the target's "
                    f"last layer, which llama.cpp cannot capture (it reads layer inputs): it aborts on the first "
                    f"request; the drafter needs taps below the target's last layer", "")
        else:
            ref = list(build_target_layer_ids(depth, len(taps)))
            for shift in (1, -1):
                if taps == [i + shift for i in ref]:
                    yield p(Severity.WARNING, "pair-taps-offset",
                            f"target layers {stored} are z-lab's standard taps {ref} for a {depth}-layer target "
                            f"shifted by {shift:+d}: a {fmt.name} file stores them "
                            f"{'unchanged' if not fmt.tap_offset else '+1'}; converted for another runtime's "
                            f"convention? (silent low acceptance)", "")
    vs = as_int(d.get(f"{d.arch}.vocab_size"))
    tt = t.get("tokenizer.ggml.tokens")
    if vs is not None and isinstance(tt, StringArray) and vs != len(tt):
        yield p(Severity.ERROR, "pair-vocab-size",
                f"{show(d.arch or '')}.vocab_size = {vs:,} but the target has {len(tt):,} tokens", "")
    if f"{ta}.{ROPE_SECTIONS}" in t.kv and f"{d.arch}.{ROPE_SECTIONS}" not in d.kv:
        # mainline then ropes the drafter as plain NeoX instead of on the target's temporal M-RoPE positions
        yield p(Severity.ERROR if fmt.name == "llama.cpp" else Severity.WARNING, "pair-mrope-stale",
                f"the target uses M-RoPE ({ta}.{ROPE_SECTIONS}) but the drafter has no "
                f"{show(d.arch or '')}.{ROPE_SECTIONS}: a stale conversion (acceptance collapses once images are in "
                f"the prompt); fix: dflash-gguf retarget FILE --target-gguf TARGET -o NEW.gguf "
                f"(or re-convert with --target-dir/--target-gguf)", f"key {show(d.arch or '')}.{ROPE_SECTIONS}")
    dr, tr = d.get(f"{d.arch}.rope.freq_base"), t.get(f"{ta}.rope.freq_base")
    if isinstance(dr, float) and isinstance(tr, float) and dr != tr:
        yield p(Severity.WARNING, "pair-rope-theta",
                f"drafter RoPE base {dr:g} differs from the target's {tr:g}: z-lab drafters use their target's "
                f"(a converter that read only top-level rope_theta? check the drafter's config.json)", "")
