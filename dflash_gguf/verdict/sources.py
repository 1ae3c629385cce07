"""Each verdict command's result as ``Finding``s: the one translation ``gate`` and the commands'
own ``--format`` outputs share, so a finding has the same rule id and fingerprint wherever it is
reported (a waiver written from ``check --format github`` works in ``gate``)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .findings import ERROR, WARNING, Finding

if TYPE_CHECKING:
    from ..compare.report import CompareReport
    from ..errors import DflashError
    from ..guards.findings import CheckReport
    from ..guards.instruct import InstructVerdict
    from ..parity.gates import GateResult
    from ..parity.report import ParityReport

PAIRING = "pairing"  # check's pairing findings are their own stage (gate runs them as one)
NO_CHAT_TEMPLATE = "instruct-no-chat-template"


def failure(stage: str, path: Path | str, exc: DflashError) -> Finding:
    """A file the stage could not read at all (truncated, corrupt, missing): rule ``<stage>-<Error>``."""
    return Finding(stage, failure_rule(stage, type(exc).__name__), ERROR, str(path), str(exc))


def failure_rule(stage: str, error_class: str) -> str:
    return f"{stage}-{error_class}"


def check_findings(report: CheckReport) -> list[Finding]:
    return [Finding(PAIRING if f.category == "pairing" else "check", f.code, f.severity.value,
                    f.file or str(report.path), f.message, f.where) for f in report.findings]


def instruct_findings(path: Path | str, v: InstructVerdict, unknown: str = WARNING) -> list[Finding]:
    """``unknown``: the severity of an unknown verdict (``check-instruct`` fails on it, exit 11;
    ``gate`` warns)."""
    from ..guards.instruct import Verdict

    if v.verdict == Verdict.BASE:
        return [Finding("check-instruct", "instruct-verdict-base", ERROR, str(path),
                        f"the target is a base model: {v.reason} (--allow-base-target for a drafter trained against "
                        "a base model)")]
    if v.verdict == Verdict.UNKNOWN:
        return [Finding("check-instruct", "instruct-verdict-unknown", unknown, str(path),
                        f"instruct or base cannot be told from the metadata: {v.reason}")]
    return []


def no_chat_template(path: Path | str) -> Finding:
    return Finding("check-instruct", NO_CHAT_TEMPLATE, ERROR, str(path),
                   "the target has no chat template (tokenizer_config.json chat_template, chat_template.jinja/.json): "
                   "a base model? (--allow-base-target for a drafter trained against a base model)")


def compare_findings(report: CompareReport, path: Path | str) -> list[Finding]:
    out = [Finding("compare-weights", f"tensor-{t.status}", ERROR, str(path),
                   f"{t.name}: {t.status}" + (f": {t.detail}" if t.detail else ""), f"tensor {t.name}")
           for t in report.tensors if not t.passed]
    out += [Finding("compare-weights", f"constant-{c.status}", ERROR, str(path), c.detail, f"key {c.key}")
            for c in report.constants_differing]
    return out


def parity_findings(report: ParityReport, results: Iterable[GateResult], drafter: Path | str) -> list[Finding]:
    out = []
    if not report.lossless:
        out.append(Finding("parity", "parity-not-lossless", ERROR, str(drafter),
                           "at temperature 0 the speculative output differs from the target's greedy decoding"))
    out += [Finding("parity", f"parity-{g.gate}", ERROR, g.drafter, g.detail, f"drafter {Path(g.drafter).name}")
            for g in results if not g.passed]
    return out
