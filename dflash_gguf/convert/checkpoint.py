"""convert: config.json + safetensors (+ target tokenizer) → plan → one tensor at a time → GGUF.

``plan_conversion`` does all the reading and validation (and builds the target's vocab, the
slow part with a 150k-token tokenizer) once; ``write_conversion`` streams that plan to a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..config import MASK_FILE, DrafterConfig, parse_config
from ..config.deepseek_v4 import DSV4DSparkConfig, is_dsv4_dspark, parse_dsv4_dspark
from ..config.values import read_config_json
from ..errors import TargetError, UsageError
from ..fileio.gguf_constants import GGMLQuantizationType as Q
from ..fileio.gguf_header import is_gguf_file
from ..fileio.gguf_writer import FileSpan, TensorOut, WriteReport, write_gguf
from ..fileio.safetensors import SourceTensor, bf16_bytes_to_f32, is_hole, iter_raw, read_inventory, read_raw, to_f32
from ..fileio.span_copy import Zeros
from ..formats import get_format
from ..target.info import check_drafter_fits, load_target
from ..formats.names import ROPE_FREQS
from .metadata import MetadataInputs, output_path
from .plan import MASK_ROW, NEOX_PERMUTE, ConversionPlan, TensorPlan, build_plan, llama3_rope_factors

if TYPE_CHECKING:  # numpy: imported where tensor data is converted, never for a plain copy
    import numpy as np

    from .mask_embedding import MaskEmbedding  # imported for MiMo-style drafters only

# BF16 tensors up to this size become F32 without numpy (the norms of a bf16 conversion: with
# the rest copied as stored, a conversion then never imports numpy, ~0.15 s of its start)
SMALL_BYTES = 1 << 20
# types whose encoding of all-zero values is all zero bytes (a Q8_0 block: scale 0, codes 0)
ZERO_IS_ZEROS = frozenset({Q.F32, Q.F16, Q.BF16, Q.Q8_0})


@dataclass(frozen=True)
class ConvertResult:
    plan: ConversionPlan
    config: DrafterConfig | DSV4DSparkConfig
    written: WriteReport | None  # None for a dry run
    target_checks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Conversion:
    """Everything read and validated before a byte is written."""

    config: DrafterConfig | DSV4DSparkConfig
    inventory: list[SourceTensor]  # the drafter's tensors, and any taken from the target
    plan: ConversionPlan
    target_checks: list[str]
    mask: MaskEmbedding | None = None  # MiMo's replacement row for the embedding table
    inputs: tuple[Path, ...] = ()  # what it reads (input_paths): an output may not replace them


def plan_conversion(
    drafter_dir: str | Path,
    *,
    format: str = "llama.cpp",
    outtype: str = "auto",
    target_gguf: str | Path | None = None,
    target_dir: str | Path | None = None,
    metadata: str | Path | None = None,
    model_name: str | None = None,
    fp8_as_q8: bool = False,
) -> Conversion:
    """Load and validate the checkpoint, the config and the target; build the plan (no output).
    ``metadata`` and ``model_name`` are mainline's ``--metadata`` (a JSON file of general.* keys
    that override the model card's) and ``--model-name``; ``fp8_as_q8`` its ``--fp8-as-q8`` (a
    pre-quantized checkpoint's FP8 weights written as Q8_0, convert/prequant.py)."""
    fmt = get_format(format)
    if target_gguf and target_dir:
        raise UsageError("pass only one of --target-gguf and --target-dir")
    if is_gguf_file(drafter_dir):
        raise UsageError(f"{drafter_dir}: a GGUF file, already converted; convert takes the drafter checkpoint "
                         "directory (config.json + safetensors). To change a GGUF's format use "
                         "'dflash-gguf retarget', its type 'dflash-gguf quantize'")
    raw, cfg_path = read_config_json(drafter_dir, "not found (expected the drafter's config.json next to its "
                                                  "safetensors)", "; re-download the config")
    if is_dsv4_dspark(raw):  # a DeepSeek-V4 checkpoint: its mtp.* stages are the draft
        return _plan_dsv4(drafter_dir, parse_dsv4_dspark(raw, cfg_path), fmt, outtype, target_gguf, target_dir,
                          MetadataInputs(Path(drafter_dir), None if metadata is None else Path(metadata), model_name))
    cfg = parse_config(raw, cfg_path)
    inventory = read_inventory(drafter_dir)
    tokenizer, target_hidden, notes, mrope = [], None, [], False
    if target_gguf or target_dir:
        target = load_target(target_gguf, target_dir, drafter=cfg)
        notes = [*target.notes, *(check_drafter_fits(target, cfg) or [])]
        tokenizer, target_hidden, mrope = list(target.kvs), target.hidden_size, target.uses_mrope
    elif fmt.needs_tokenizer:
        raise TargetError(
            f"--format {fmt.name} needs the target's tokenizer; pass --target-gguf T.gguf (the target as GGUF) "
            "or --target-dir T/ (its Hugging Face dir), or use --format lucebox which needs none"
        )
    extra, mask = {}, None
    if (Path(drafter_dir) / MASK_FILE).is_file():
        from .mask_embedding import EMBED, load_mask_embedding, target_tables

        extra = target_tables(cfg, inventory, target_gguf, target_dir)
        mask = load_mask_embedding(drafter_dir, cfg, extra[EMBED].dtype)
    plan = build_plan(cfg, fmt, inventory, outtype, tokenizer=tokenizer, target_hidden=target_hidden,
                      target_mrope=mrope, extra_sources=extra, mask_row=mask is not None,
                      metadata=MetadataInputs(Path(drafter_dir), None if metadata is None else Path(metadata),
                                              model_name), fp8_as_q8=fp8_as_q8)
    own = {t.name for t in inventory}
    inventory = [*inventory, *(t for t in extra.values() if t.name not in own)]
    return Conversion(cfg, inventory, plan, notes, mask, input_paths(drafter_dir, target_gguf, target_dir))


def _plan_dsv4(drafter_dir: str | Path, cfg: DSV4DSparkConfig, fmt, outtype: str, target_gguf, target_dir,
               metadata: MetadataInputs) -> Conversion:
    """plan_conversion for a DeepSeek-V4 checkpoint's DSpark draft (convert/deepseek_v4.py):
    only the shards holding ``mtp.*`` tensors are read; the tokenizer is the target's (the
    checkpoint dir itself holds it: ``--target-dir`` may name the same directory)."""
    from .deepseek_v4 import plan_dsv4

    if not (target_gguf or target_dir):
        raise TargetError("a DeepSeek-V4 DSpark draft needs its target's tokenizer: pass --target-gguf T.gguf (the "
                          "DeepSeek-V4 GGUF) or --target-dir DIR (the checkpoint dir, which holds tokenizer.json)")
    target = load_target(target_gguf, target_dir)
    inventory = read_inventory(drafter_dir, prefix="mtp.")
    plan = plan_dsv4(cfg, fmt, inventory, outtype, tokenizer=list(target.kvs), metadata=metadata)
    return Conversion(cfg, inventory, plan, list(target.notes), None, input_paths(drafter_dir, target_gguf, target_dir))


def input_paths(drafter_dir: str | Path, target_gguf: str | Path | None = None,
                target_dir: str | Path | None = None) -> tuple[Path, ...]:
    """What a conversion reads, which its output may not replace: the drafter dir's files except
    GGUFs (a conversion reads none, and mainline's default output name lands in that dir), and
    the target."""
    d = Path(drafter_dir)
    own = tuple(p for p in d.iterdir() if not p.name.endswith(".gguf")) if d.is_dir() else (d,)
    return (*own, *(Path(p) for p in (target_gguf, target_dir) if p))


def write_conversion(conv: Conversion, out: str | Path, *, force: bool = False,
                     progress: Callable[[int], None] | None = None) -> ConvertResult:
    """Write a planned conversion (atomic, deterministic, streaming: one tensor in memory at a time)."""
    by_name = {t.name: t for t in conv.inventory}
    # pack-quantized and GPTQ weights are not stored as such, BitNet's are stored packed: their
    # stand-ins, of the dequantized shape (convert/prequant_packed.py, prequant_gptq.py, prequant_bitnet.py)
    by_name |= {n: d.stand_in for n, d in conv.plan.dequant.items()
                if n not in by_name or getattr(d, "bitnet", False)}
    plan = conv.plan
    tensors = [TensorOut(p.dst, p.shape, p.ggml_type, p.nbytes, _producer(p, by_name, conv)) for p in plan.tensors]
    report = write_gguf(out, plan.arch, plan.kvs, tensors, force=force, inputs=conv.inputs, progress=progress)
    return ConvertResult(plan, conv.config, report, conv.target_checks)


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
    metadata: str | Path | None = None,
    model_name: str | None = None,
    fp8_as_q8: bool = False,
) -> ConvertResult:
    """Convert a drafter checkpoint to one GGUF: ``plan_conversion`` then ``write_conversion``.
    ``out`` is named as mainline names it (``metadata.output_path``): None or a directory gets
    ``{Name}-{Size}-{Type}.gguf`` (in the drafter dir when None), ``{ftype}`` is filled in."""
    conv = plan_conversion(drafter_dir, format=format, outtype=outtype, target_gguf=target_gguf, target_dir=target_dir,
                           metadata=metadata, model_name=model_name, fp8_as_q8=fp8_as_q8)
    if dry_run:
        return ConvertResult(conv.plan, conv.config, None, conv.target_checks)
    return write_conversion(conv, output_path(out, drafter_dir, conv.plan.kvs), force=force, progress=progress)


def _producer(p: TensorPlan, by_name: dict[str, SourceTensor], conv: Conversion) -> Callable[[], object]:
    generated = conv.plan.generated
    if p.dst in conv.plan.stacked:  # DeepSeek-V4 routed experts: many sources, one MXFP4 tensor
        from .deepseek_v4 import repack_experts

        return lambda: repack_experts([by_name[n] for n in conv.plan.stacked[p.dst]])
    if p.src is None and p.dst in generated:  # DSpark: d2t, Gemma4's rope_freqs (decided by the plan)
        return lambda: generated[p.dst]
    if p.src is None:
        assert p.dst == ROPE_FREQS
        return lambda: llama3_rope_factors(conv.config)
    src = by_name[p.src]
    chunks = None
    deq = conv.plan.dequant.get(p.src)
    if getattr(deq, "nvfp4", False):  # an NVFP4 weight: its bytes moved into ggml blocks (prequant_fp4.py)
        from .prequant_fp4 import repack

        return lambda: repack(deq)
    if deq is not None:
        # a pre-quantized weight is its float32 dequantization from here on (prequant.py)
        from .prequant import Dequant, dequantize, iter_dequantize

        if isinstance(deq, Dequant) and p.ggml_type in ZERO_IS_ZEROS and is_hole(src) and is_hole(deq.scale):
            return lambda: Zeros(p.nbytes)  # a sparse checkpoint: 0 × a finite scale is 0, whose encoding is zeros
        stored, src = src, replace(src, dtype="F32", nbytes=src.numel * 4)
        if p.transform == NEOX_PERMUTE:
            chunks = lambda: [neox_permute(dequantize(stored, deq), conv.config.head_dim)]  # noqa: E731
        else:
            chunks = lambda: iter_dequantize(stored, deq)  # noqa: E731 (rows at a time: Q8_0 etc. are row-local)
    elif p.transform == NEOX_PERMUTE:
        chunks = lambda: [neox_permute(read_raw(src), conv.config.head_dim)]  # noqa: E731 (one tensor in memory)
    elif p.transform == MASK_ROW:
        chunks = lambda: _patched(src, conv.mask)  # noqa: E731
    return lambda: encode(src, p.ggml_type, chunks() if chunks else None)


def neox_permute(raw: np.ndarray, head_dim: int) -> np.ndarray:
    """Rows of an interleaved-rope (GPT-J) Q/K weight or norm in NeoX order: per head, the even
    dims then the odd ones — mainline's ``reshape(-1, hd/2, 2, ...).transpose(1, 2)``."""
    import numpy as np

    n = raw.shape[0]
    idx = np.arange(n).reshape(-1, head_dim // 2, 2).transpose(0, 2, 1).reshape(-1)
    return raw[idx]


def _patched(src: SourceTensor, mask: MaskEmbedding) -> Iterator[np.ndarray]:
    from .mask_embedding import patch_row

    first = 0
    for chunk in iter_raw(src):
        yield patch_row(chunk, first, mask)
        first += len(chunk)


def encode(src: SourceTensor, qtype: Q, chunks: Iterable[np.ndarray] | None = None) -> Iterator[np.ndarray | FileSpan]:
    """Read one source tensor in row chunks (or take ``chunks`` of it, storage dtype) and
    encode each as ``qtype``; a tensor kept in its own type is one ``FileSpan`` of its bytes.

    Every encoding here is row-local (ggml blocks never straddle rows), so chunking by rows
    gives the same bytes as encoding the whole tensor at once.
    """
    passthrough = (qtype, src.dtype) in ((Q.BF16, "BF16"), (Q.F16, "F16"), (Q.F32, "F32"))  # identical bytes
    if passthrough and chunks is None:
        # Stored bytes are the encoding: copied file to file by the writer (fileio/span_copy.py).
        yield FileSpan(src.file, src.offset, src.nbytes, src.name)
        return
    if (qtype, src.dtype) == (Q.F32, "BF16") and chunks is None and src.nbytes <= SMALL_BYTES:
        yield bf16_bytes_to_f32(src)
        return
    quantize = None
    if not passthrough and qtype != Q.F32:
        from ..quants import quantize  # bit-exact ggml encodings (f16/bf16 included)
    for raw in (iter_raw(src) if chunks is None else chunks):
        if passthrough:
            yield raw
            continue
        x = to_f32(src, raw)
        yield x if quantize is None else quantize(x, qtype, name=src.name)
