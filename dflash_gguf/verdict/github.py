"""GitHub Actions output: workflow commands that annotate the run (``::error file=…,title=…::…``)
and a markdown table for the job summary (``$GITHUB_STEP_SUMMARY``).

Escaping follows the workflow-command spec (the runner's ``ActionCommand`` escaping): in the
message ``%``, CR and LF; in property values also ``:`` and ``,``.
"""
from __future__ import annotations

from pathlib import Path

from .envelope import Envelope, display_path
from .findings import ERROR, INFO, WARNING, Finding

_COMMAND = {ERROR: "error", WARNING: "warning", INFO: "notice"}


def escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def annotation(f: Finding) -> str:
    command = "notice" if f.waived is not None else _COMMAND[f.severity]
    where = f" [{f.where}]" if f.where else ""
    waived = f" (waived: {f.waived})" if f.waived is not None else ""
    title = f"dflash-gguf {f.stage} {f.rule_id}"
    return (f"::{command} file={escape_property(display_path(f.file))},title={escape_property(title)}::"
            f"{escape_data(f'{f.message}{where}{waived} (fingerprint {f.fingerprint})')}")


def render(env: Envelope) -> str:
    """One annotation per finding, then the verdict line (plain: never a workflow command)."""
    lines = [annotation(f) for f in env.findings]
    summary = env.summary
    if summary.startswith("::"):  # cannot happen for our lines; a file name never makes a command
        summary = " " + summary
    return "\n".join([*lines, escape_data(summary)]) + "\n"


def step_summary(env: Envelope) -> str:
    """The job summary: the verdict, then a table of the findings."""
    mark = {"pass": "✅", "fail": "❌", "error": "⚠️"}[env.verdict]
    lines = [f"### {mark} dflash-gguf {env.command}: {env.verdict.upper()} (exit {env.exit_code})", "",
             _cell(env.summary), ""]
    if env.findings:
        lines += ["| severity | stage | rule | file | where | message | fingerprint |",
                  "|---|---|---|---|---|---|---|"]
        for f in env.findings:
            sev = f"{f.severity} (waived)" if f.waived is not None else f.severity
            lines.append("| " + " | ".join(_cell(x) for x in (sev, f.stage, f.rule_id, Path(f.file).name, f.where,
                                                             f.message, f.fingerprint)) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _cell(s: str) -> str:
    """Untrusted text in a markdown table cell: one line, no column breaks, no raw HTML."""
    s = " ".join(str(s).split())
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
