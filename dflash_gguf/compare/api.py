"""compare-weights: is a GGUF a faithful copy of a checkpoint (or of another GGUF), tensor by
tensor, and where does it lose precision?

Three stages, each answering one question, the same for both modes once the tensors are paired:

1. Inventory (here). Every checkpoint tensor is paired where the conversion plan for the file's
   detected format sends it (``convert.plan.route_tensors``: names, drops with their reasons,
   transforms, the tables a drafter family computes; a DeepSeek-V4 checkpoint's DSpark draft
   through convert's plan for it, ``compare.deepseek_v4``); between two GGUFs, through both
   formats. Shapes are compared in torch order (the GGUF's ``ne`` reversed). Missing, extra
   and shape-mismatched tensors fail the verdict.
2. Numbers, streamed (``engine``, ``stats``, ``sides``): each pair is read in row chunks of
   about 1 MB of float32 on a small thread pool, re-encoded and compared byte for byte, then
   dequantized and measured against its band (``bands``).
3. Diagnosis (``diagnose``), only for tensors that failed: a failure names its cause.

The library never prints; the CLI renders ``CompareReport`` (``report``).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Mapping

from ..config import MASK_FILE, DrafterConfig, load_config
from ..convert.plan import NEOX_PERMUTE, Routes, route_tensors, transform_of
from ..errors import GGUFFormatError, InputError, UsageError
from ..fileio.gguf_reader import GGUFFile, read_gguf
from ..fileio.safetensors import FLOAT_DTYPES, read_inventory
from ..formats import DrafterMeta, Format, meta_from_gguf
from ..formats.names import OUTPUT, ROPE_FREQS, TOKEN_EMBD
from .diagnose import diagnose_failures, flag_outliers
from .constants import compare_constants
from .deepseek_v4 import PREFIX as DSV4_PREFIX, dsv4_config, dsv4_constants, pair_dsv4, plan_for as dsv4_plan
from .integers import int_pair_row, is_integer_table, table_row
from .engine import default_workers, make_pair, run_pairs
from .report import EXTRA, MISSING, OUT, CompareReport, TensorComparison
from .sides import Files, Side, array_side, dequant_side, neox_side

_CHECKPOINT_MODE, _GGUF_MODE = "safetensors-gguf", "gguf-gguf"
_Matched = list[tuple[TensorComparison, Side, Side]]  # a row and its two sides, A first


def compare_weights(
    drafter_dir: str | Path,
    gguf_path: str | Path,
    *,
    tolerances: Mapping[str, float] | None = None,
    requantize: bool = True,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    constants: bool = True,
) -> CompareReport:
    """Compare a drafter checkpoint (safetensors dir) with a GGUF converted from it: each
    checkpoint tensor is paired where the conversion plan for the file's format sends it
    (``convert.plan.route_tensors``), with the plan's transform applied to the checkpoint side;
    with ``constants``, every key convert would write is compared too (``compare.constants``).
    A DeepSeek-V4 checkpoint's DSpark draft (its ``mtp.*`` stages) is paired through convert's
    plan for it (``compare.deepseek_v4``).

    Raises:
        InputError: the dir has no weights, or the GGUF does not exist.
        ConfigError: the dir's config.json is missing or invalid (the plan is built from it).
        WeightsError: the safetensors files are corrupt or truncated; (DeepSeek-V4) a draft
            tensor convert's plan refuses.
        GGUFFormatError: the GGUF is corrupt, or is not a DFlash drafter.
    """
    t0 = time.perf_counter()
    d = Path(drafter_dir)
    if not d.is_dir():
        raise InputError(f"{d}: not a directory; pass the drafter checkpoint dir (config.json + model.safetensors)")
    dsv4 = dsv4_config(d)  # a DeepSeek-V4 checkpoint: its mtp.* stages are the draft (as convert decides)
    inventory = read_inventory(d, prefix=DSV4_PREFIX if dsv4 else "")
    cfg = dsv4 or load_config(d)
    f, fmt, file_meta = _open_drafter_gguf(gguf_path)
    if fmt is None:
        meta_from_gguf(f.kvs, f.shapes(), gguf_path)  # raises the precise "not a drafter" error
    report = CompareReport(_CHECKPOINT_MODE, d, Path(gguf_path), fmt.name, None, [], [], requantize,
                           dict(tolerances or {}))
    if dsv4 is not None:
        plan = dsv4_plan(dsv4, inventory, f)
        if constants:
            report.constants = dsv4_constants(dsv4, plan, f)
        with Files() as files:
            return _measure(report, pair_dsv4(report, plan, inventory, f, files), workers, progress, t0)
    routes = route_tensors(cfg, fmt, inventory, target_hidden=cfg.target_hidden_size or cfg.hidden_size)
    if constants:
        report.constants = compare_constants(cfg, fmt, routes, f, file_meta)
    with Files() as files:
        matched = _pair_checkpoint(report, cfg, routes, f, fmt, files)
        return _measure(report, matched, workers, progress, t0)


def compare_ggufs(
    a_path: str | Path,
    b_path: str | Path,
    *,
    tolerances: Mapping[str, float] | None = None,
    requantize: bool = True,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> CompareReport:
    """Compare two GGUFs of the same drafter (two formats, or two quant levels).

    Tensors are paired through each file's format (A's name -> checkpoint name -> B's name);
    for files that are not DFlash drafters, by identical names. Each pair is measured against
    its more precise side; when that side is F32/F16/BF16 the other's bytes are checked
    against ggml's encoding of those values ("bit-identical").
    """
    t0 = time.perf_counter()
    fa, fmt_a, _ = _open_drafter_gguf(a_path)
    fb, fmt_b, _ = _open_drafter_gguf(b_path)
    report = CompareReport(_GGUF_MODE, Path(a_path), Path(b_path), fmt_b.name if fmt_b else None,
                           fmt_a.name if fmt_a else None, [], [], requantize, dict(tolerances or {}))
    with Files() as files:
        matched = _pair_ggufs(report, a_path, fa, fmt_a, b_path, fb, fmt_b, files)
        return _measure(report, matched, workers, progress, t0)


def compare(a: str | Path, b: str | Path, *, constants: bool = True, **kwargs) -> CompareReport:
    """``compare_weights`` when ``a`` is a directory, ``compare_ggufs`` when it is a file
    (``constants`` applies to the first only: between two GGUFs neither side is config.json)."""
    pa = Path(a)
    if Path(b).is_dir():
        raise UsageError(f"{b} is a directory: pass the checkpoint dir first and the GGUF second "
                         "(compare-weights DRAFTER_DIR FILE.gguf)")
    if pa.is_dir():
        return compare_weights(pa, b, constants=constants, **kwargs)
    if pa.is_file():
        return compare_ggufs(pa, b, **kwargs)
    raise InputError(f"{pa}: no such file or directory; pass a drafter checkpoint dir or a GGUF")


def _open_drafter_gguf(path: str | Path) -> tuple[GGUFFile, Format | None, DrafterMeta | None]:
    """The file, its drafter format and parsed keys (None, None when it is not a drafter)."""
    f = read_gguf(path)
    try:
        fmt, meta = meta_from_gguf(f.kvs, f.shapes(), path)
    except GGUFFormatError:
        return f, None, None
    return f, fmt, meta


def _pair_checkpoint(report: CompareReport, cfg: DrafterConfig, routes: Routes, f: GGUFFile, fmt: Format,
                     files: Files) -> _Matched:
    """Stage 1, checkpoint vs GGUF, from the plan's routes: rows and notes go into ``report``;
    returns the pairs to measure."""
    rows, notes = report.tensors, report.notes
    by_gguf = {e.name: e for e in f.tensors}
    used: set[str] = set()
    matched: _Matched = []
    neox = False
    for n in routes.written:
        t = routes.by_name[n]
        g = routes.gguf_name(fmt, n)
        e = by_gguf.get(g)
        if e is None:
            rows.append(TensorComparison(t.name, g, None, t.shape, MISSING, source_type=t.dtype,
                                         detail=f"expected as {g} in the GGUF ({fmt.name} format)"))
            continue
        used.add(g)
        row = TensorComparison(t.name, g, e.ggml_type.name, t.shape, OUT, source_type=t.dtype,
                               gguf_shape=e.shape, nbytes=e.nbytes)
        rows.append(row)
        deq = routes.dequant(n)
        if t.dtype not in FLOAT_DTYPES and deq is None:
            row.detail = f"source dtype {t.dtype} is not a float type; cannot compare values"
            continue
        side = files.source_side(t) if deq is None else dequant_side(t, deq)
        if transform_of(cfg, n, mask_row=False) == NEOX_PERMUTE:
            side, neox = neox_side(side, cfg.head_dim), True
        matched.append((row, side, files.gguf_side(f, e)))
        for suffix, values in getattr(deq, "extras", ()):  # an NVFP4 weight's .scale / .input_scale
            g2, e2 = g.replace(".weight", suffix), by_gguf.get(g.replace(".weight", suffix))
            if e2 is not None:
                used.add(g2)
                row2 = TensorComparison(t.name, g2, e2.ggml_type.name, (values.size,), OUT, source_type="F32",
                                        gguf_shape=e2.shape, nbytes=e2.nbytes)
                rows.append(row2)
                matched.append((row2, array_side(t.name, values), files.gguf_side(f, e2)))
    for name, why in routes.dropped:
        notes.append(f"{name}: not converted by design ({why})")
    for name in routes.unknown:
        t = routes.by_name[name.removeprefix("model.")]
        rows.append(TensorComparison(t.name, None, None, t.shape, MISSING, source_type=t.dtype,
                                     detail=f"no {fmt.name} GGUF name for this tensor"))
    head, tail = routes.family.generated()
    for g, data, *_rest in head + tail:
        src, e = routes.family.written_from(g), by_gguf.get(g)
        if src is not None and e is not None:  # a table computed from a checkpoint tensor: compared as integers
            rows.append(table_row(routes.by_name[src], data, f, e))
            used.add(g)
    if routes.prequant is not None:
        n_fp4 = sum(getattr(d, "nvfp4", False) for d in routes.prequant.weights.values())
        n_deq = len(routes.prequant.weights) - n_fp4
        if n_deq:
            notes.append(f"pre-quantized checkpoint ({routes.prequant.label}): its {n_deq} quantized weights are "
                         "compared as convert dequantizes them (to float32, as llama.cpp's converter does)")
        if n_fp4:
            notes.append(f"pre-quantized checkpoint ({routes.prequant.label}): its {n_fp4} NVFP4 weights are "
                         "repacked, compared as ggml NVFP4 blocks (and their weight_scale_2 / input_scale as the "
                         ".scale / .input_scale tensors written beside them)")
    if neox:
        notes.append("rope_is_neox_style false: checkpoint Q/K rows compared after the converter's NeoX permutation")
    from_target = (TOKEN_EMBD, OUTPUT) if (cfg.path.parent / MASK_FILE).is_file() else ()
    if from_target:
        notes.append(f"{MASK_FILE}: token_embd/output are the target's (mask row replaced by the side file); "
                     "not in the checkpoint, not compared")
    for e in f.tensors:
        if e.name in used or e.name in from_target:
            continue
        if e.name == ROPE_FREQS:
            notes.append(f"{ROPE_FREQS}: generated by the converter from config.json (llama3 or Gemma4 proportional "
                         "rope); not compared")
            continue
        src = fmt.source_name(e.name)
        why = (f"its checkpoint tensor {src} is not in {report.a}" if src is not None
               else f"no checkpoint tensor maps to it ({fmt.name} format)")
        rows.append(TensorComparison(None, e.name, e.ggml_type.name, None, EXTRA, gguf_shape=e.shape,
                                     nbytes=e.nbytes, detail=why))
    return matched


def _pair_ggufs(report: CompareReport, a_path: str | Path, fa: GGUFFile, fmt_a: Format | None, b_path: str | Path,
                fb: GGUFFile, fmt_b: Format | None, files: Files) -> _Matched:
    """Stage 1, GGUF vs GGUF: rows and notes go into ``report``; returns the pairs to measure."""
    rows = report.tensors
    if (fmt_a is None) != (fmt_b is None):
        which = a_path if fmt_a is None else b_path
        report.notes.append(f"{which} is not a DFlash drafter; tensors are paired by identical names")
    by_b = {e.name: e for e in fb.tensors}
    used: set[str] = set()
    matched: _Matched = []

    def b_name(name: str) -> str:
        if fmt_a is None or fmt_b is None:
            return name
        src = fmt_a.source_name(name)
        return name if src is None else (fmt_b.gguf_name(src) or name)

    for e in fa.tensors:
        g = b_name(e.name)
        eb = by_b.get(g)
        if eb is None:
            rows.append(TensorComparison(e.name, g, None, e.shape, MISSING, source_type=e.ggml_type.name,
                                         detail=f"{g} is not in {b_path}"))
            continue
        used.add(g)
        if is_integer_table(e) or is_integer_table(eb):  # DSpark's d2t: ids, compared as integers
            rows.append(int_pair_row(e.name, e, fa, g, eb, fb))
            continue
        row = TensorComparison(e.name, g, eb.ggml_type.name, e.shape, OUT, source_type=e.ggml_type.name,
                               gguf_shape=eb.shape, nbytes=eb.nbytes)
        rows.append(row)
        matched.append((row, files.gguf_side(fa, e), files.gguf_side(fb, eb)))
    for e in fb.tensors:
        if e.name not in used:
            rows.append(TensorComparison(None, e.name, e.ggml_type.name, None, EXTRA, gguf_shape=e.shape,
                                         nbytes=e.nbytes, detail=f"no tensor of {a_path} maps to it"))
    return matched


def _measure(report: CompareReport, matched: _Matched, workers: int | None, progress: Callable[[int], None] | None,
             t0: float) -> CompareReport:
    """Stages 2 and 3, one path for both modes: measure every pair, diagnose the failures."""
    pairs = [make_pair(row, a, b, report.tolerances, report.requantized, report.mode == _CHECKPOINT_MODE)
             for row, a, b in matched]
    report.bytes_compared = run_pairs(pairs, workers or default_workers(), progress)
    diagnose_failures(pairs, report.notes)
    flag_outliers(report.tensors)
    report.seconds = time.perf_counter() - t0
    return report
