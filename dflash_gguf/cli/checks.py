"""`check-instruct` and `check`: CI gates over GGUF metadata, with stable exit codes.

Exit codes (docs/exit-codes.md, "checks"): 0 pass; 10 verdict base; 11 verdict unknown;
12 integrity / data / --source findings of severity error; 13 pairing mismatch (--target); 6
corrupt or truncated GGUF (before any verdict); 5 file not found; 7 target not found; 3 / 5 / 9
a --source without a drafter config.json / that does not exist / that the Hub cannot resolve. Given several files,
the command exits with the most serious file's code: a file that cannot be read first, then
10 / 12, then 11 / 13.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import EXIT_BASE, EXIT_FINDINGS, EXIT_PAIRING, EXIT_UNKNOWN, DflashError
from ._app import app
from ._common import byte_progress, error_line, esc, finding_line, note, out
from ._verdict import Output, ReportOpt, VerdictFormatOpt, VerdictJsonOpt

if TYPE_CHECKING:  # the guards are imported when a check runs, not at the CLI's start-up
    from ..guards.findings import CheckReport, Finding
    from ..guards.instruct import InstructVerdict, Verdict
    from ..verdict import Envelope


FilesArg = Annotated[list[Path], typer.Argument(help="GGUF file(s) (for a sharded model, any of its shards).")]


def verdict_exit_code(v: Verdict, allow_unknown: bool) -> int:
    from ..guards.instruct import Verdict

    if v == Verdict.INSTRUCT or (v == Verdict.UNKNOWN and allow_unknown):
        return 0
    return EXIT_BASE if v == Verdict.BASE else EXIT_UNKNOWN


def worst(codes: list[int], order: tuple[int, ...]) -> int:
    """The most serious of the files' exit codes: a read failure (any code not in ``order``), then
    ``order``'s codes in turn."""
    bad = [c for c in codes if c]
    if not bad:
        return 0
    unread = [c for c in bad if c not in order]
    return unread[0] if unread else min(bad, key=order.index)


def _conclude(env: Envelope, code: int) -> None:
    """The exit code and verdict line; when no file could be judged at all, there is no verdict
    but the (last) error."""
    files = env.payload["files"]
    if files and all("error" in d for d in files):
        env.error = files[-1]["error"]
    env.conclude(code)


def _unreadable(env: Envelope, stage: str, path: Path, exc: DflashError, o: Output) -> int:
    """A file that cannot be read: its finding, its error line (stderr), its code."""
    from ..verdict import sources

    env.findings.append(sources.failure(stage, path, exc))
    env.payload["files"].append({"file": str(path), "exit_code": exc.exit_code,
                                 "error": {"type": type(exc).__name__, "message": str(exc)}})
    error_line(exc)
    return exc.exit_code


@app.command("check-instruct")
def check_instruct_cmd(
    paths: FilesArg,
    fmt: VerdictFormatOpt = None,
    json_out: VerdictJsonOpt = False,
    report: ReportOpt = None,
    allow_unknown: Annotated[bool, typer.Option("--allow-unknown", help="Exit 0 when the verdict is unknown.")] = False,
) -> None:
    """Is this GGUF an instruct model? Exit 0 only for a complete instruct file.

    Decided from metadata alone (names, finetune, chat template, EOS token, ...); the rules
    and their precedence are in docs/check-instruct.md. Exit 10 = base, 11 = unknown
    (0 with --allow-unknown), 6 = truncated or corrupt file. A drafter GGUF is not a target: it is
    skipped (exit 0), so a hook can pass every staged *.gguf.

    Example: dflash-gguf check-instruct Qwen3-8B-Q8_0.gguf --format github
    """
    from ..guards.instruct import classify  # here: see cli/__init__ (start-up imports no guards)
    from ..guards.pairing import DRAFTER_ARCH_RE
    from ..guards.shards import load_complete
    from ..verdict import ERROR, INFO, Envelope, sources
    from ..verdict.envelope import Coverage
    from ..verdict.rules import rules_of

    o = Output(fmt, json_out, report, paths)
    env = Envelope("check-instruct", 0, [], tuple(map(str, paths)), payload={"files": []})
    codes, shown = [], []
    for path in paths:
        try:
            shards = load_complete(path)
        except DflashError as exc:
            codes.append(_unreadable(env, "check-instruct", path, exc, o))
            continue
        arch = shards.model.arch
        if arch and DRAFTER_ARCH_RE.match(arch):
            env.payload["files"].append({"file": str(path), "verdict": "not-a-target", "exit_code": 0,
                                         "reason": f"architecture {arch} is a drafter"})
            if o.text:
                note(f"{path}: a drafter ({arch}), not a target: no instruct verdict")
            continue
        env.coverage += (Coverage(str(path), "check-instruct", rules_of("check-instruct")),)
        v = classify(shards.model)
        code = verdict_exit_code(v.verdict, allow_unknown)
        codes.append(code)
        env.findings += sources.instruct_findings(path, v, unknown=INFO if allow_unknown else ERROR)
        env.payload["files"].append(_instruct_json(path, shards.paths, v, code))
        shown.append((path, v, code))
    _conclude(env, worst(codes, (EXIT_BASE, EXIT_UNKNOWN)))
    o.emit(env, lambda: [_render_instruct(*s) for s in shown])
    raise typer.Exit(env.exit_code)


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
    paths: FilesArg,
    target: Annotated[Path | None, typer.Option("--target", help="The target GGUF the drafter will run with: "
                                                 "also check that the two fit together.")] = None,
    deep: Annotated[bool, typer.Option("--deep", help="Also read all tensor data: NaN/inf, all-zero tensors, "
                                       "quantized blocks with inf/NaN scales.")] = False,
    source: Annotated[str | None, typer.Option("--source", help="The drafter checkpoint the file was converted "
                                               "from: a dir or a Hugging Face repo id ORG/NAME[@REVISION] (only its "
                                               "config.json is fetched). Also check that the file's constants and "
                                               "tensors still match that config.json.")] = None,
    fmt: VerdictFormatOpt = None,
    json_out: VerdictJsonOpt = False,
    report: ReportOpt = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar for --deep "
                                           "(only on a terminal).")] = True,
) -> None:
    """Integrity of a GGUF: header-only by default (milliseconds, any file size).

    Exit 0 = no errors (warnings allowed); 12 = error findings (--source: the file no longer
    matches the checkpoint's config.json); 13 = the drafter and --target do not fit; 6 =
    truncated or corrupt header. Findings: docs/check.md.

    Example: dflash-gguf check drafter.gguf --target Qwen3-8B-Q8_0.gguf --deep
    Example: dflash-gguf check drafter.gguf --source z-lab/Qwen3-8B-DFlash-b16
    """
    from ..guards.run import run_checks  # here: see cli/__init__ (start-up imports no guards)
    from ..verdict import Envelope, sources
    from ..verdict.envelope import Coverage
    from ..verdict.rules import rules_of

    o = Output(fmt, json_out, report, (*paths, target))
    env = Envelope("check", 0, [], tuple(map(str, paths)), payload={"files": []})
    src = None
    if source is not None:  # resolved once for every file
        from ..guards.source import resolve_source

        try:
            src = resolve_source(source, progress=progress and o.text)
        except DflashError as exc:
            env.findings.append(sources.failure("check", source, exc))
            env.payload["source"] = {"arg": source, "error": {"type": type(exc).__name__, "message": str(exc)}}
            o.fail(env, exc)
            raise
        env.payload["source"] = src.to_json()
    codes, reports = [], []
    for path in paths:
        env.coverage += (Coverage(str(path), "check", rules_of("check", deep=deep, source=src is not None)),)
        if target is not None:
            env.coverage += (Coverage(str(path), "pairing", rules_of("pairing")),)
        try:
            if deep:
                from ..guards.deep_scan import planned_scan_bytes  # the data scan imports numpy

                total = planned_scan_bytes(path)
                with byte_progress(total, f"scanning {path.name}", enabled=progress and o.text) as advance:
                    r = run_checks(path, target=target, deep=True, progress=advance, source=src)
            else:
                r = run_checks(path, target=target, source=src)
        except DflashError as exc:
            codes.append(_unreadable(env, "check", path, exc, o))
            continue
        code = report_exit_code(r)
        codes.append(code)
        env.findings += sources.check_findings(r)
        env.payload["files"].append(_report_json(r, code))
        reports.append(r)
    _conclude(env, worst(codes, (EXIT_FINDINGS, EXIT_PAIRING)))
    o.emit(env, lambda: [_render_report(r) for r in reports])
    raise typer.Exit(env.exit_code)


def report_exit_code(r: CheckReport) -> int:
    # A broken file makes pairing moot, so its findings outrank pairing ones.
    if r.has_errors("integrity", "drafter", "data", "source"):
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

    doc = {
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
    if r.source is not None:
        doc["source"] = r.source.to_json()
    return doc


def _render_report(r: CheckReport) -> None:
    from ..guards.findings import Severity

    n_err, n_warn = r.count(Severity.ERROR), r.count(Severity.WARNING)
    mode = "header + data" if r.deep else "header only"
    shards = f", {len(r.shards)} shards" if len(r.shards) > 1 else ""
    status = "[green]OK[/green]" if not n_err else f"[red]{n_err} error{'s' * (n_err != 1)}[/red]"
    warn = f", [yellow]{n_warn} warning{'s' * (n_warn != 1)}[/yellow]" if n_warn else ""
    out.print(f"[bold]{esc(r.path)}[/bold]: {status}{warn} ({mode}; {r.n_tensors:,} tensors, "
              f"{r.total_bytes:,} bytes{shards})")
    if r.source is not None:
        out.print(f"  source   {r.source.summary}", markup=False)
    for f in _by_severity(r.findings):
        out.print(finding_line(f), markup=False)
