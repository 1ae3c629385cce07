"""retargeting: a drafter GGUF in one format → DrafterMeta → the same tensors renamed, bytes untouched.

A legacy DSpark GGUF (``formats.legacy_dspark``) enters through the same path: its header is
first re-spelled as mainline's, then read like any mainline file."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import GGUFFormatError, TargetError, UsageError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_header import show
from ..fileio.gguf_reader import read_gguf
from ..fileio.gguf_writer import FileSpan, TensorOut, WriteReport, write_gguf
from ..formats import Format, get_format, meta_from_gguf
from ..formats.legacy_dspark import SHARED_TENSORS, is_legacy_dspark, migrate_header
from ..formats.meta import ROPE_SECTIONS, without_mask
from ..formats.names import D2T


@dataclass(frozen=True)
class RetargetResult:
    source_format: str
    target_format: str
    arch: str
    renamed: list[tuple[str, str]]
    written: WriteReport | None
    dropped: tuple[str, ...] = ()  # --drop-shared-tensors: the tensors left for the target to lend


def retarget(
    src: str | Path,
    out: str | Path | None,
    *,
    format: str,
    target_gguf: str | Path | None = None,
    target_dir: str | Path | None = None,
    force: bool = False,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    drop_shared: bool = False,
) -> RetargetResult:
    """Rewrite a drafter GGUF into another format: keys re-spelled, tensors renamed, bytes untouched.
    ``drop_shared``: leave out ``token_embd.weight`` / ``output.weight``, which mainline takes
    from the target when the drafter has none (full vocabulary only)."""
    to_fmt: Format = get_format(format)
    f = read_gguf(src)
    kv_in, shapes = f.kvs, f.shapes()
    legacy = None
    if is_legacy_dspark(f.arch):
        legacy = migrate_header(kv_in, shapes, src)
        if not (target_gguf or target_dir):
            raise UsageError(f"{src}: a legacy DSpark GGUF carries no vocabulary; pass --target-gguf DONOR.gguf "
                             "(the target model's GGUF) to take the vocabulary from")
        kv_in, shapes = legacy.kvs, legacy.shapes
    if drop_shared:
        if to_fmt.name != "llama.cpp":
            raise UsageError(f"--drop-shared-tensors is for --format llama.cpp only (mainline borrows the target's "
                             f"embedding and output head); --format {to_fmt.name} loads the drafter's own")
        if D2T in shapes:
            raise UsageError(f"{src}: a reduced-vocabulary drafter (d2t) needs its own output head; "
                             "drop --drop-shared-tensors")
    from_fmt, meta = meta_from_gguf(kv_in, shapes, src)
    if legacy is not None:
        meta.vocab_size = legacy.vocab_size  # the Markov head's rows: the donor must have as many tokens
    if target_gguf or target_dir:
        _attach_target(meta, target_gguf, target_dir, src)
    arch, kvs = to_fmt.kvs(meta)
    renamed, tensors, by_new, dropped = [], [], {}, []
    for t in f.tensors:
        name = t.name if legacy is None else legacy.renames[t.name]
        if drop_shared and name in SHARED_TENSORS:
            dropped.append(name)
            continue
        new = to_fmt.rename_from(from_fmt, name)
        if new is None:
            new = name  # not a drafter-table tensor (e.g. rope_freqs, d2t): keep its name
        if new in by_new:
            raise GGUFFormatError(
                f"{src}: tensors {show(by_new[new])} and {show(t.name)} would both be named {show(new)} in "
                f"--format {to_fmt.name} (a tensor carries another format's name; re-convert the drafter)")
        by_new[new] = t.name
        renamed.append((t.name, new))
        span = FileSpan(f.path, t.offset_abs, t.nbytes, t.name)  # bytes untouched: copied file to file
        tensors.append(TensorOut(new, t.shape, t.ggml_type, t.nbytes, (lambda s=span: s)))
    source_format = "legacy-dspark" if legacy is not None else from_fmt.name
    if dry_run:
        return RetargetResult(source_format, to_fmt.name, arch, renamed, None, tuple(dropped))
    if out is None:
        raise UsageError("retarget needs -o OUT.gguf (or --dry-run)")
    report = write_gguf(out, arch, kvs, tensors, force=force, inputs=(src, target_gguf, target_dir), progress=progress)
    return RetargetResult(source_format, to_fmt.name, arch, renamed, report, tuple(dropped))


def _attach_target(meta, target_gguf, target_dir, src) -> None:
    """Give the drafter what only the target knows, after checking that the target fits (same
    vocab size, hidden size = tap width / taps): its vocab (for tokenizer-less files, e.g.
    Lucebox's) and, for an M-RoPE target, the sections a stale file lacks."""
    from ..target.info import load_target  # here: the tokenizer code is only needed with a target

    target = load_target(target_gguf, target_dir)
    if meta.vocab_size is not None and meta.vocab_size != target.vocab_size:
        raise TargetError(f"{src}: drafter vocab {meta.vocab_size} != target vocab {target.vocab_size} "
                          f"({target.source}); is this the drafter's target?")
    width = len(meta.taps) * target.hidden_size
    if meta.n_target_features != width:
        raise TargetError(f"{src}: fc input width {meta.n_target_features} != {len(meta.taps)} taps × target hidden "
                          f"{target.hidden_size} ({target.source}); is this the drafter's target?")
    meta.tokenizer, meta.mask_at = without_mask(list(target.kvs))
    meta.vocab_size = target.vocab_size
    if target.uses_mrope and meta.hparam(ROPE_SECTIONS) is None:
        head_dim = meta.hparam("attention.key_length") or meta.hidden_size // int(meta.hparam("attention.head_count"))
        meta.hparams.append((ROPE_SECTIONS, [int(head_dim) // 2, 0, 0, 0], T.ARRAY, T.INT32))
