"""The diagnose report: each drafter's acceptance at every stage, the change from one stage to
the next, the verdict (the stage that loses the most acceptance beyond 1σ) and the
recommendation (the smallest file that keeps the full-precision drafter's acceptance).

The 1σ rule here: a change between two stages is real when it is larger than the larger of the
two stages' run-to-run sds (sample sd of the per-run means, pooled over the prompts). With one
run, or greedy runs that repeat exactly, both sds are 0 and any change counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..metrics.spread import Stat

SCHEMA = "dflash-gguf.diagnose/1"
STAGES = ("reference", "conversion", "target", "runtime-semantics", "runtime")
# What each stage changes from the one before (docs/diagnose.md).
CHANGES = {
    "reference": "the checkpoint drafter with the full-precision target (torch reference)",
    "conversion": "the drafter GGUF (converted, quantized) in place of the checkpoint",
    "target": "the target's weights round-tripped through a quantization (--target-quant)",
    "runtime-semantics": "the runtime's rules emulated (--emulate)",
    "runtime": "the real runtime (llama-server): acceptance as the server counts it",
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
class Verdict:
    stage: str | None  # conversion | target | runtime-semantics | runtime | None (nothing lost beyond 1σ)
    drafter: str | None = None
    loss: float = 0.0
    delta: Delta | None = None
    facts: list[str] = field(default_factory=list)
    losses: dict[str, Delta] = field(default_factory=dict)  # the largest real loss of every stage that lost
    failures: dict[str, str] = field(default_factory=dict)  # drafter -> how the runtime failed with it

    @property
    def text(self) -> str:
        if self.stage is None:
            return "no stage loses mean acceptance length beyond 1σ"
        d = self.delta
        if d is None:  # nothing lost beyond 1σ where measured, but the runtime failed
            name, why = next(iter(self.failures.items()))
            why = " ".join(why.split())
            return f"stage 5 (runtime) fails with {name}: {why if len(why) <= 160 else why[:159] + '…'}"
        return (f"stage {number(self.stage)} ({self.stage}) loses the most: {self.drafter} "
                f"{d.before:.3f} → {d.after:.3f} mean acceptance length ({d.delta:+.3f}, 1σ {d.sigma:.3f})")

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "drafter": self.drafter, "loss": self.loss, "text": self.text,
                "change": None if self.delta is None else self.delta.to_json(), "facts": self.facts,
                "losses": {s: d.to_json() for s, d in self.losses.items()}, "failures": self.failures}


@dataclass
class Recommendation:
    stage: str | None  # the stage the drafters were compared at
    drafter: Lane | None = None
    baseline: Lane | None = None
    baseline_stage: str | None = None
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        def lane(x: Lane | None, s: str | None) -> dict[str, Any] | None:
            if x is None or s is None:
                return None
            return {"name": x.name, "path": x.path, "origin": x.origin, "quant": x.quant, "file_size": x.file_size,
                    "mean_acceptance_length": x.values[s].mean_acceptance_length.to_json()}

        return {"stage": self.stage, "drafter": lane(self.drafter, self.stage),
                "baseline": lane(self.baseline, self.baseline_stage), "baseline_stage": self.baseline_stage,
                "text": self.text}


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

    def verdict(self) -> Verdict:
        losses: dict[str, Delta] = {}
        for d in self.deltas():
            if d.loss > 0 and (d.stage not in losses or d.loss > losses[d.stage].loss):
                losses[d.stage] = d
        failures = {x.name: x.failed["runtime"] for x in self.lanes if "runtime" in x.failed}
        crashed = [f"stage 5 (runtime) fails with {name}: {why}" for name, why in failures.items()]
        if not losses and failures:  # a runtime that cannot run a drafter loses all of it
            name = next(iter(failures))
            lane = next(x for x in self.lanes if x.name == name)
            kept = [s for s in STAGES[1:4] if s in lane.values]
            facts = ([f"runtime bug, not your file: the emulated runtime semantics run {name} "
                      f"({lane.values[kept[-1]].mean_acceptance_length.mean:.3f} at stage {number(kept[-1])})"]
                     if kept else [])
            return Verdict("runtime", name, 0.0, None, facts + crashed[1:], failures=failures)  # [0] is the text
        if not losses:
            return Verdict(None, facts=self._no_loss_facts())
        # the largest loss; on a tie the earlier stage, where the later ones inherit it from
        worst = max(losses.values(), key=lambda d: (d.loss, -number(d.stage)))
        v = Verdict(worst.stage, worst.drafter, worst.loss, worst, losses=dict(sorted(
            losses.items(), key=lambda kv: number(kv[0]))), failures=failures)
        v.facts = _facts(self, worst) + [f"also lost at stage {number(s)} ({s}): {d.drafter} {d.delta:+.3f}"
                                         for s, d in v.losses.items() if d is not worst] + crashed
        return v

    def _no_loss_facts(self) -> list[str]:
        facts = []
        ck = self.checkpoint
        if self.expect is not None and ck is not None and "reference" in ck.values:
            ref = ck.values["reference"].mean_acceptance_length.mean
            if ref < self.expect:
                facts.append(f"the reference itself reaches {ref:.3f} of the published {self.expect:g}: the gap is "
                             "upstream of every stage here (the prompts, the target, or the checkpoint)")
        return facts

    def last_stage(self) -> str | None:
        """The last stage any GGUF drafter was measured at (runtime, else runtime-semantics, …)."""
        for s in reversed(STAGES[1:]):
            if any(s in x.values for x in self.lanes if not x.is_checkpoint):
                return s
        return None

    def recommendation(self) -> Recommendation:
        """The smallest GGUF whose mean acceptance length at the last stage is within 1σ of the
        best full-precision GGUF's there (or, with none, of the checkpoint's at that stage or the
        latest one before it that was measured)."""
        s = self.last_stage()
        if s is None:
            return Recommendation(None, text="no GGUF drafter was measured: nothing to recommend")
        ggufs = [x for x in self.lanes if not x.is_checkpoint and s in x.values]
        full = [x for x in ggufs if x.full_precision]
        base_stage: str | None = s
        if full:
            base = max(full, key=lambda x: x.values[s].mean_acceptance_length.mean)
        else:
            ck = self.checkpoint
            earlier = [t for t in STAGES[:number(s)] if ck is not None and t in ck.values]
            if not earlier:
                return Recommendation(s, text=f"no full-precision GGUF (F32/F16/BF16) measured at stage {number(s)} "
                                              f"({s}) to compare with: give one with --drafter-gguf, or use --quants")
            base, base_stage = ck, earlier[-1]
        b = base.values[base_stage].mean_acceptance_length
        keep = []
        for x in ggufs:
            a = x.values[s].mean_acceptance_length
            sigma, real = change(b, a)
            if not (real and a.mean < b.mean):
                keep.append(x)
        # the smallest file; at equal size the higher acceptance
        best = min(keep, default=None, key=lambda x: (x.file_size if x.file_size is not None else math.inf,
                                                      -x.values[s].mean_acceptance_length.mean))
        where = f"stage {number(s)} ({s})"
        base_txt = (f"the full-precision {base.name} ({b.mean:.3f})" if not base.is_checkpoint
                    else f"the checkpoint at stage {number(base_stage)} ({base_stage}, {b.mean:.3f})")
        if best is None:
            return Recommendation(s, None, base, base_stage,
                                  f"no GGUF keeps the acceptance of {base_txt} at {where}")
        v = best.values[s].mean_acceptance_length
        size_txt = "" if best.file_size is None else f", {best.file_size:,} bytes"
        how = ("the full-precision file itself: no smaller file keeps its acceptance" if best is base
               else f"within 1σ of {base_txt}")
        return Recommendation(s, best, base, base_stage,
                              f"{best.name} ({best.quant or '?'}{size_txt}): mean acceptance length {v.mean:.3f} at "
                              f"{where}, {how}")

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

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "settings": self.settings, "stages": [s.to_json() for s in self.stages],
                "drafters": [x.to_json() for x in self.lanes], "deltas": [d.to_json() for d in self.deltas()],
                "verdict": self.verdict().to_json(), "recommendation": self.recommendation().to_json(),
                "expect": self.expectation(), "server": self.server}


def _facts(report: DiagnoseReport, d: Delta) -> list[str]:
    """What explains the loss ``d``: the stage's own facts about the drafter that lost it."""
    lane = next(x for x in report.lanes if x.name == d.drafter)
    v = lane.values[d.stage]
    deltas = report.deltas()
    if d.stage == "conversion":
        return _conversion_facts(report, lane, v, deltas)
    if d.stage == "target":
        facts = [f"the target's weights round-tripped through {report.settings.get('target_quant')}"]
        ck = report.checkpoint
        ck_delta = next((x for x in deltas if ck is not None and x.drafter == ck.name and x.stage == "target"), None)
        if lane.is_checkpoint:
            facts.append("the checkpoint drafter loses it: the target's quantization, not a drafter file")
        elif ck_delta is not None:
            facts.append(f"the checkpoint drafter {'loses' if ck_delta.loss else 'keeps'} it with the same target "
                         f"({ck_delta.delta:+.3f}): " + ("the target's quantization, not the drafter file" if ck_delta.loss
                                                         else "this drafter file is sensitive to the quantized target"))
        return facts + v.notes
    if d.stage == "runtime-semantics":
        return [f"{report.settings.get('emulate')} semantics: {n}" for n in v.notes] or [
            f"{report.settings.get('emulate')} semantics differ from the reference's for this drafter"]
    # runtime: did the stage before it (the emulated semantics, where measured) keep the acceptance?
    facts = []
    prior = next((x for x in deltas if x.drafter == d.drafter and x.stage == d.since), None)
    kept = prior is None or not prior.loss
    if d.since == "runtime-semantics" and kept:
        facts.append(f"runtime bug, not your file: the runtime loses {d.loss:.3f} mean acceptance length while the "
                     f"emulated runtime semantics keep it ({d.before:.3f})")
    elif d.since != "runtime-semantics":
        facts.append(f"compared with stage {number(d.since)} ({d.since}): the runtime's semantics were not emulated "
                     "for this drafter, so the loss may be the runtime's rules or the runtime's code")
    if report.server.get("build_info"):
        facts.append(f"llama-server build {report.server['build_info']}")
    return facts + v.notes


def _conversion_facts(report: DiagnoseReport, lane: Lane, v: StageValue, deltas: list[Delta]) -> list[str]:
    facts = [f"{lane.name}: {lane.quant or 'unknown file type'} ({lane.origin})"]
    full = [x for x in report.lanes if x.full_precision and "conversion" in x.values and x is not lane]
    conv = {x.drafter: x for x in deltas if x.stage == "conversion"}
    if not lane.full_precision and full:
        kept = [x for x in full if x.name in conv and not conv[x.name].loss]
        if kept:
            facts.append(f"the full-precision {kept[0].name} keeps it ({conv[kept[0].name].after:.3f}): the loss is the "
                         f"quantization to {lane.quant}")
        else:
            facts.append("the full-precision GGUF loses it too: the converter or the file's constants, "
                         "not the quantization")
    elif lane.full_precision:
        facts.append("a full-precision file loses it: the converter or the file's constants, not the quantization")
    lp = v.logit_parity
    if lp:
        facts.append(f"teacher-forced against the checkpoint: top-1 {lp['top1']:.4f}, mean KL {lp['mean_kl']:.3g} "
                     f"over {lp['positions']} positions, max |Δlogit| {lp['max_abs']:.3g}"
                     + (f" (top-1 < {FLAG_TOP1}: the GGUF does not compute what the checkpoint computes)"
                        if lp["top1"] < FLAG_TOP1 else ""))
    return facts + v.notes  # the constants that differ from config.json, as the GGUF loader lists them
