"""The one JSON document every verdict command prints with ``--format json`` (schema:
docs/verdict.schema.json), and the one-line verdict the human output ends with."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .findings import WARNING, Finding

SCHEMA_VERSION = 1
TOOL = "dflash-gguf"


@dataclass(frozen=True)
class Coverage:
    """The rules a stage judged one file by: JUnit lists each, passing or failing."""

    file: str
    stage: str
    rules: tuple[str, ...]


@dataclass
class Envelope:
    command: str  # check | check-instruct | compare-weights | parity | gate
    exit_code: int
    findings: list[Finding]
    files: tuple[str, ...]  # what was judged
    payload: Any = None  # the command's own report (``--json`` before the envelope)
    error: dict[str, str] | None = None  # {"type", "message"}: the command could not reach a verdict
    tool_version: str = ""
    summary: str = ""  # the one-line verdict; default: from the findings
    coverage: tuple[Coverage, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not self.summary:
            self.conclude(self.exit_code)

    def conclude(self, exit_code: int, summary: str = "") -> None:
        """Set the exit code and the verdict line (default: from the findings)."""
        self.exit_code = exit_code
        self.summary = summary or verdict_line(self.command, exit_code, self.findings, self.files, self.error)

    @property
    def verdict(self) -> str:
        return "error" if self.error is not None else "pass" if self.exit_code == 0 else "fail"

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "tool": TOOL, "tool_version": self.tool_version,
                "command": self.command, "exit_code": self.exit_code, "verdict": self.verdict,
                "summary": self.summary, "files": list(self.files),
                "findings": [f.to_json() for f in self.findings], "error": self.error, "payload": self.payload}


def verdict_line(command: str, code: int, findings: list[Finding], files: tuple[str, ...],
                 error: dict[str, str] | None = None) -> str:
    """``check: FAIL (exit 12): 2 errors; first: drafter-fc-width in d.gguf [tensor dflash.fc.weight]: …``:
    the verdict, the counts, and the first blocking finding in full, so the line alone says what to fix."""
    blocking = [f for f in findings if f.blocking]
    warnings = sum(f.severity == WARNING and f.waived is None for f in findings)
    waived = sum(f.waived is not None for f in findings)
    counts = [f"{len(files)} file{'s' * (len(files) != 1)}", _n(len(blocking), "error"), _n(warnings, "warning")]
    if waived:
        counts.append(f"{waived} waived")
    head = (f"{command}: PASS" if code == 0 else f"{command}: ERROR (exit {code})" if error is not None
            else f"{command}: FAIL (exit {code})")
    line = f"{head}: {', '.join(counts)}"
    first = blocking[0] if blocking else None
    if first is not None:
        where = f" [{first.where}]" if first.where else ""
        line += f"; first: {first.rule_id} in {Path(first.file).name}{where}: {_short(first.message)}"
    elif error is not None:
        line += f"; {error['type']}: {_short(error['message'])}"
    return line


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'s' * (k != 1)}"


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def display_path(path: str) -> str:
    """A path as CI systems want it: relative to the working directory (the checkout) when it is
    inside it, with forward slashes; otherwise absolute."""
    p = Path(path)
    try:
        rel = p.resolve().relative_to(Path(os.getcwd()).resolve())
    except (ValueError, OSError):
        return p.as_posix()
    return rel.as_posix()
