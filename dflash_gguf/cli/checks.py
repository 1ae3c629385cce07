"""`check-instruct` and `check`: CI gates over GGUF metadata, with stable exit codes.

Exit codes (docs/exit-codes.md, "checks"): 0 pass; 10 verdict base; 11 verdict unknown;
12 integrity / data findings of severity error; 13 pairing mismatch (--target); 6 corrupt or
truncated GGUF (before any verdict); 5 file not found; 7 target not found.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import EXIT_BASE, EXIT_FINDINGS, EXIT_PAIRING, EXIT_UNKNOWN, DflashError
from ._app import app
from ._common import byte_progress, error_line, esc, finding_line, out, print_json

if TYPE_CHECKING:  # the guards are imported when a check runs, not at the CLI's start-up
    from ..guards.findings import CheckReport, Finding
    from ..guards.instruct import InstructVerdict, Verdict


FileArg = Annotated[Path, typer.Argument(help="A GGUF file (for a sharded model, any of its shards).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def _fail_json(path: Path, exc: DflashError) -> None:
    """With --json, a failure is still a JSON document (CI parses stdout), then its exit code."""
    print_json({"file": str(path), "exit_code": exc.exit_code,
                "error": {"type": type(exc).__name__, "message": str(exc)}})
    error_line(exc)
    raise typer.Exit(exc.exit_code)


def verdict_exit_code(v: Verdict, allow_unknown: bool) -> int:
    from ..guards.instruct import Verdict

    if v == Verdict.INSTRUCT or (v == Verdict.UNKNOWN and allow_unknown):
        return 0
    return EXIT_BASE if v == Verdict.BASE else EXIT_UNKNOWN


@app.command("check-instruct")
def check_instruct_cmd(
    path: FileArg,
    json_out: JsonOpt = False,
    allow_unknown: Annotated[bool, typer.Option("--allow-unknown", help="Exit 0 when the verdict is unknown.")] = False,
) -> None:
    """Is this GGUF an instruct model? Exit 0 only for a complete instruct file.

    Decided from metadata alone (names, finetune, chat template, EOS token, ...); the rules
    and their precedence are in docs/check-instruct.md. Exit 10 = base, 11 = unknown
    (0 with --allow-unknown), 6 = truncated or corrupt file.

    Example: dflash-gguf check-instruct Qwen3-8B-Q8_0.gguf --json
    """
    from ..guards.instruct import classify  # here: see cli/__init__ (start-up imports no guards)
    from ..guards.shards import load_complete

    try:
        shards = load_complete(path)
    except DflashError as exc:
        if json_out:
            _fail_json(path, exc)
        raise
    v = classify(shards.model)
    code = verdict_exit_code(v.verdict, allow_unknown)
    if json_out:
        print_json(_instruct_json(path, shards.paths, v, code))
    else:
        _render_instruct(path, v, code)
    raise typer.Exit(code)


def _instruct_json(path: Path, shards: tuple[Path, ...], v: InstructVerdict, code: int) -> dict[str, Any]:
    return {
        "file": str(path),
        "shards": [str(p) for p in shards],
        "verdict": v.verdict.value,
        "reason": v.reason,
        "exit_code": code,
        "evidence": [{"rule": e.rule, "tier": e.tier, "leans": e.leans.value if e.leans else None,
                      "field": e.field, "value": e.value, "matched": e.matched, "description": e.description}
                     for e in v.evidence],
    }


def _render_instruct(path: Path, v: InstructVerdict, code: int) -> None:
    from ..guards.instruct import Verdict

    style = {"instruct": "green", "base": "red", "unknown": "yellow"}[v.verdict.value]
    out.print(f"[bold]{esc(path)}[/bold]: [{style}]{v.verdict.value}[/{style}] ({esc(v.reason)})")
    for e in v.evidence:
        lean = e.leans.value if e.leans else "info"
        out.print(f"  tier {e.tier}  {lean:<8}  {e.field} = {e.value}  ({e.description})", markup=False)
    if code and v.verdict == Verdict.UNKNOWN:
        out.print("  pass --allow-unknown to accept an unknown verdict", markup=False)


@app.command("check")
def check_cmd(
    path: FileArg,
    target: Annotated[Path | None, typer.Option("--target", help="The target GGUF the drafter will run with: "
                                                 "also check that the two fit together.")] = None,
    deep: Annotated[bool, typer.Option("--deep", help="Also read all tensor data: NaN/inf, all-zero tensors, "
                                       "quantized blocks with inf/NaN scales.")] = False,
    json_out: JsonOpt = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar for --deep "
                                           "(only on a terminal).")] = True,
) -> None:
    """Integrity of a GGUF: header-only by default (milliseconds, any file size).

    Exit 0 = no errors (warnings allowed); 12 = error findings; 13 = the drafter and
    --target do not fit; 6 = truncated or corrupt header. Findings: docs/check.md.

    Example: dflash-gguf check drafter.gguf --target Qwen3-8B-Q8_0.gguf --deep
    """
    from ..guards.run import run_checks  # here: see cli/__init__ (start-up imports no guards)

    try:
        if deep:
            from ..guards.deep_scan import planned_scan_bytes  # the data scan imports numpy

            total = planned_scan_bytes(path)
            with byte_progress(total, f"scanning {path.name}", enabled=progress and not json_out) as advance:
                report = run_checks(path, target=target, deep=True, progress=advance)
        else:
            report = run_checks(path, target=target)
    except DflashError as exc:
        if json_out:
            _fail_json(path, exc)
        raise
    code = report_exit_code(report)
    if json_out:
        print_json(_report_json(report, code))
    else:
        _render_report(report)
    raise typer.Exit(code)


def report_exit_code(r: CheckReport) -> int:
    # A broken file makes pairing moot, so its findings outrank pairing ones.
    if r.has_errors("integrity", "drafter", "data"):
        return EXIT_FINDINGS
    if r.has_errors("pairing"):
        return EXIT_PAIRING
    return 0


def _by_severity(findings: tuple[Finding, ...]) -> list[Finding]:
    """Errors first, then warnings, then infos (stable within each)."""
    from ..guards.findings import Severity

    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(findings, key=lambda f: order[f.severity])


def _report_json(r: CheckReport, code: int) -> dict[str, Any]:
    from ..guards.findings import Severity

    return {
        "file": str(r.path),
        "shards": [str(p) for p in r.shards],
        "target": None if r.target is None else str(r.target),
        "deep": r.deep,
        "exit_code": code,
        "summary": {"errors": r.count(Severity.ERROR), "warnings": r.count(Severity.WARNING),
                    "infos": r.count(Severity.INFO), "tensors": r.n_tensors, "file_bytes": r.total_bytes,
                    "bytes_scanned": r.bytes_scanned},
        "findings": [{"severity": f.severity.value, "code": f.code, "category": f.category,
                      "message": f.message, "where": f.where, "file": f.file}
                     for f in _by_severity(r.findings)],
    }


def _render_report(r: CheckReport) -> None:
    from ..guards.findings import Severity

    n_err, n_warn = r.count(Severity.ERROR), r.count(Severity.WARNING)
    mode = "header + data" if r.deep else "header only"
    shards = f", {len(r.shards)} shards" if len(r.shards) > 1 else ""
    status = "[green]OK[/green]" if not n_err else f"[red]{n_err} error{'s' * (n_err != 1)}[/red]"
    warn = f", [yellow]{n_warn} warning{'s' * (n_warn != 1)}[/yellow]" if n_warn else ""
    out.print(f"[bold]{esc(r.path)}[/bold]: {status}{warn} ({mode}; {r.n_tensors:,} tensors, "
              f"{r.total_bytes:,} bytes{shards})")
    for f in _by_severity(r.findings):
        out.print(finding_line(f), markup=False)
