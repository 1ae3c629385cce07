"""What ``gate`` reports: one ``GateFinding`` per problem, from any stage, with a stable rule id
and a fingerprint a policy can waive it by; the stages' outcomes; the verdict."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class GateFinding:
    stage: str  # check | check-instruct | pairing | compare-weights | parity
    rule_id: str  # the stage's own stable code (check's finding codes, "constant-differs", "gate-min_top1", …)
    severity: str  # error | warning | info (after the policy)
    file: str  # the file (or dir) it is about
    message: str
    where: str = ""  # "key dflash.rope.freq_base", "tensor blk.0.attn_q.weight"
    waived: str | None = None  # the policy's justification, when waived

    @property
    def fingerprint(self) -> str:
        """Stable across runs and machines: the rule, the file's name (not its directory) and
        where in it; not the message, whose numbers may move."""
        key = "\0".join((self.stage, self.rule_id, Path(self.file).name, self.where))
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR and self.waived is None

    def with_severity(self, severity: str) -> "GateFinding":
        return replace(self, severity=severity)

    def to_json(self) -> dict:
        return {"stage": self.stage, "rule_id": self.rule_id, "severity": self.severity, "file": self.file,
                "where": self.where, "message": self.message, "fingerprint": self.fingerprint,
                "waived": self.waived}


@dataclass
class StageResult:
    name: str
    status: str  # passed | failed | skipped
    summary: str  # one line
    findings: list[GateFinding] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"stage": self.name, "status": self.status, "summary": self.summary,
                "findings": [f.fingerprint for f in self.findings]}


@dataclass
class GateReport:
    stages: list[StageResult]

    @property
    def findings(self) -> list[GateFinding]:
        return [f for s in self.stages for f in s.findings]

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
