"""``Finding``: one problem a verdict command found, with a stable rule id and a fingerprint that
a gate policy can waive it by and that SARIF and GitHub use to follow it from run to run."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass(frozen=True)
class Finding:
    stage: str  # the command that found it: check | pairing | check-instruct | compare-weights | parity
    rule_id: str  # that command's stable code (check's finding codes, "constant-differs", "parity-min_top1", …)
    severity: str  # error | warning | info (after a gate's policy)
    file: str  # the file (or dir) it is about
    message: str
    where: str = ""  # "key dflash.rope.freq_base", "tensor blk.0.attn_q.weight"
    waived: str | None = None  # a gate policy's justification, when waived

    @property
    def fingerprint(self) -> str:
        """Stable across runs and machines: the rule, the file's name (not its directory) and
        where in it; not the message, whose numbers may move."""
        key = "\0".join((self.stage, self.rule_id, Path(self.file).name, self.where))
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR and self.waived is None

    def with_severity(self, severity: str) -> "Finding":
        return replace(self, severity=severity)

    def to_json(self) -> dict:
        return {"stage": self.stage, "rule_id": self.rule_id, "severity": self.severity, "file": self.file,
                "where": self.where, "message": self.message, "fingerprint": self.fingerprint,
                "waived": self.waived}
