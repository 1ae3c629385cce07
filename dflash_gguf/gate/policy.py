"""A gate's policy, from an optional TOML file (``--policy``): parity thresholds, per-rule
severity overrides, and waivers of single findings, each with its written justification.

    [thresholds]                       # parity's gates (defaults below)
    max_acceptance_drop = 0.1
    min_top1 = 0.9
    min_acceptance_length = 2.0        # off unless set

    [severity]                         # rule id -> error | warning | info | off
    drafter-swa-pattern = "warning"

    [[waiver]]                         # one finding, by the fingerprint the gate printed
    fingerprint = "3f2a9c0d1b7e4a55"
    justification = "trained with SWA off; the runtime ignores the key"

Anything else in the file is refused (a typo must not silently widen the gate).
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..verdict.findings import SEVERITIES, Finding

OFF = "off"
DEFAULT_THRESHOLDS = {"max_acceptance_drop": 0.1, "min_top1": 0.9, "min_acceptance_length": None}
_SECTIONS = {"thresholds", "severity", "waiver"}
MAX_POLICY_BYTES = 1 << 20


@dataclass(frozen=True)
class Policy:
    thresholds: dict[str, float | None] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    severity: dict[str, str] = field(default_factory=dict)  # rule id -> severity or "off"
    waivers: dict[str, str] = field(default_factory=dict)  # fingerprint -> justification
    path: Path | None = None

    def apply(self, findings: list[Finding]) -> list[Finding]:
        """Severity overrides first (``off`` drops the finding), then waivers."""
        out = []
        for f in findings:
            sev = self.severity.get(f.rule_id, f.severity)
            if sev == OFF:
                continue
            f = f.with_severity(sev)
            why = self.waivers.get(f.fingerprint)
            if why is not None:
                f = Finding(f.stage, f.rule_id, f.severity, f.file, f.message, f.where, waived=why)
            out.append(f)
        return out


def load_policy(path: str | Path | None) -> Policy:
    """The default policy, or the one in ``path``.

    Raises:
        UsageError: unreadable TOML, an unknown section or threshold, a severity that is not one
            of error / warning / info / off, a waiver without a fingerprint or a justification.
    """
    if path is None:
        return Policy()
    p = Path(path)
    try:
        if p.stat().st_size > MAX_POLICY_BYTES:  # a policy is a few lines: refuse to read a huge file whole
            raise UsageError(f"--policy {p}: {p.stat().st_size:,} bytes; a policy file is at most "
                             f"{MAX_POLICY_BYTES:,} bytes")
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--policy {p}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--policy {p}: not a readable TOML file ({exc})") from None
    unknown = set(doc) - _SECTIONS
    if unknown:
        raise UsageError(f"--policy {p}: unknown section(s) {', '.join(sorted(unknown))}; "
                         f"allowed: {', '.join(sorted(_SECTIONS))}")
    thresholds = dict(DEFAULT_THRESHOLDS)
    for k, v in _table(doc, "thresholds", p).items():
        if k not in thresholds:
            raise UsageError(f"--policy {p}: unknown threshold {k!r}; allowed: {', '.join(thresholds)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise UsageError(f"--policy {p}: thresholds.{k} = {v!r}: expected a non-negative number")
        thresholds[k] = float(v)
    severity = {}
    for rule, sev in _table(doc, "severity", p).items():
        if sev not in (*SEVERITIES, OFF):
            raise UsageError(f"--policy {p}: severity.{rule} = {sev!r}: expected one of "
                             f"{', '.join((*SEVERITIES, OFF))}")
        severity[rule] = sev
    waivers = {}
    entries = doc.get("waiver", [])
    if not isinstance(entries, list):
        raise UsageError(f"--policy {p}: waivers are [[waiver]] tables, each with fingerprint and justification")
    for i, w in enumerate(entries, 1):
        fp = w.get("fingerprint") if isinstance(w, dict) else None
        why = w.get("justification") if isinstance(w, dict) else None
        if not isinstance(fp, str) or not fp.strip():
            raise UsageError(f"--policy {p}: waiver {i} has no fingerprint (copy it from the gate's output)")
        if not isinstance(why, str) or not why.strip():
            raise UsageError(f"--policy {p}: waiver {i} ({fp}) has no justification; a waiver must say why "
                             "the finding is acceptable")
        waivers[fp.strip()] = why.strip()
    return Policy(thresholds, severity, waivers, p)


def _table(doc: dict, name: str, p: Path) -> dict:
    t = doc.get(name, {})
    if not isinstance(t, dict):
        raise UsageError(f"--policy {p}: [{name}] must be a table")
    return t
