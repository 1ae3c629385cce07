"""How the verdict commands (check, check-instruct, compare-weights, parity, gate) print their
result: ``--format text|json|github|junit|sarif`` on stdout (``--json`` is ``--format json``),
and ``--report FILE`` (repeatable) for a copy in the format its name says. The formats are built
by ``dflash_gguf.verdict``; docs/ci.md describes them."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Iterable, Optional

import typer

from ..errors import DflashError, UsageError
from ._app import package_version
from ._common import _json_default, error_line, out, write

if TYPE_CHECKING:
    from ..verdict import Envelope

FORMATS = ("text", "json", "github", "junit", "sarif")
# --report FILE: the format from the name (the longest suffix that matches)
REPORT_SUFFIXES = ((".sarif.json", "sarif"), (".sarif", "sarif"), (".json", "json"), (".xml", "junit"),
                   (".md", "github-summary"))

VerdictFormatOpt = Annotated[Optional[str], typer.Option(
    "--format", help="Output on stdout: text | json (one envelope, docs/verdict.schema.json) | github (workflow "
                     "commands + job summary) | junit | sarif. Default text.")]
VerdictJsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
ReportOpt = Annotated[Optional[list[Path]], typer.Option(
    "--report", help="Also write the result to FILE, in the format its name says: .json (the envelope), .sarif or "
                     ".sarif.json, .xml (JUnit), .md (the GitHub job-summary table). Repeatable.")]


class Output:
    """The chosen stdout format and report files, checked before the command does any work."""

    def __init__(self, fmt: str | None, json_flag: bool, reports: list[Path] | None,
                 inputs: Iterable[Path | str | None]) -> None:
        if fmt is not None and fmt.lower() not in FORMATS:
            raise UsageError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        fmt = None if fmt is None else fmt.lower()
        if json_flag and fmt not in (None, "json"):
            raise UsageError(f"--json and --format {fmt} disagree: --json is --format json")
        self.format = "json" if json_flag else fmt or "text"
        self.inputs = tuple(p for p in inputs if p is not None)
        self.reports = [(p, report_format(p)) for p in reports or []]
        from ..fileio.outputs import check_report

        for p, _ in self.reports:
            check_report(p, inputs=self.inputs)  # now: a wrong path must not cost the run

    @property
    def text(self) -> bool:
        return self.format == "text"

    def emit(self, env: Envelope, render_text: Callable[[], None]) -> None:
        """Write the reports, then stdout: the text rendering and the verdict line, or the format."""
        self._reports(env)
        if self.format == "text":
            render_text()
            out.print(env.summary, markup=False)
        else:
            self._stdout(env)

    def fail(self, env: Envelope, exc: DflashError) -> None:
        """No verdict (a file cannot be read): the one error line on stderr, and on stdout still
        the verdict line (text) or one document (every other format); the error's exit code."""
        env.error = {"type": type(exc).__name__, "message": str(exc)}
        env.conclude(exc.exit_code)
        self._reports(env)
        if self.format == "text" and isinstance(exc, UsageError):
            raise exc  # a usage line (a bad option, a missing extra) is the whole answer: main prints it
        error_line(exc)
        if self.format == "text":
            out.print(env.summary, markup=False)
        else:
            self._stdout(env)
        raise typer.Exit(exc.exit_code)

    def _reports(self, env: Envelope) -> None:
        from ..fileio.outputs import write_text

        for path, fmt in self.reports:
            write_text(path, render(env, fmt), inputs=self.inputs)

    def _stdout(self, env: Envelope) -> None:
        write(render(env, self.format))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if self.format == "github" and summary:
            from ..verdict.github import step_summary

            try:
                with open(summary, "a", encoding="utf-8") as f:
                    f.write(step_summary(env))
            except OSError as exc:
                error_line(f"GITHUB_STEP_SUMMARY {summary}: {exc.strerror or exc}; the job summary was not written")


def report_format(path: Path) -> str:
    name = path.name.lower()
    for suffix, fmt in REPORT_SUFFIXES:
        if name.endswith(suffix):
            return fmt
    raise UsageError(f"--report {path}: the name says no format; end it in .json, .sarif, .xml or .md")


def render(env: Envelope, fmt: str) -> str:
    if not env.tool_version:  # here, not for text: importlib.metadata costs start-up time
        env.tool_version = package_version()
    if fmt == "json":
        return json.dumps(env.to_json(), indent=2, default=_json_default) + "\n"
    if fmt == "github":
        from ..verdict.github import render as github

        return github(env)
    if fmt == "github-summary":
        from ..verdict.github import step_summary

        return step_summary(env)
    if fmt == "junit":
        from ..verdict.junit import render as junit

        return junit(env)
    from ..verdict.sarif import render as sarif

    return sarif(env)

