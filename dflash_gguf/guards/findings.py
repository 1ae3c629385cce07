"""What every check returns (``Finding``) and what ``run_checks`` returns (``CheckReport``).

``read_header`` already refuses anything that cannot be trusted (truncated, overlapping,
out-of-bounds: ``GGUFFormatError``, exit 6). The checks run on a header that parsed and report
what would still make a runtime refuse or misread the file. They are plain functions, listed
in report order in ``run.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..fileio.gguf_header import GGUFHeader


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str          # stable id, documented in docs/check.md
    message: str       # one line: what, and how to fix
    where: str = ""    # "tensor blk.0.attn_q.weight", "key general.alignment", "byte 1,234"
    file: str = ""
    category: str = "integrity"  # integrity | drafter | source | pairing | data


@dataclass(frozen=True)
class CheckReport:
    path: Path
    findings: tuple[Finding, ...]
    shards: tuple[Path, ...]
    target: Path | None
    deep: bool
    n_tensors: int
    total_bytes: int
    bytes_scanned: int
    # with --source: a guards.source.SourceComparison, the file against the checkpoint's config.json
    # (typed loosely: source.py builds its findings from this module, not the other way round)
    source: Any = None

    def count(self, severity: Severity) -> int:
        return sum(f.severity == severity for f in self.findings)

    def has_errors(self, *categories: str) -> bool:
        return any(f.severity == Severity.ERROR and (not categories or f.category in categories)
                   for f in self.findings)


def finding(h: GGUFHeader, sev: Severity, code: str, msg: str, where: str = "",
            category: str = "integrity") -> Finding:
    """A finding about file ``h``."""
    return Finding(sev, code, msg, where, str(h.path), category)


def as_int(v) -> int | None:
    """An integer metadata value, or None (a hostile file may put any type under any key)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None
