"""What ``gate`` reports: the stages' outcomes, each with its ``Finding``s, and the verdict."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..verdict.envelope import Coverage
from ..verdict.findings import WARNING, Finding

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class StageResult:
    name: str
    status: str  # passed | failed | skipped
    summary: str  # one line
    findings: list[Finding] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)  # the rules it judged each file by

    def to_json(self) -> dict:
        return {"stage": self.name, "status": self.status, "summary": self.summary,
                "findings": [f.fingerprint for f in self.findings]}


@dataclass
class GateReport:
    stages: list[StageResult]

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.stages for f in s.findings]

    @property
    def coverage(self) -> tuple[Coverage, ...]:
        return tuple(c for s in self.stages for c in s.coverage)

    @property
    def passed(self) -> bool:
        return not any(f.blocking for f in self.findings)

    @property
    def summary(self) -> str:
        fs = self.findings
        errors = sum(f.blocking for f in fs)
        warnings = sum(f.severity == WARNING and f.waived is None for f in fs)
        waived = sum(f.waived is not None for f in fs)
        ran = sum(s.status != SKIPPED for s in self.stages)
        skipped = [s.name for s in self.stages if s.status == SKIPPED]
        line = (f"gate: {'PASS' if self.passed else 'FAIL'}: {ran} stages ran, {errors} errors, {warnings} warnings"
                + (f", {waived} waived" if waived else ""))
        if skipped:
            line += f" (skipped: {', '.join(skipped)})"
        failing = sorted({s.name for s in self.stages for f in s.findings if f.blocking})
        if failing:
            line += f"; failed at {', '.join(failing)}"
        return line

    def to_json(self) -> dict:
        return {"verdict": "pass" if self.passed else "fail", "summary": self.summary,
                "stages": [s.to_json() for s in self.stages], "findings": [f.to_json() for f in self.findings]}
