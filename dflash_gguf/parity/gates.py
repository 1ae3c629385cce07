"""Thresholds a parity run can fail, so a CI job can refuse a drafter on numbers, not by reading them.

Each gate is judged per GGUF drafter, pooled over every prompt (and run):

- ``min_acceptance_length``: its mean acceptance length (z-lab's, bonus token included) at least X
  (with no GGUF drafter given, the reference's: is the checkpoint itself any good with this target);
- ``max_acceptance_drop``: its mean acceptance length at most a fraction F below the reference
  drafter's (0.1 = 10 %); with ``--runs`` > 1 a drop counts only beyond 1σ of the run-to-run spread
  (``metrics.spread.beyond_sigma``), so noise does not fail a release;
- ``min_top1``: its teacher-forced top-1 agreement with the reference drafter at least P (the
  same positions, the same inputs: how often the GGUF picks the checkpoint's token).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..metrics.kl import KLStats
from ..metrics.spread import Stat, beyond_sigma
from .report import ParityReport, RunSummary


@dataclass(frozen=True)
class Gates:
    min_acceptance_length: float | None = None
    max_acceptance_drop: float | None = None
    min_top1: float | None = None

    def __post_init__(self) -> None:
        checks = (("--min-acceptance-length", self.min_acceptance_length, 0.0, math.inf),
                  ("--max-acceptance-drop", self.max_acceptance_drop, 0.0, 1.0),
                  ("--min-top1", self.min_top1, 0.0, 1.0))
        for flag, v, lo, hi in checks:
            if v is not None and not (math.isfinite(v) and lo <= v <= hi):
                raise UsageError(f"{flag} {v}: expected a number in [{lo:g}, {hi:g}]")

    @property
    def active(self) -> tuple[str, ...]:
        """The gates that are set, by name ("min_top1", …)."""
        return tuple(k for k, v in vars(self).items() if v is not None)


@dataclass(frozen=True)
class GateResult:
    gate: str  # "min_acceptance_length" | "max_acceptance_drop" | "min_top1"
    drafter: str
    value: float
    limit: float
    passed: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "drafter": self.drafter, "value": self.value, "limit": self.limit,
                "passed": self.passed, "detail": self.detail}


def pooled_acceptance_length(rows: list[RunSummary]) -> Stat:
    """Mean acceptance length over the prompts, per run (run r = the mean of every prompt's run r)."""
    n_runs = min(len(r.mean_acceptance_length.values) for r in rows)
    return Stat.of([sum(r.mean_acceptance_length.values[i] for r in rows) / len(rows) for i in range(n_runs)])


def evaluate(report: ParityReport, gates: Gates) -> list[GateResult]:
    """Every gate on every drafter it applies to; an empty list when no gate is set."""
    out: list[GateResult] = []
    ref_rows = [p.reference for p in report.prompts]
    ref = pooled_acceptance_length(ref_rows)
    n_drafters = len(report.prompts[0].drafters)
    subjects = [[p.drafters[i] for p in report.prompts] for i in range(n_drafters)] or [ref_rows]
    for rows in subjects:
        name = rows[0].name
        al = pooled_acceptance_length(rows)
        if gates.min_acceptance_length is not None:
            limit = gates.min_acceptance_length
            ok = al.mean >= limit
            out.append(GateResult("min_acceptance_length", name, al.mean, limit, ok,
                                  f"mean acceptance length {al.mean:.3f} {'≥' if ok else '<'} {limit:g}"))
        if rows is ref_rows:
            continue
        if gates.max_acceptance_drop is not None:
            limit = gates.max_acceptance_drop
            drop = (ref.mean - al.mean) / ref.mean if ref.mean > 0 else 0.0
            real = beyond_sigma(ref, al)["real"] if len(al.values) > 1 else True
            ok = drop <= limit or not real
            why = "" if real or drop <= limit else ", within 1σ of the run-to-run spread"
            out.append(GateResult("max_acceptance_drop", name, drop, limit, ok,
                                  f"mean acceptance length {al.mean:.3f} vs the reference's {ref.mean:.3f}: "
                                  f"{drop:+.1%} drop, {'≤' if drop <= limit else '>'} {limit:.1%}{why}"))
        if gates.min_top1 is not None:
            parts = [r.logit_parity.divergence for r in rows if r.logit_parity is not None]
            if parts:
                top1 = KLStats.pool(parts).same_top
                limit = gates.min_top1
                ok = top1 >= limit
                out.append(GateResult("min_top1", name, top1, limit, ok,
                                      f"teacher-forced top-1 agreement {top1:.4f} {'≥' if ok else '<'} {limit:g}"))
    return out
