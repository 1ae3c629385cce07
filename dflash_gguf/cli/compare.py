"""`compare-weights`: checkpoint (or GGUF) vs GGUF, tensor by tensor, with a verdict.

Exit codes (docs/compare-weights.md): 0 every tensor bit-identical or within tolerance and every
constant equal; 20 at least one tensor out of tolerance, missing, extra or of the wrong shape, or a
constant that differs from what convert derives from config.json; otherwise the
error classes' codes (2 usage, 4 corrupt safetensors, 5 not found, 6 corrupt / non-drafter GGUF).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..compare.report import BIT_IDENTICAL, EXTRA, MISSING, OUT, SHAPE_MISMATCH, WITHIN, CompareReport
from ..errors import EXIT_MISMATCH, DflashError
from ._app import app
from ._common import console_class, byte_progress, esc, out
from ._verdict import Output, ReportOpt, VerdictFormatOpt, VerdictJsonOpt


_STYLE = {BIT_IDENTICAL: "green", WITHIN: "cyan", OUT: "red", MISSING: "red", EXTRA: "red", SHAPE_MISMATCH: "red"}
_RANK = {MISSING: 0, SHAPE_MISMATCH: 1, EXTRA: 2, OUT: 3, WITHIN: 4, BIT_IDENTICAL: 5}


ToleranceOpt = Annotated[Optional[list[str]], typer.Option(
    "--tolerance", help="Max relative RMS error: TYPE=VALUE for one ggml type (q4_K=0.05) or a bare VALUE for all; "
                        "repeatable. Replaces the default band (docs/compare-weights.md).")]
TopOpt = Annotated[Optional[int], typer.Option("--top", min=1, help="Show only the N worst tensors in the table.")]
NoRequantOpt = Annotated[bool, typer.Option(
    "--no-requantize", help="Do not re-encode the source into quantized types (faster for K-quants; no "
                            "bit-identical / expected-error answers for them).")]
WorkersOpt = Annotated[Optional[int], typer.Option("--workers", min=1, help="Threads (default: CPUs, at most 4).")]
NoConstantsOpt = Annotated[bool, typer.Option(
    "--no-constants", help="Compare tensors only, not the keys convert would derive from config.json "
                           "(theta, eps, taps, window, …).")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar (only on a terminal).")]


@app.command("compare-weights")
def compare_cmd(
    source: Annotated[Path, typer.Argument(help="The drafter checkpoint dir (safetensors + config.json), "
                                           "a Hugging Face repo id ORG/NAME[@REV] (docs/hub.md), or a GGUF A.")],
    gguf: Annotated[Path, typer.Argument(help="The GGUF to check (B).")],
    fmt: VerdictFormatOpt = None,
    json_out: VerdictJsonOpt = False,
    report: ReportOpt = None,
    tolerance: ToleranceOpt = None,
    top: TopOpt = None,
    no_requantize: NoRequantOpt = False,
    workers: WorkersOpt = None,
    no_constants: NoConstantsOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Is this GGUF a faithful copy of the checkpoint, and where does it lose precision?

    Pairs every checkpoint tensor with its GGUF tensor as convert's own plan does, checks shapes, and compares values: relative RMS error, max abs error and where, cosine, and the error of ggml's own encoding of the same data. Bytes equal to ggml's encoding are "bit-identical". Against a checkpoint, every key convert would derive from config.json (theta, rope scaling, eps, taps, block size, mask id, window, …) is compared with the file's too.

    Exit 0 = every tensor bit-identical or within tolerance and every constant equal; 20 = not. Details: docs/compare-weights.md.

    Example: dflash-gguf compare-weights z-lab/Qwen3-8B-DFlash-b16 drafter-q8_0.gguf
    """
    from ..compare import compare, parse_tolerances  # here: the engine imports numpy and gguf-py
    from ..hub import DRAFTER_FILES, resolve_dir
    from ..verdict import Envelope, sources
    from ..verdict.envelope import Coverage
    from ..verdict.rules import rules_of

    o = Output(fmt, json_out, report, (source, gguf))
    env = Envelope("compare-weights", 0, [], (str(gguf),),
                   coverage=(Coverage(str(gguf), "compare-weights", rules_of("compare-weights",
                                                                             constants=not no_constants)),))
    try:
        tolerances = parse_tolerances(tolerance or [])
        # A repo id (ORG/NAME[@REV]) becomes its cached snapshot; a local path stays as typed.
        from ..config.deepseek_v4 import hub_files

        source = resolve_dir(source, flag="compare-weights", allow_patterns=DRAFTER_FILES, progress=progress and o.text,
                             narrow=hub_files)
        total = _planned_bytes(gguf)
        with byte_progress(total, f"comparing {gguf.name}", enabled=progress and o.text) as advance:
            r = compare(source, gguf, tolerances=tolerances, requantize=not no_requantize, workers=workers,
                        progress=advance, constants=not no_constants)
    except DflashError as exc:
        env.findings.append(sources.failure("compare-weights", gguf, exc))
        env.payload = {"a": str(source), "b": str(gguf)}
        o.fail(env, exc)
        raise
    env.findings += sources.compare_findings(r, gguf)
    env.payload = r.to_json()
    env.conclude(0 if r.passed else EXIT_MISMATCH)
    o.emit(env, lambda: render(r, top))
    raise typer.Exit(env.exit_code)


def _planned_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _key(t) -> tuple:
    # failures first, then by error (largest first); NaN/inf sort as worst
    e = t.rel_rms
    e = math.inf if e is None or not math.isfinite(e) else e
    return (_RANK[t.status], -e, t.name)


def _num(v: float | None, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return format(v, spec)


def render(r: CompareReport, top: int | None = None) -> None:
    from rich import box
    from rich.table import Table

    what = (f"{r.a} → {r.b}  ({r.format} format)" if r.mode == "safetensors-gguf"
            else f"{r.a} ({r.a_format or 'not a drafter'}) vs {r.b} ({r.format or 'not a drafter'})")
    out.print(f"[bold]compare-weights[/bold] {esc(what)}", highlight=False)
    rows = sorted(r.tensors, key=_key)
    shown = rows[:top] if top else rows
    tt = Table(box=box.SIMPLE_HEAD, pad_edge=False,
               title=None if not top or top >= len(rows) else f"{top} worst of {len(rows)}")
    for c, kw in (("status", {"no_wrap": True}), ("tensor", {"no_wrap": True}), ("type", {"no_wrap": True}),
                  ("ne", {"no_wrap": True}), ("rel RMS", {"justify": "right"}), ("expected", {"justify": "right"}),
                  ("max abs", {"justify": "right"}), ("at", {"no_wrap": True}), ("cosine", {"justify": "right"}),
                  ("flags", {})):
        tt.add_column(c, **kw)
    for t in shown:
        style = _STYLE[t.status]
        tt.add_row(f"[{style}]{t.status}[/{style}]", esc(t.name), f"{t.source_type or '-'}→{t.type or '-'}",
                   "-" if t.ne is None else ",".join(map(str, t.ne)), _num(t.rel_rms), _num(t.expected_rel_rms),
                   _num(t.max_abs), "-" if not t.max_abs_index else ",".join(map(str, t.max_abs_index)),
                   _num(t.cosine, ".6f"), " ".join(t.flags))
    # A pipe or a log has no width to respect: print the table whole rather than squeezed into
    # rich's default 80 columns (Console.print cannot widen past the console's own width).
    (out if out.is_terminal else console_class()(highlight=False, emoji=False, width=220)).print(tt)
    for t in rows:
        if t.status not in (BIT_IDENTICAL, WITHIN) and t.detail:
            out.print(f"  {t.status}: {t.name}: {t.detail}", markup=False)
    for c in r.constants_differing:
        out.print(f"  constant {c.status}: {c.detail}", markup=False)
    for n in r.notes:
        out.print(f"  note: {n}", markup=False)
    style = "green" if r.passed else "red"
    out.print(f"[{style}]{r.summary}[/{style}]  ({r.bytes_compared / 1e6:,.1f} MB in {r.seconds:.2f} s)")
