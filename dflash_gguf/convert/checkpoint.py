"""convert and retarget: the two ways a drafter GGUF is produced.

convert:  config.json + safetensors (+ target tokenizer) → plan → one tensor at a time → GGUF.
retarget: GGUF in one format → DrafterMeta → the same tensors, renamed, bytes untouched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..config import DrafterConfig, load_config
from ..errors import TargetError, UsageError
from ..formats import Format, get_format, meta_from_gguf
from ..fileio.gguf_reader import read_gguf
from ..fileio.gguf_writer import TensorOut, WriteReport, write_gguf
from .plan import ROPE_FREQS, ConversionPlan, TensorPlan, build_plan, llama3_rope_factors
from ..fileio.safetensors import SourceTensor, iter_raw, read_inventory, to_f32


@dataclass(frozen=True)
class ConvertResult:
    plan: ConversionPlan
    config: DrafterConfig
    written: WriteReport | None  # None for a dry run
    target_checks: list[str] = field(default_factory=list)


def plan_conversion(
    drafter_dir: str | Path,
    *,
    format: str = "llama.cpp",
    outtype: str = "auto",
    target_gguf: str | Path | None = None,
    target_dir: str | Path | None = None,
) -> tuple[DrafterConfig, list[SourceTensor], ConversionPlan, list[str]]:
    """Load and validate everything; returns (config, inventory, plan, target notes)."""
    fmt = get_format(format)
    if target_gguf and target_dir:
        raise UsageError("pass only one of --target-gguf and --target-dir")
    cfg = load_config(drafter_dir)
    inventory = read_inventory(drafter_dir)
    tokenizer, target_hidden, notes = [], None, []
    if target_gguf or target_dir:
        from ..target import info as tok

        target = tok.load_target(target_gguf, target_dir)
        notes = [*target.notes, *(tok.check_drafter_fits(target, cfg) or [])]
        tokenizer, target_hidden = list(target.kvs), target.hidden_size
    elif fmt.needs_tokenizer:
        raise TargetError(
            f"--format {fmt.name} needs the target's tokenizer; pass --target-gguf T.gguf (the target as GGUF) "
            "or --target-dir T/ (its Hugging Face dir), or use --format lucebox which needs none"
        )
    plan = build_plan(cfg, fmt, inventory, outtype, tokenizer=tokenizer, target_hidden=target_hidden,
                      name=Path(drafter_dir).resolve().name)
    return cfg, inventory, plan, notes


def convert(
    drafter_dir: str | Path,
    out: str | Path | None,
    *,
    format: str = "llama.cpp",
    outtype: str = "auto",
    target_gguf: str | Path | None = None,
    target_dir: str | Path | None = None,
    force: bool = False,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ConvertResult:
    """Convert a drafter checkpoint to one GGUF (atomic, deterministic, streaming)."""
    cfg, inventory, plan, notes = plan_conversion(drafter_dir, format=format, outtype=outtype,
                                                  target_gguf=target_gguf, target_dir=target_dir)
    if dry_run:
        return ConvertResult(plan, cfg, None, notes)
    if out is None:
        raise UsageError("convert needs -o OUT.gguf (or --dry-run)")
    by_name = {t.name: t for t in inventory}
    tensors = [TensorOut(p.dst, p.shape, p.ggml_type, p.nbytes, _producer(p, by_name, cfg)) for p in plan.tensors]
    report = write_gguf(out, plan.arch, plan.kvs, tensors, force=force, progress=progress)
    return ConvertResult(plan, cfg, report, notes)


def _producer(p: TensorPlan, by_name: dict[str, SourceTensor], cfg: DrafterConfig) -> Callable[[], object]:
    if p.src is None:
        assert p.dst == ROPE_FREQS
        return lambda: llama3_rope_factors(cfg)
    src = by_name[p.src]
    return lambda: encode(src, p.ggml_type)


def encode(src: SourceTensor, qtype: Q) -> Iterator[np.ndarray]:
    """Read one source tensor in row chunks and encode each as ``qtype``.

    Every encoding here is row-local (ggml blocks never straddle rows), so chunking by rows
    gives the same bytes as encoding the whole tensor at once.
    """
    passthrough = (qtype, src.dtype) in ((Q.BF16, "BF16"), (Q.F16, "F16"))  # identical bit layout
    quantize = None
    if not passthrough and qtype != Q.F32:
        from ..quants import quantize  # bit-exact ggml encodings (f16/bf16 included)
    for raw in iter_raw(src):
        if passthrough:
            yield raw
            continue
        x = to_f32(src, raw)
        yield x if quantize is None else quantize(x, qtype, name=src.name)


# --- retarget ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RetargetResult:
    source_format: str
    target_format: str
    arch: str
    renamed: list[tuple[str, str]]
    written: WriteReport | None


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
) -> RetargetResult:
    """Rewrite a drafter GGUF into another format: keys re-spelled, tensors renamed, bytes untouched."""
    to_fmt: Format = get_format(format)
    f = read_gguf(src)
    from_fmt, meta = meta_from_gguf(f.kvs, f.shapes(), src)
    if target_gguf or target_dir:
        _attach_tokenizer(meta, target_gguf, target_dir, src)
    arch, kvs = to_fmt.kvs(meta)
    renamed, tensors = [], []
    for t in f.tensors:
        new = to_fmt.rename_from(from_fmt, t.name)
        if new is None:
            new = t.name  # not a drafter-table tensor (e.g. rope_freqs, d2t): keep its name
        renamed.append((t.name, new))
        tensors.append(TensorOut(new, t.shape, t.ggml_type, t.nbytes, (lambda e=t: f.raw(e))))
    if dry_run:
        return RetargetResult(from_fmt.name, to_fmt.name, arch, renamed, None)
    if out is None:
        raise UsageError("retarget needs -o OUT.gguf (or --dry-run)")
    if Path(out).resolve() == Path(src).resolve():
        raise UsageError("retarget would overwrite its input; choose another -o path")
    report = write_gguf(out, arch, kvs, tensors, force=force, progress=progress)
    return RetargetResult(from_fmt.name, to_fmt.name, arch, renamed, report)


def _attach_tokenizer(meta, target_gguf, target_dir, src) -> None:
    """Give a tokenizer-less drafter (e.g. a Lucebox file) the target's vocab, after checking
    that the target fits: same vocab size, hidden size = tap width / taps."""
    from ..target import info as tok

    target = tok.load_target(target_gguf, target_dir)
    if meta.vocab_size is not None and meta.vocab_size != target.vocab_size:
        raise TargetError(f"{src}: drafter vocab {meta.vocab_size} != target vocab {target.vocab_size} "
                          f"({target.source}); is this the drafter's target?")
    width = len(meta.taps) * target.hidden_size
    if meta.n_target_features != width:
        raise TargetError(f"{src}: fc input width {meta.n_target_features} != {len(meta.taps)} taps × target hidden "
                          f"{target.hidden_size} ({target.source}); is this the drafter's target?")
    meta.tokenizer = [kv for kv in target.kvs if kv.key != "tokenizer.ggml.mask_token_id"]
    meta.vocab_size = target.vocab_size
