"""Integrity checks over a GGUF (or a set of shards), as a list of findings.

``read_header`` already refuses anything that cannot be trusted (truncated, overlapping,
out-of-bounds: ``GGUFFormatError``, exit 6). The checks here run on a header that parsed
and report what would still make a runtime refuse or misread the file. They are plain
functions in three lists, so the drafter-format and pairing checks plug in by appending:

    FILE_CHECKS   (header)          -> findings   one physical file (offsets, layout)
    MODEL_CHECKS  (model)           -> findings   the logical model: shard 1's keys + all tensors
    PAIR_CHECKS   (drafter, target) -> findings   with --target

``--deep`` then streams the tensor data (``deep_scan``) for NaN/inf, all-zero tensors and
quantized blocks whose scales are inf/NaN (what llama.cpp's ggml_validate_row_data rejects).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q, GGUFValueType as T

from ..errors import GGUFFormatError, OutputError, TargetError
from ..fileio.gguf_header import GGUFHeader, StringArray, TensorInfo, TruncatedError, read_header, show
from .instruct import Verdict, classify


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str          # stable id, documented in docs/check.md
    message: str       # one line: what, and how to fix
    where: str = ""    # "tensor blk.0.attn_q.weight", "key general.alignment", "byte 1,234"
    file: str = ""
    category: str = "integrity"  # integrity | drafter | pairing | data


@dataclass(frozen=True)
class CheckReport:
    path: Path
    findings: tuple[Finding, ...]
    shards: tuple[Path, ...]
    target: Path | None
    deep: bool
    n_tensors: int
    total_bytes: int
    bytes_scanned: int

    def count(self, severity: Severity) -> int:
        return sum(f.severity == severity for f in self.findings)

    def has_errors(self, *categories: str) -> bool:
        return any(f.severity == Severity.ERROR and (not categories or f.category in categories)
                   for f in self.findings)


HeaderCheck = Callable[[GGUFHeader], Iterable[Finding]]
PairCheck = Callable[[GGUFHeader, GGUFHeader], Iterable[Finding]]
FILE_CHECKS: list[HeaderCheck] = []
MODEL_CHECKS: list[HeaderCheck] = []
PAIR_CHECKS: list[PairCheck] = []


def file_check(fn: HeaderCheck) -> HeaderCheck:
    FILE_CHECKS.append(fn)
    return fn


def model_check(fn: HeaderCheck) -> HeaderCheck:
    MODEL_CHECKS.append(fn)
    return fn


def pair_check(fn: PairCheck) -> PairCheck:
    PAIR_CHECKS.append(fn)
    return fn


def _f(h: GGUFHeader, sev: Severity, code: str, msg: str, where: str = "", category: str = "integrity") -> Finding:
    return Finding(sev, code, msg, where, str(h.path), category)


def _int(v) -> int | None:
    """An integer metadata value, or None (a hostile file may put any type under any key)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# --- shards ------------------------------------------------------------------------------

SHARD_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class ShardSetError(GGUFFormatError):
    """A sharded model is incomplete (a shard missing) or its split keys disagree."""


@dataclass(frozen=True)
class ShardSet:
    paths: tuple[Path, ...]           # expected shards, in order (just the file when unsharded)
    headers: tuple[GGUFHeader, ...]   # the shards that exist
    findings: tuple[Finding, ...]

    @property
    def model(self) -> GGUFHeader:
        """Shard 1's keys with every shard's tensors (offsets are per file: layout checks
        must use ``headers``)."""
        first = self.headers[0]
        if len(self.headers) == 1:
            return first
        return dataclasses.replace(first, tensors=tuple(t for h in self.headers for t in h.tensors))


def check_shards(path: str | Path) -> ShardSet:
    """Read every shard's header and check the split keys llama.cpp uses to reassemble them.

    An unsharded file gives a one-file set. Raises ``GGUFFormatError`` when a present shard's
    header is corrupt; missing shards and inconsistent keys are findings.
    """
    path = Path(path)
    m = SHARD_RE.match(path.name)
    if not m:
        h = read_header(path)
        out = []
        n, no = _int(h.get("split.count")), _int(h.get("split.no"))
        if n is not None and n > 1:
            out.append(_f(h, Severity.ERROR, "split-not-named",
                          f"the file is shard {(no or 0) + 1} of {n} but is not named "
                          f"'<name>-0000N-of-{n:05d}.gguf'; llama.cpp finds the other shards by that "
                          f"name: rename it back", "key split.count"))
        return ShardSet((path,), (h,), tuple(out))
    count = int(m["count"])
    if count < 1 or not 1 <= int(m["no"]) <= count:
        raise ShardSetError(f"{path}: shard name says {int(m['no'])} of {count}; rename the file")
    paths = tuple(path.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))
    if not path.is_file():
        raise OutputError(f"{path}: no such file")
    present = [p for p in paths if p.is_file()]
    missing = [p for p in paths if p not in present]
    if paths[0] in missing:
        raise ShardSetError(f"{paths[0]}: the first shard is missing, and it holds the model's metadata "
                            f"(incomplete download: fetch every shard into the same directory)")
    headers = tuple(read_header(p) for p in present)
    out: list[Finding] = []
    if missing:
        names = ", ".join(p.name for p in missing[:5]) + (" ..." if len(missing) > 5 else "")
        out.append(Finding(Severity.ERROR, "shard-missing",
                           f"{len(missing)} of {count} shards missing: {names} (incomplete download; "
                           f"fetch every shard into the same directory)", "", str(path)))
    declared: set[int] = set()
    split_types = (("split.no", T.UINT16), ("split.count", T.UINT16), ("split.tensors.count", T.INT32))
    for h in headers:
        if any(k not in h.kv for k, _ in split_types):
            out.append(_f(h, Severity.ERROR, "split-keys-missing",
                          "split.no / split.count / split.tensors.count missing: not a llama.cpp shard "
                          "(re-split with llama-gguf-split)", "keys split.*"))
            continue
        wrong = [(k, typ) for k, typ in split_types if h.kv[k].type != typ]
        for key, typ in wrong:
            out.append(_f(h, Severity.ERROR, "key-type",
                          f"{key} is {_typename(h.kv[key].type, h.kv[key].sub_type)}, llama.cpp requires "
                          f"{typ.name}", f"key {key}"))
        if wrong:
            continue
        no, cnt = h.get("split.no"), h.get("split.count")
        want_no = paths.index(h.path)
        if no != want_no or cnt != count:
            out.append(_f(h, Severity.ERROR, "split-keys-mismatch",
                          f"split.no = {no}, split.count = {cnt}, but the name says shard "
                          f"{want_no + 1} of {count} (split.no counts from 0): renamed or mixed-up shards",
                          "keys split.no, split.count"))
        declared.add(h.get("split.tensors.count"))
    total = sum(len(h.tensors) for h in headers)
    if len(declared) > 1:
        out.append(Finding(Severity.ERROR, "split-keys-mismatch",
                           f"shards disagree on split.tensors.count ({sorted(declared)}): shards from "
                           f"different conversions mixed in one directory", "key split.tensors.count", str(path)))
    elif declared and not missing and declared != {total}:
        out.append(Finding(Severity.ERROR, "split-tensor-count",
                           f"split.tensors.count = {declared.pop():,} but the shards hold {total:,} tensors "
                           f"(a shard from another conversion?)", "key split.tensors.count", str(path)))
    seen: dict[str, Path] = {}
    for h in headers:
        for t in h.tensors:
            if t.name in seen:
                out.append(_f(h, Severity.ERROR, "shard-duplicate-tensor",
                              f"tensor {show(t.name)} is also in {seen[t.name].name}", f"tensor {show(t.name)}"))
            seen.setdefault(t.name, h.path)
    return ShardSet(paths, headers, tuple(out))


def load_complete(path: str | Path) -> ShardSet:
    """Headers of a complete model: every shard present and consistent, else ``ShardSetError``
    (exit 6). What check-instruct needs before it may give a verdict."""
    s = check_shards(path)
    errors = [f for f in s.findings if f.severity == Severity.ERROR]
    if errors:
        raise ShardSetError(f"{path}: incomplete sharded model: {errors[0].message}")
    return s


# --- the run -----------------------------------------------------------------------------

def run_checks(path: str | Path, *, target: str | Path | None = None, deep: bool = False,
               progress: Callable[[int], None] | None = None) -> CheckReport:
    """All checks on ``path`` (and its shards); pairing checks against ``target`` if given.

    Raises:
        OutputError: ``path`` does not exist.  TargetError: ``target`` does not exist.
        GGUFFormatError: a header (of the file, a shard, or the target) is corrupt or truncated.
    """
    shards = check_shards(path)
    findings = list(shards.findings)
    for h in shards.headers:
        for chk in FILE_CHECKS:
            findings += chk(h)
    model = shards.model
    for chk in MODEL_CHECKS:
        findings += chk(model)
    tpath = None
    if target is not None:
        tpath = Path(target)
        if not tpath.exists():
            raise TargetError(f"{tpath}: target GGUF not found")
        tset = check_shards(tpath)
        findings += [dataclasses.replace(f, category="pairing") for f in tset.findings]
        for chk in PAIR_CHECKS:
            findings += chk(model, tset.model)
    scanned = 0
    if deep:
        for h in shards.headers:
            f2, n = deep_scan(h, progress)
            findings += f2
            scanned += n
    return CheckReport(Path(path), tuple(findings), tuple(shards.paths), tpath, deep,
                       len(model.tensors), sum(h.file_size for h in shards.headers), scanned)


def planned_scan_bytes(path: str | Path) -> int:
    """Bytes ``--deep`` will read (for a progress bar), from the headers alone."""
    return sum(sum(t.nbytes for t in h.tensors) for h in check_shards(path).headers)


# --- file checks ---------------------------------------------------------------------------

@file_check
def check_layout(h: GGUFHeader) -> Iterator[Finding]:
    # llama.cpp's gguf loader requires tensor i at offset sum(pad(nbytes_j)) for j < i:
    # stored back to back in header order. gguf-py always writes that; a hand-edited or
    # spliced file may not, and then fails with "tensor has offset X, expected Y".
    expected = 0
    for t in h.tensors:
        rel = t.offset_abs - h.data_offset
        if rel != expected:
            yield _f(h, Severity.ERROR, "layout-not-contiguous",
                     f"tensor {show(t.name)} is at data offset {rel:,}, llama.cpp expects {expected:,} (tensors "
                     f"must be stored back to back in header order): re-convert the file", f"tensor {show(t.name)}")
            return
        expected += t.nbytes + (-t.nbytes % h.alignment)


@file_check
def check_trailing(h: GGUFHeader) -> Iterator[Finding]:
    end = h.data_end + (-h.data_end % h.alignment) if h.tensors else h.header_end + (-h.header_end % h.alignment)
    if h.file_size > end:
        yield _f(h, Severity.WARNING, "trailing-bytes",
                 f"{h.file_size - end:,} bytes after the last tensor (file ends at {h.file_size:,}, data at "
                 f"{end:,}): two files concatenated, or an overwritten larger file? re-download",
                 f"byte {end:,}")


@file_check
def check_names(h: GGUFHeader) -> Iterator[Finding]:
    for t in h.tensors:
        if len(t.name.encode()) >= 64:  # GGML_MAX_NAME
            yield _f(h, Severity.ERROR, "tensor-name-too-long",
                     f"tensor name is {len(t.name.encode())} bytes; llama.cpp allows at most 63", f"tensor {show(t.name)}")
        if t.n_elements == 0:
            yield _f(h, Severity.WARNING, "empty-tensor", f"tensor {show(t.name)} has shape {list(t.shape_ne)} (no elements)",
                     f"tensor {show(t.name)}")
    for where in h.non_utf8:
        yield _f(h, Severity.WARNING, "non-utf8", f"{where} is not valid UTF-8 (shown with U+FFFD)", where)
    for f in h.kv.values():
        if f.type == T.ARRAY and f.sub_type == T.ARRAY:
            yield _f(h, Severity.ERROR, "nested-array",
                     f"key {show(f.key)} is an array of arrays; llama.cpp's loader refuses nested arrays",
                     f"key {show(f.key)}")


# --- model checks --------------------------------------------------------------------------

_ID_KEYS = tuple(f"tokenizer.ggml.{k}_token_id" for k in
                 ("bos", "eos", "eot", "eom", "unknown", "padding", "seperator", "cls", "mask"))
# Keys whose type llama.cpp's loader checks strictly ("key has wrong type"); {a} = arch.
KEY_TYPES: dict[str, tuple[tuple[T, T | None], ...]] = {
    **{k: ((T.STRING, None),) for k in ("general.architecture", "general.name", "general.basename",
                                        "general.finetune", "general.size_label", "tokenizer.ggml.model",
                                        "tokenizer.ggml.pre", "tokenizer.chat_template")},
    "general.file_type": ((T.UINT32, None),),
    "general.quantization_version": ((T.UINT32, None),),
    "tokenizer.ggml.tokens": ((T.ARRAY, T.STRING),),
    "tokenizer.ggml.merges": ((T.ARRAY, T.STRING),),
    "tokenizer.ggml.token_type": ((T.ARRAY, T.INT32),),
    "tokenizer.ggml.scores": ((T.ARRAY, T.FLOAT32),),
    **{k: ((T.UINT32, None),) for k in _ID_KEYS},
    "{a}.block_count": ((T.UINT32, None),),
    "{a}.context_length": ((T.UINT32, None),),
    "{a}.embedding_length": ((T.UINT32, None),),
    # per-layer arrays are legal for these (OpenELM, Gemma 3n, hybrid models)
    "{a}.feed_forward_length": ((T.UINT32, None), (T.ARRAY, T.UINT32), (T.ARRAY, T.INT32)),
    "{a}.attention.head_count": ((T.UINT32, None), (T.ARRAY, T.UINT32), (T.ARRAY, T.INT32)),
    "{a}.attention.head_count_kv": ((T.UINT32, None), (T.ARRAY, T.UINT32), (T.ARRAY, T.INT32)),
    "{a}.attention.layer_norm_rms_epsilon": ((T.FLOAT32, None),),
    "{a}.rope.freq_base": ((T.FLOAT32, None),),
}


def _typename(t: T, sub: T | None) -> str:
    return t.name if sub is None else f"ARRAY[{sub.name}]"


@model_check
def check_keys(h: GGUFHeader) -> Iterator[Finding]:
    arch = h.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        yield _f(h, Severity.ERROR, "arch-missing",
                 "general.architecture is missing or not a string; no loader can pick a model class",
                 "key general.architecture")
        arch = None
    for pattern, allowed in KEY_TYPES.items():
        if "{a}" in pattern and arch is None:
            continue
        key = pattern.format(a=arch)
        f = h.kv.get(key)
        if f is not None and (f.type, f.sub_type) not in allowed:
            want = " or ".join(_typename(*a) for a in allowed)
            yield _f(h, Severity.ERROR, "key-type",
                     f"{show(key)} is {_typename(f.type, f.sub_type)}, loaders require {want}: re-convert",
                     f"key {show(key)}")


@model_check
def check_tokenizer(h: GGUFHeader) -> Iterator[Finding]:
    tokens = h.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, StringArray):
        return
    n = len(tokens)
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
        v = h.get(key)
        if isinstance(v, tuple) and len(v) != n:
            yield _f(h, Severity.ERROR, "tokenizer-length",
                     f"{key} has {len(v):,} entries for {n:,} tokens: the vocabulary is inconsistent "
                     f"(re-convert)", f"key {key}")
    for key in _ID_KEYS:
        v = h.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v < n:
            yield _f(h, Severity.WARNING, "token-id-range",
                     f"{key} = {v:,} is outside the {n:,}-token vocabulary (llama.cpp ignores it)", f"key {key}")


_BLK = re.compile(r"^blk\.(\d+)\.")


@model_check
def check_tensors(h: GGUFHeader) -> Iterator[Finding]:
    if not h.tensors:
        yield _f(h, Severity.WARNING, "no-tensors",
                 "the file has no tensors: a vocab-only file, or a conversion that found no weights "
                 "(wrong model path?)")
        return
    n = h.get(f"{h.arch}.block_count") if h.arch else None
    if isinstance(n, int) and not isinstance(n, bool):
        over = sorted({int(m[1]) for t in h.tensors if (m := _BLK.match(t.name)) and int(m[1]) >= n})
        if over:
            yield _f(h, Severity.WARNING, "block-index",
                     f"tensors for block {over[0]}{'+' if len(over) > 1 else ''} but {show(h.arch)}.block_count = "
                     f"{n} (llama.cpp reports 'wrong number of tensors' unless the arch expects extra blocks)",
                     f"key {show(h.arch)}.block_count")


# --- pairing checks (generic: drafter vs its target) -----------------------------------------

DRAFTER_ARCH_RE = re.compile(r"^(dflash|dflash-draft|.+-dflash-draft|eagle3?)$")


@pair_check
def pair_roles(d: GGUFHeader, t: GGUFHeader) -> Iterator[Finding]:
    if not (d.arch and DRAFTER_ARCH_RE.match(d.arch)):
        yield _f(d, Severity.WARNING, "pair-not-drafter",
                 f"general.architecture = {show(d.arch or '')!r} is not a DFlash drafter; --target expects FILE to be the drafter",
                 "key general.architecture", "pairing")
    if t.arch and DRAFTER_ARCH_RE.match(t.arch):
        yield _f(t, Severity.ERROR, "pair-target-is-drafter",
                 f"the target is itself a drafter (arch {show(t.arch)!r}); pass the model the drafter was trained for",
                 "key general.architecture", "pairing")
    v = classify(t)
    if v.verdict == Verdict.BASE:
        yield _f(t, Severity.ERROR, "pair-target-base",
                 f"the target looks like a base model ({v.reason}); DFlash drafters are trained on the instruct "
                 f"model and acceptance collapses on its base: use the -Instruct / -it release",
                 "", "pairing")
    elif v.verdict == Verdict.UNKNOWN:
        yield _f(t, Severity.WARNING, "pair-target-unknown",
                 f"cannot tell whether the target is instruct ({v.reason}); run check-instruct on it",
                 "", "pairing")


@pair_check
def pair_vocab(d: GGUFHeader, t: GGUFHeader) -> Iterator[Finding]:
    dt, tt = d.get("tokenizer.ggml.tokens"), t.get("tokenizer.ggml.tokens")
    if not isinstance(tt, StringArray):
        yield _f(t, Severity.WARNING, "pair-target-no-vocab", "the target has no vocabulary to compare with",
                 "key tokenizer.ggml.tokens", "pairing")
        return
    if isinstance(dt, StringArray) and not dt.same_as(tt):
        if len(dt) != len(tt):
            detail = f"{len(dt):,} tokens vs {len(tt):,} in the target"
        else:
            i = next(i for i in range(len(dt)) if dt[i] != tt[i])
            detail = f"first difference at token {i:,}: {dt[i]!r} vs {tt[i]!r}"
        yield _f(d, Severity.ERROR, "pair-vocab-mismatch",
                 f"the drafter's vocabulary differs from the target's ({detail}): re-convert the drafter with "
                 f"this target's tokenizer", "key tokenizer.ggml.tokens", "pairing")
    for key in [k for k in d.kv_order if k.endswith("mask_token_id") and k.isprintable()]:
        v = d.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v < len(tt):
            yield _f(d, Severity.ERROR, "pair-mask-token",
                     f"{key} = {v:,} is not a token of the target ({len(tt):,} tokens): the drafter was made "
                     f"for another model family", f"key {key}", "pairing")


# --- drafter checks (the formats in dflash_gguf/formats) -----------------------------------

# Keys each runtime's loader needs ({a} = arch), beyond what Format.parse_dflash requires.
# (severity, why), from docs/runtime-formats notes: a missing required key is a load failure
# or a silent fallback to a wrong default.
_HPARAMS_REQUIRED = ("{a}.block_count", "{a}.embedding_length", "{a}.feed_forward_length",
                     "{a}.attention.head_count", "{a}.attention.head_count_kv")
REQUIRED_KEYS: dict[str, tuple[tuple[str, Severity, str], ...]] = {
    "llama.cpp": (
        ("{a}.target_layers", Severity.ERROR, "the loader throws 'DFlash model requires target_layers'"),
        ("{a}.attention.layer_norm_rms_epsilon", Severity.ERROR, "the loader requires it"),
        ("tokenizer.ggml.mask_token_id", Severity.ERROR, "the runtime takes the mask token from the vocab"),
        ("{a}.rope.freq_base", Severity.WARNING, "llama.cpp falls back to 10,000: wrong RoPE, low acceptance"),
        ("{a}.block_size", Severity.INFO, "the runtime assumes 16"),
    ),
    "llama.cpp-pr22105": (
        ("{a}.target_layer_ids", Severity.ERROR, "the PR-branch loader requires it"),
        ("{a}.mask_token_id", Severity.ERROR, "the PR-branch runtime reads the mask token here"),
        ("{a}.attention.layer_norm_rms_epsilon", Severity.ERROR, "the loader requires it"),
        ("{a}.rope.freq_base", Severity.WARNING, "falls back to 10,000: wrong RoPE, low acceptance"),
    ),
    "dflash-draft": (
        ("{a}.dflash.target_layer_ids", Severity.ERROR, "the fork loaders require it"),
        ("{a}.dflash.n_target_features", Severity.ERROR, "the fork loaders size dflash_fc from it"),
        ("{a}.dflash.mask_token_id", Severity.ERROR, "ik_llama requires it; beellama's default 248070 is "
                                                    "only right for Qwen3.5/3.6"),
        ("{a}.attention.layer_norm_rms_epsilon", Severity.ERROR, "the loaders require it"),
        ("{a}.rope.freq_base", Severity.WARNING, "falls back to 10,000: wrong RoPE, low acceptance"),
    ),
    "lucebox": (
        ("{a}.attention.key_length", Severity.ERROR, "Lucebox uses it as head_dim"),
        ("{a}.dflash.target_layer_ids", Severity.ERROR, "Lucebox captures these target layers"),
        ("{a}.rope.freq_base", Severity.WARNING, "Lucebox warns 'draft RoPE will be wrong'"),
    ),
}
_OPTIONAL_TENSORS = {"token_embd.weight", "output.weight", "rope_freqs.weight", "d2t", "t2d"}
_PER_LAYER = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
              "ffn_gate", "ffn_up", "ffn_down")


def drafter_format(h: GGUFHeader):
    """(Format, DrafterMeta | None, problem | None) for a drafter file; None if not a drafter."""
    from ..formats import detect_format, meta_from_gguf

    fmt = detect_format(h.arch or "", h.kv, [t.name for t in h.tensors])
    if fmt is None:
        return None
    try:
        _, meta = meta_from_gguf(h.kv, {t.name: t.shape for t in h.tensors}, h.path)
    except GGUFFormatError as exc:
        return fmt, None, str(exc).removeprefix(f"{h.path}: ")
    except (TypeError, ValueError, OverflowError) as exc:  # a key of the wrong type in a hostile file
        return fmt, None, f"DFlash keys of unexpected types ({type(exc).__name__}: {exc})"
    return fmt, meta, None


def _d(h: GGUFHeader, sev: Severity, code: str, msg: str, where: str = "") -> Finding:
    return _f(h, sev, code, msg, where, "drafter")


@model_check
def check_drafter(h: GGUFHeader) -> Iterator[Finding]:
    got = drafter_format(h)
    if got is None:
        return
    fmt, meta, problem = got
    a = show(h.arch or "")
    for key, sev, why in REQUIRED_KEYS.get(fmt.name, ()):
        k = key.format(a=h.arch)
        if k not in h.kv:
            yield _d(h, sev, "drafter-key-missing", f"{show(k)} is missing ({fmt.name} format): {why}", f"key {show(k)}")
    for key in _HPARAMS_REQUIRED:
        k = key.format(a=h.arch)
        if k not in h.kv:
            yield _d(h, Severity.ERROR, "drafter-key-missing", f"{show(k)} is missing: loaders read it", f"key {show(k)}")
    if fmt.needs_tokenizer and not isinstance(h.get("tokenizer.ggml.tokens"), StringArray):
        yield _d(h, Severity.ERROR, "drafter-no-tokenizer",
                 f"no tokenizer: the {fmt.name} runtimes need the target's vocabulary in the drafter GGUF "
                 f"(re-convert with --target-gguf or --target-dir)", "key tokenizer.ggml.tokens")
    if problem:
        yield _d(h, Severity.ERROR, "drafter-format", f"not a loadable {fmt.name} drafter: {problem}")
    yield from _drafter_tensors(h, fmt)
    if meta is not None:
        yield from _drafter_shapes(h, fmt, meta, a)
    yield from _drafter_swa(h, a)


def _drafter_tensors(h: GGUFHeader, fmt) -> Iterator[Finding]:
    from ..formats import FORMATS

    n = _int(h.get(f"{h.arch}.block_count"))
    names = set(h.tensors_by_name)
    expected = [fmt.fc_name, fmt.hidden_norm_name, "output_norm.weight"]
    for i in range(min(n or 0, 256)):
        expected += [f"blk.{i}.{t}.weight" for t in _PER_LAYER] + [f"blk.{i}.{fmt.pre_ffn_norm}"]
    missing = [e for e in expected if e not in names]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        yield _d(h, Severity.ERROR, "drafter-tensor-missing",
                 f"{len(missing)} tensor(s) the {fmt.name} loader needs are missing: {shown}", f"tensor {missing[0]}")
    for name in sorted(names):
        if name in _OPTIONAL_TENSORS or fmt.source_name(name) is not None:
            continue
        other = next((f.name for f in FORMATS.values() if f is not fmt and f.source_name(name)), None)
        hint = f" ({other} format's name: converted for another runtime?)" if other else ""
        sev = Severity.WARNING if fmt.name == "lucebox" else Severity.ERROR  # Lucebox skips unknown names
        yield _d(h, sev, "drafter-tensor-unclaimed",
                 f"tensor {show(name)} is not part of a {fmt.name} drafter{hint}; llama.cpp-family loaders "
                 f"fail with 'wrong number of tensors'", f"tensor {show(name)}")


def _drafter_shapes(h: GGUFHeader, fmt, meta, a: str) -> Iterator[Finding]:
    fc = h.tensors_by_name.get(fmt.fc_name)
    taps = meta.taps
    hidden = _int(h.get(f"{h.arch}.embedding_length"))
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
        for key in (f"{h.arch}.dflash.n_target_features",):
            v = _int(h.get(key))
            if v is not None and v != width:
                yield _d(h, Severity.ERROR, "drafter-fc-width",
                         f"{show(key)} = {v:,} but {fmt.fc_name} is {width:,} wide: the loader builds a wrong-size fc",
                         f"key {show(key)}")
    n_tl = _int(h.get(f"{h.arch}.dflash.n_target_layers"))
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
    pat, window, n = h.kv.get(pk), _int(h.get(wk)), _int(h.get(f"{h.arch}.block_count"))
    if pat is not None:
        if pat.type != T.ARRAY or pat.sub_type != T.BOOL:
            yield _d(h, Severity.ERROR, "drafter-swa-pattern",
                     f"{a}.attention.sliding_window_pattern is {_typename(pat.type, pat.sub_type)}; runtimes read "
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


@pair_check
def pair_drafter(d: GGUFHeader, t: GGUFHeader) -> Iterator[Finding]:
    got = drafter_format(d)
    if got is None or got[1] is None:
        return
    fmt, meta, _ = got
    ta = t.arch or ""
    depth, hidden = _int(t.get(f"{ta}.block_count")), _int(t.get(f"{ta}.embedding_length"))
    fc = d.tensors_by_name.get(fmt.fc_name)
    taps = list(meta.taps)
    stored = [i + fmt.tap_offset for i in taps]
    p = lambda sev, code, msg, where="": _f(d, sev, code, msg, where, "pairing")  # noqa: E731
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
        else:
            from ..config import build_target_layer_ids

            ref = list(build_target_layer_ids(depth, len(taps)))
            for shift in (1, -1):
                if taps == [i + shift for i in ref]:
                    yield p(Severity.WARNING, "pair-taps-offset",
                            f"target layers {stored} are z-lab's standard taps {ref} for a {depth}-layer target "
                            f"shifted by {shift:+d}: a {fmt.name} file stores them "
                            f"{'unchanged' if not fmt.tap_offset else '+1'}; converted for another runtime's "
                            f"convention? (silent low acceptance)", "")
    vs = _int(d.get(f"{d.arch}.vocab_size"))
    tt = t.get("tokenizer.ggml.tokens")
    if vs is not None and isinstance(tt, StringArray) and vs != len(tt):
        yield p(Severity.ERROR, "pair-vocab-size",
                f"{show(d.arch or '')}.vocab_size = {vs:,} but the target has {len(tt):,} tokens", "")
    dr, tr = d.get(f"{d.arch}.rope.freq_base"), t.get(f"{ta}.rope.freq_base")
    if isinstance(dr, float) and isinstance(tr, float) and dr != tr:
        yield p(Severity.WARNING, "pair-rope-theta",
                f"drafter RoPE base {dr:g} differs from the target's {tr:g}: z-lab drafters use their target's "
                f"(a converter that read only top-level rope_theta? check the drafter's config.json)", "")


# --- deep scan -----------------------------------------------------------------------------

# Per quant type: (byte offset inside the block, kind) of each scale llama.cpp validates
# (ggml_validate_row_data in ggml-quants.c). Block layouts follow gguf-py's quants.py.
SCALES: dict[Q, tuple[tuple[int, str], ...]] = {
    Q.Q4_0: ((0, "f16"),), Q.Q5_0: ((0, "f16"),), Q.Q8_0: ((0, "f16"),), Q.Q8_1: ((0, "f16"),),
    Q.Q4_1: ((0, "f16"), (2, "f16")), Q.Q5_1: ((0, "f16"), (2, "f16")),
    Q.Q2_K: ((80, "f16"), (82, "f16")), Q.Q3_K: ((108, "f16"),),
    Q.Q4_K: ((0, "f16"), (2, "f16")), Q.Q5_K: ((0, "f16"), (2, "f16")), Q.Q6_K: ((208, "f16"),),
    Q.Q8_K: ((0, "f32"),), Q.TQ1_0: ((52, "f16"),), Q.TQ2_0: ((64, "f16"),),
    Q.IQ2_XXS: ((0, "f16"),), Q.IQ2_XS: ((0, "f16"),), Q.IQ2_S: ((0, "f16"),), Q.IQ3_XXS: ((0, "f16"),),
    Q.IQ3_S: ((0, "f16"),), Q.IQ1_S: ((0, "f16"),), Q.IQ4_NL: ((0, "f16"),), Q.IQ4_XS: ((0, "f16"),),
    Q.IQ1_M: ((48, "iq1m"),), Q.MXFP4: ((0, "e8m0"),),
    **({Q.Q1_0: ((0, "f16"),)} if hasattr(Q, "Q1_0") else {}),
}
FLOATS = {Q.F32: "<f4", Q.F64: "<f8", Q.F16: "<u2", Q.BF16: "<u2"}
_CHUNK = 8 << 20


def _bad_f16(u: np.ndarray) -> np.ndarray:
    return (u & 0x7C00) == 0x7C00  # exponent all ones: inf or NaN


def deep_scan(h: GGUFHeader, progress: Callable[[int], None] | None = None) -> tuple[list[Finding], int]:
    """Stream every tensor's bytes once (in file order, 8 MiB at a time)."""
    out: list[Finding] = []
    scanned = 0
    with open(h.path, "rb") as f:
        for t in sorted(h.tensors, key=lambda t: t.offset_abs):
            out += _scan_tensor(h, f, t, progress)
            scanned += t.nbytes
    return out, scanned


def _scan_tensor(h: GGUFHeader, f, t: TensorInfo, progress) -> list[Finding]:
    block, tsize = GGML_QUANT_SIZES[t.ggml_type]
    step = max(tsize, _CHUNK - _CHUNK % tsize)
    f.seek(t.offset_abs)
    nonzero, nan, inf, bad_blocks, first_bad, done = False, 0, 0, 0, -1, 0
    while done < t.nbytes:
        n = min(step, t.nbytes - done)
        chunk = f.read(n)
        if len(chunk) != n:
            raise TruncatedError(f"{h.path}: tensor {show(t.name)} data ends at byte {t.offset_abs + done + len(chunk):,}"
                                 f" while scanning: the file shrank; re-run on a stable copy", t.offset_abs + done)
        u8 = np.frombuffer(chunk, np.uint8)
        nonzero = nonzero or bool(u8.any())
        if t.ggml_type in FLOATS:
            a = np.frombuffer(chunk, FLOATS[t.ggml_type])
            if t.ggml_type in (Q.F32, Q.F64):
                isnan, isinf = np.isnan(a), np.isinf(a)
            else:
                exp, man = (0x7C00, 0x03FF) if t.ggml_type == Q.F16 else (0x7F80, 0x007F)
                top = (a & exp) == exp
                isnan, isinf = top & ((a & man) != 0), top & ((a & man) == 0)
            k_nan, k_inf = int(isnan.sum()), int(isinf.sum())
            if (k_nan or k_inf) and first_bad < 0:
                first_bad = done // tsize + int(np.flatnonzero(isnan | isinf)[0])
            nan, inf = nan + k_nan, inf + k_inf
        elif t.ggml_type in SCALES:
            nb = n // tsize
            bad = np.zeros(nb, bool)
            for off, kind in SCALES[t.ggml_type]:
                if kind == "f16":
                    bad |= _bad_f16(np.ndarray((nb,), "<u2", chunk, off, (tsize,)))
                elif kind == "f32":
                    bad |= ~np.isfinite(np.ndarray((nb,), "<f4", chunk, off, (tsize,)))
                elif kind == "e8m0":
                    bad |= np.ndarray((nb,), np.uint8, chunk, off, (tsize,)) == 0xFF
                else:  # iq1m: the fp16 scale is spread over the top nibbles of four u16
                    sc = [np.ndarray((nb,), "<u2", chunk, off + 2 * i, (tsize,)) for i in range(4)]
                    d = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)
                    bad |= _bad_f16(d)
            k = int(bad.sum())
            if k and first_bad < 0:
                first_bad = done // tsize + int(np.flatnonzero(bad)[0])
            bad_blocks += k
        done += n
        if progress is not None:
            progress(n)
    where, ty = f"tensor {show(t.name)}", t.ggml_type.name
    out = []
    if nan or inf:
        out.append(_f(h, Severity.ERROR, "nan-inf",
                      f"tensor {show(t.name)} ({ty}) has {nan:,} NaN and {inf:,} inf values (first at element "
                      f"{first_bad:,}): the source weights or the conversion are broken", where, "data"))
    if bad_blocks:
        out.append(_f(h, Severity.ERROR, "bad-quant-scale",
                      f"tensor {show(t.name)} ({ty}): {bad_blocks:,} of {t.nbytes // tsize:,} blocks have an inf/NaN "
                      f"scale (first at block {first_bad:,}); llama.cpp's row validation rejects it: re-quantize "
                      f"from the F16/BF16 source", where, "data"))
    if t.nbytes and not nonzero:
        out.append(_f(h, Severity.WARNING, "all-zero",
                      f"tensor {show(t.name)} ({ty}, {t.nbytes:,} bytes) is all zeros: an unfilled region of an "
                      f"interrupted download, or a failed conversion", where, "data"))
    return out
