"""The diagnose report: each drafter's acceptance at every stage and the change from one stage to
the next; the verdict (the stage that loses the most acceptance beyond 1σ) and the
recommendation (the smallest file that keeps the full-precision drafter's acceptance) are
``verdict.py``'s.

The 1σ rule here: a change between two stages is real when it is larger than the larger of the
two stages' run-to-run sds (sample sd of the per-run means, pooled over the prompts). With one
run, or greedy runs that repeat exactly, both sds are 0 and any change counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..metrics.spread import Stat

SCHEMA = "dflash-gguf.diagnose/1"
STAGES = ("reference", "conversion", "target", "runtime-semantics", "runtime")
# What each stage changes from the one before (docs/diagnose.md).
CHANGES = {
    "reference": "the checkpoint drafter with the full-precision target (torch reference)",
    "conversion": "the drafter GGUF (converted, quantized) in place of the checkpoint",
    "target": "the target quantized as served: a quantized --target-gguf itself, or --target's weights round-tripped "
              "(--target-quant)",
    "runtime-semantics": "the runtime's rules emulated (--emulate)",
    "runtime": "the real runtime (llama-server, or a running vLLM / SGLang server): acceptance as the server counts it",
}
FULL_PRECISION = ("F32", "F16", "BF16")
FLAG_TOP1 = 0.9  # teacher-forced top-1 below this: the GGUF does not compute what the checkpoint computes


def number(stage: str) -> int:
    return STAGES.index(stage) + 1


@dataclass
class StageValue:
    """One drafter at one stage, pooled over every prompt (and run)."""

    mean_acceptance_length: Stat  # llama-server's "mean len" (1 + accepted / rounds), mean ± sd over runs
    acceptance_rate: Stat  # accepted / drafted
    per_position: list[float] | None = None  # share of rounds accepting more than i drafts
    steps: int | None = None  # drafting rounds counted
    logit_parity: dict[str, Any] | None = None  # stage 2: teacher-forced agreement with the checkpoint
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"mean_acceptance_length": self.mean_acceptance_length.to_json(),
                "acceptance_rate": self.acceptance_rate.to_json(), "per_position": self.per_position,
                "steps": self.steps, "logit_parity": self.logit_parity, "notes": self.notes}


@dataclass
class Lane:
    """One drafter followed through the stages: the checkpoint (``path`` None) or a GGUF."""

    name: str
    path: str | None = None
    origin: str = "given"  # checkpoint | given | converted (from the checkpoint) | quantized (by --quants)
    quant: str | None = None  # the GGUF's file type (general.file_type), e.g. BF16, Q4_K_M
    file_size: int | None = None
    values: dict[str, StageValue] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # stage -> why this drafter has no value there
    failed: dict[str, str] = field(default_factory=dict)  # stage -> how the runtime failed with it (a crash)

    @property
    def is_checkpoint(self) -> bool:
        return self.origin == "checkpoint"

    @property
    def full_precision(self) -> bool:
        return not self.is_checkpoint and self.quant in FULL_PRECISION

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "origin": self.origin, "quant": self.quant,
                "file_size": self.file_size, "full_precision": self.full_precision,
                "stages": {s: v.to_json() for s, v in self.values.items()}, "skipped": self.skipped,
                "failed": self.failed}


@dataclass
class StageRun:
    """Whether a stage ran, and if not why (no torch, no server, an option not given)."""

    name: str
    ran: bool
    why: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.name, "number": number(self.name), "changes": CHANGES[self.name], "ran": self.ran,
                "why": self.why, "notes": self.notes}


@dataclass(frozen=True)
class Delta:
    """One drafter's change in mean acceptance length into ``stage`` from ``since`` (the stage
    before it that was measured: for a GGUF's first stage, the checkpoint's reference)."""

    drafter: str
    stage: str
    since: str
    before: float
    after: float
    sigma: float  # the larger of the two stages' sds
    real: bool

    @property
    def delta(self) -> float:
        return self.after - self.before

    @property
    def loss(self) -> float:
        """How much acceptance length the stage lost, counted only when real."""
        return max(0.0, -self.delta) if self.real else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"drafter": self.drafter, "stage": self.stage, "since": self.since, "before": self.before,
                "after": self.after, "delta": self.delta, "sigma": self.sigma, "real": self.real, "loss": self.loss}


def change(a: Stat, b: Stat) -> tuple[float, bool]:
    """(σ, real) of b − a: σ is the larger of the two sds; with no spread any difference is real."""
    sigma = max(a.sd, b.sd)
    d = b.mean - a.mean
    return sigma, (abs(d) > sigma if sigma > 0 else d != 0)


@dataclass
class DiagnoseReport:
    settings: dict[str, Any]
    stages: list[StageRun]
    lanes: list[Lane]
    expect: float | None = None
    server: dict[str, Any] = field(default_factory=dict)  # llama-server's /props (build_info), stage 5

    def stage(self, name: str) -> StageRun | None:
        return next((s for s in self.stages if s.name == name), None)

    @property
    def checkpoint(self) -> Lane | None:
        return next((x for x in self.lanes if x.is_checkpoint), None)

    def deltas(self) -> list[Delta]:
        """Every drafter's change at every stage it was measured at, against the stage before."""
        out: list[Delta] = []
        ck = self.checkpoint
        for lane in self.lanes:
            prev: tuple[str, StageValue] | None = None
            if not lane.is_checkpoint and ck is not None and "reference" in ck.values:
                prev = ("reference", ck.values["reference"])  # a GGUF's chain starts at the checkpoint
            for s in STAGES:
                v = lane.values.get(s)
                if v is None:
                    continue
                if prev is not None:
                    a, b = prev[1].mean_acceptance_length, v.mean_acceptance_length
                    sigma, real = change(a, b)
                    out.append(Delta(lane.name, s, prev[0], a.mean, b.mean, sigma, real))
                prev = (s, v)
        return out

    def last_stage(self) -> str | None:
        """The last stage any GGUF drafter was measured at (runtime, else runtime-semantics, …)."""
        for s in reversed(STAGES[1:]):
            if any(s in x.values for x in self.lanes if not x.is_checkpoint):
                return s
        return None

    def expectation(self) -> dict[str, Any] | None:
        """--expect: the published mean acceptance length as the ceiling, against the best drafter
        at the reference and at the last stage."""
        if self.expect is None:
            return None
        out: dict[str, Any] = {"published": self.expect}
        ck = self.checkpoint
        if ck is not None and "reference" in ck.values:
            out["reference"] = ck.values["reference"].mean_acceptance_length.mean
        s = self.last_stage()
        if s is not None:
            best = max((x.values[s].mean_acceptance_length.mean for x in self.lanes if s in x.values), default=None)
            out["last_stage"], out["best_at_last_stage"] = s, best
        return out

    def to_json(self, verdict, recommendation) -> dict[str, Any]:
        """The payload, with the run's ``verdict.judge`` and ``verdict.recommend`` (computed once, by
        the caller: the verdict module reads this one, not the other way round)."""
        return {"schema": SCHEMA, "settings": self.settings, "stages": [s.to_json() for s in self.stages],
                "drafters": [x.to_json() for x in self.lanes], "deltas": [d.to_json() for d in self.deltas()],
                "verdict": verdict.to_json(), "recommendation": recommendation.to_json(),
                "expect": self.expectation(), "server": self.server}
