"""What every check returns (``Finding``), what ``run_checks`` returns (``CheckReport``), and
the three lists checks register in.

``read_header`` already refuses anything that cannot be trusted (truncated, overlapping,
out-of-bounds: ``GGUFFormatError``, exit 6). The checks run on a header that parsed and report
what would still make a runtime refuse or misread the file. They are plain functions in three
lists, so a new check is one decorated function:

    FILE_CHECKS   (header)          -> findings   one physical file (offsets, layout)
    MODEL_CHECKS  (model)           -> findings   the logical model: shard 1's keys + all tensors
    PAIR_CHECKS   (drafter, target) -> findings   with --target

A check registers when its module is imported; ``dflash_gguf/guards/__init__.py`` imports the
check modules in one fixed order, which is the order findings are reported in.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, Iterable

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
    category: str = "integrity"  # integrity | drafter | pairing | data


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

    def count(self, severity: Severity) -> int:
        return sum(f.severity == severity for f in self.findings)

    def has_errors(self, *categories: str) -> bool:
        return any(f.severity == Severity.ERROR and (not categories or f.category in categories)
                   for f in self.findings)


HeaderCheck = Callable[[GGUFHeader], Iterable[Finding]]
PairCheck = Callable[[GGUFHeader, GGUFHeader], Iterable[Finding]]
FILE_CHECKS: list[HeaderCheck] = []
MODEL_CHECKS: list[HeaderCheck] = []
PAIR_CHECKS: list[PairCheck] = []


def file_check(fn: HeaderCheck) -> HeaderCheck:
    FILE_CHECKS.append(fn)
    return fn


def model_check(fn: HeaderCheck) -> HeaderCheck:
    MODEL_CHECKS.append(fn)
    return fn


def pair_check(fn: PairCheck) -> PairCheck:
    PAIR_CHECKS.append(fn)
    return fn


def finding(h: GGUFHeader, sev: Severity, code: str, msg: str, where: str = "",
            category: str = "integrity") -> Finding:
    """A finding about file ``h``."""
    return Finding(sev, code, msg, where, str(h.path), category)


def as_int(v) -> int | None:
    """An integer metadata value, or None (a hostile file may put any type under any key)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None
