"""DSpark checks: would mainline llama.cpp load this DSpark drafter, and read its heads right?

What the runtime requires (``src/models/dflash.cpp``, ``common/speculative.cpp``):
``markov_w1.weight`` {rank, n_vocab} and, with it, ``markov_w2.weight`` {rank, n_vocab_draft};
``conf_proj.weight`` {n_embd + rank, 1} and ``conf_proj.bias`` {1}, read only next to
``markov_w1``; ``d2t`` I64 {n_vocab_draft}, which also sizes ``output.weight``; per-layer
``attn_sinks.weight`` {n_head}; ``rope_freqs.weight`` {head_dim / 2}; the BOOL keys
``dflash.sample_from_anchor`` (absent: true) and ``dflash.has_confidence_head``. Header only,
except ``check_d2t_data``, which ``--deep`` runs on the one small tensor whose values matter.
Every finding has category ``drafter`` (``data`` for the d2t values).
"""
from __future__ import annotations

from typing import BinaryIO, Iterator

from ..fileio.gguf_constants import GGMLQuantizationType as Q
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_header import GGUFHeader, show
from ..fileio.string_array import StringArray
from ..fileio.types import TensorInfo, type_name
from ..formats.dspark import (CONF_PROJ, CONF_PROJ_BIAS, DSPARK_HPARAMS, MARKOV_W1, MARKOV_W2, MARKOV_W2_SCALE,
                              SAMPLE_FROM_ANCHOR, is_dspark)
from ..formats.legacy_dspark import is_legacy_dspark, migrate_command
from ..formats.names import D2T, OUTPUT, ROPE_FREQS
from .drafter_checks import DrafterView, drafter_view
from .findings import Finding, Severity, as_int, finding

_ACTS = ("silu", "gelu", "gelu_pytorch_tanh")  # what the dflash loader accepts


def _d(h: GGUFHeader, sev: Severity, code: str, msg: str, where: str = "") -> Finding:
    return finding(h, sev, code, msg, where, "drafter")


def _ne(h: GGUFHeader, name: str) -> list[int] | None:
    t = h.tensors_by_name.get(name)
    return None if t is None else list(t.shape_ne)


def _same(ne: list[int], want: list[int]) -> bool:
    """ggml's shape test: trailing dimensions of 1 do not count (llama-quantize drops them)."""
    def core(x: list[int]) -> list[int]:
        x = list(x)
        while len(x) > 1 and x[-1] == 1:
            x.pop()
        return x
    return core(ne) == core(want)


def _vocab(h: GGUFHeader) -> int | None:
    tokens = h.get("tokenizer.ggml.tokens")
    return len(tokens) if isinstance(tokens, StringArray) else None


def check_dspark(h: GGUFHeader, view: DrafterView | None = None) -> Iterator[Finding]:
    """``view``: ``drafter_view(h)``, which run_checks computes once for all the checks that read it."""
    view = view or drafter_view(h)
    fmt = view.fmt
    if fmt is None:
        return
    if not is_dspark(h.kv, list(h.tensors_by_name), h.arch or ""):
        if fmt.supports_dspark:
            yield from _sinks(h)  # MiMo-style DFlash drafters carry sinks too
        return
    if not fmt.supports_dspark:
        yield _d(h, Severity.ERROR, "dspark-format",
                 f"a DSpark drafter (Markov head / d2t) in {fmt.name} format: only mainline llama.cpp loads DSpark; "
                 "re-convert with --format llama.cpp")
        return
    yield from _keys(h, view.family is not None and view.family.anchor_default_is_right)
    n_vocab, n_embd = _vocab(h), as_int(h.get(f"{h.arch}.embedding_length"))
    d2t = h.tensors_by_name.get(D2T)
    n_draft = n_vocab
    if d2t is not None:
        yield from _d2t_header(h, d2t, n_vocab)
        n_draft = d2t.shape_ne[0] if len(d2t.shape_ne) == 1 else None
    yield from _markov(h, n_vocab, n_draft, n_embd)
    yield from _output(h, d2t, n_draft, n_embd)
    yield from _sinks(h)
    yield from _gemma4(h)


def check_legacy_dspark(h: GGUFHeader) -> Iterator[Finding]:
    """A legacy DSpark GGUF (the fork's ``dspark`` architecture): no mainline build knows the
    architecture, so it is one error that names the migration, not "not a drafter"."""
    if is_legacy_dspark(h.arch):
        yield _d(h, Severity.ERROR, "legacy-dspark",
                 "legacy DSpark GGUF (fork format: architecture 'dspark', dspark.dspark.* keys, no vocabulary): "
                 f"mainline llama.cpp cannot load it; migrate: {migrate_command(show(h.path.name))} "
                 "[--drop-shared-tensors]", "key general.architecture")


def _keys(h: GGUFHeader, anchor_default_ok: bool = False) -> Iterator[Finding]:
    for suffix in DSPARK_HPARAMS:
        key = f"{h.arch}.{suffix}"
        kv = h.kv.get(key)
        if kv is not None and kv.type != T.BOOL:
            yield _d(h, Severity.ERROR, "dspark-key-type",
                     f"{show(key)} is {type_name(kv.type, kv.sub_type)}; the runtime compares its text with \"true\", "
                     "so only a BOOL reads as intended: re-convert", f"key {show(key)}")
    if f"{h.arch}.{SAMPLE_FROM_ANCHOR}" not in h.kv and not anchor_default_ok:
        yield _d(h, Severity.WARNING, "dspark-key-missing",
                 f"{h.arch}.{SAMPLE_FROM_ANCHOR} is missing: the runtime samples the anchor slot (true); wrong for "
                 "EAGLE3-style exports, whose slot 0 is a bonus anchor. Re-convert to write it",
                 f"key {h.arch}.{SAMPLE_FROM_ANCHOR}")
    conf = h.kv.get(f"{h.arch}.has_confidence_head")
    if conf is not None and conf.type == T.BOOL and conf.value != (CONF_PROJ in h.tensors_by_name):
        has = "has" if CONF_PROJ in h.tensors_by_name else "has no"
        yield _d(h, Severity.ERROR, "dspark-confidence",
                 f"{h.arch}.has_confidence_head = {str(conf.value).lower()} but the file {has} {CONF_PROJ}: "
                 "--spec-draft-p-min trusts the key; re-convert", f"key {h.arch}.has_confidence_head")


def _d2t_header(h: GGUFHeader, t: TensorInfo, n_vocab: int | None) -> Iterator[Finding]:
    where = f"tensor {D2T}"
    if t.ggml_type != Q.I64:
        yield _d(h, Severity.ERROR, "dspark-d2t",
                 f"{D2T} is {t.ggml_type.name}; the runtime asserts I64 (absolute target ids): re-convert", where)
    if len(t.shape_ne) != 1:
        yield _d(h, Severity.ERROR, "dspark-d2t", f"{D2T} has ne {list(t.shape_ne)}; it is one id per draft token "
                 "(1-D)", where)
    elif n_vocab is not None and t.shape_ne[0] > n_vocab:
        yield _d(h, Severity.ERROR, "dspark-d2t",
                 f"{D2T} maps {t.shape_ne[0]:,} draft ids into a {n_vocab:,}-token vocabulary: ids must be unique, so "
                 "the draft vocabulary cannot be larger", where)


def _markov(h: GGUFHeader, n_vocab: int | None, n_draft: int | None, n_embd: int | None) -> Iterator[Finding]:
    w1, w2, conf, bias = (_ne(h, n) for n in (MARKOV_W1, MARKOV_W2, CONF_PROJ, CONF_PROJ_BIAS))
    if w1 is None:
        for name, ne in ((MARKOV_W2, w2), (MARKOV_W2_SCALE, _ne(h, MARKOV_W2_SCALE)), (CONF_PROJ, conf),
                         (CONF_PROJ_BIAS, bias)):
            if ne is not None:
                yield _d(h, Severity.ERROR, "dspark-markov",
                         f"{name} without {MARKOV_W1}: the runtime reads the DSpark heads only next to markov_w1, "
                         "so the load fails ('wrong number of tensors'); re-convert the complete head",
                         f"tensor {name}")
        return
    rank = w1[0]
    if len(w1) != 2 or (n_vocab is not None and w1[1] != n_vocab):
        yield _d(h, Severity.ERROR, "dspark-markov",
                 f"{MARKOV_W1} has ne {w1}; the runtime needs {{rank, n_vocab}} = {{{rank}, {n_vocab}}} (it is indexed "
                 "by the previous target token)", f"tensor {MARKOV_W1}")
    if w2 is None:
        yield _d(h, Severity.ERROR, "dspark-markov",
                 f"{MARKOV_W1} without {MARKOV_W2}: the runtime requires both; re-convert the complete Markov head",
                 f"tensor {MARKOV_W2}")
    elif n_draft is not None and not _same(w2, [rank, n_draft]):
        yield _d(h, Severity.ERROR, "dspark-markov",
                 f"{MARKOV_W2} has ne {w2}; the runtime needs {{rank, n_vocab_draft}} = {{{rank}, {n_draft}}}",
                 f"tensor {MARKOV_W2}")
    if conf is not None and n_embd is not None and not _same(conf, [n_embd + rank, 1]):
        hint = " (a head without the Markov features: the runtime cannot use it)" if conf[:1] == [n_embd] else ""
        yield _d(h, Severity.ERROR, "dspark-confidence",
                 f"{CONF_PROJ} has ne {conf}; the runtime needs {{n_embd + rank, 1}} = {{{n_embd + rank}, 1}}{hint}",
                 f"tensor {CONF_PROJ}")
    if bias is not None and not _same(bias, [1]):
        yield _d(h, Severity.ERROR, "dspark-confidence", f"{CONF_PROJ_BIAS} has ne {bias}; the runtime needs {{1}}",
                 f"tensor {CONF_PROJ_BIAS}")


def _output(h: GGUFHeader, d2t: TensorInfo | None, n_draft: int | None, n_embd: int | None) -> Iterator[Finding]:
    out = _ne(h, OUTPUT)
    if d2t is not None and out is None:
        yield _d(h, Severity.ERROR, "dspark-output",
                 f"a reduced vocabulary ({D2T}) without {OUTPUT}: the target's head covers the full vocabulary, "
                 "not the draft ids d2t maps; re-convert with the drafter's lm_head", f"tensor {OUTPUT}")
    elif out is not None and n_draft is not None and n_embd is not None and not _same(out, [n_embd, n_draft]):
        yield _d(h, Severity.ERROR, "dspark-output",
                 f"{OUTPUT} has ne {out}; the runtime needs {{n_embd, n_vocab_draft}} = {{{n_embd}, {n_draft}}}",
                 f"tensor {OUTPUT}")


def _sinks(h: GGUFHeader) -> Iterator[Finding]:
    n_head = as_int(h.get(f"{h.arch}.attention.head_count"))
    for t in h.tensors:
        if t.name.endswith(".attn_sinks.weight") and n_head is not None and not _same(list(t.shape_ne), [n_head]):
            yield _d(h, Severity.ERROR, "drafter-sinks",
                     f"{show(t.name)} has ne {list(t.shape_ne)}; the runtime needs one sink logit per head "
                     f"{{{n_head}}}", f"tensor {show(t.name)}")


def _gemma4(h: GGUFHeader) -> Iterator[Finding]:
    key = f"{h.arch}.hidden_activation"
    act = h.get(key)
    if act is not None and act not in _ACTS:
        yield _d(h, Severity.ERROR, "dspark-activation",
                 f"{show(key)} = {show(str(act))}: the runtime throws 'unsupported DFlash hidden activation' "
                 f"(it knows {', '.join(_ACTS)})", f"key {show(key)}")
    freqs = _ne(h, ROPE_FREQS)
    hd = as_int(h.get(f"{h.arch}.attention.key_length"))
    if freqs is not None and hd is not None and not _same(freqs, [hd // 2]):
        yield _d(h, Severity.ERROR, "dspark-rope-freqs",
                 f"{ROPE_FREQS} has ne {freqs}; the runtime needs {{key_length / 2}} = {{{hd // 2}}}",
                 f"tensor {ROPE_FREQS}")


def check_d2t_data(h: GGUFHeader, f: BinaryIO, t: TensorInfo) -> list[Finding]:
    """``--deep`` on ``d2t``: every id inside the vocabulary, no id twice (what the converter
    validates; a hand-made or corrupted table maps drafts to the wrong tokens silently)."""
    n_vocab = _vocab(h)
    if t.ggml_type != Q.I64 or len(t.shape_ne) != 1 or n_vocab is None:
        return []  # the header check already says what is wrong with its type or shape
    import numpy as np  # here: only --deep reads d2t's data; the header checks stay numpy-free

    f.seek(t.offset_abs)
    ids = np.frombuffer(f.read(t.nbytes), "<i8")
    where = f"tensor {D2T}"
    out = []
    bad = np.flatnonzero((ids < 0) | (ids >= n_vocab))
    if bad.size:
        out.append(finding(h, Severity.ERROR, "dspark-d2t-range",
                           f"{D2T}[{bad[0]}] = {ids[bad[0]]} is outside the {n_vocab:,}-token vocabulary ({bad.size:,} "
                           "such ids): drafts map to invalid tokens; re-convert (d2t holds absolute target ids)",
                           where, "data"))
    values, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        out.append(finding(h, Severity.ERROR, "dspark-d2t-duplicate",
                           f"{D2T} maps {int((counts > 1).sum()):,} target id(s) from more than one draft id (first: "
                           f"{values[counts > 1][0]}); the table is corrupt: re-convert", where, "data"))
    return out
