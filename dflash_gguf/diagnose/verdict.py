"""The verdict and the recommendation of a diagnose report.

The verdict is the stage of the largest real loss of mean acceptance length over every drafter
(the 1σ rule of ``report``), with the facts that explain it; the recommendation is the smallest
drafter file whose mean acceptance length at the last stage measured is within 1σ of the best
full-precision file's.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .report import FLAG_TOP1, STAGES, Delta, Lane, StageValue, change, number

if TYPE_CHECKING:
    from .report import DiagnoseReport


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



def judge(report: DiagnoseReport) -> Verdict:
    """The stage of the largest real loss of mean acceptance length over every drafter, its facts,
    every other stage's largest loss, and the runtime's failures."""
    losses: dict[str, Delta] = {}
    for d in report.deltas():
        if d.loss > 0 and (d.stage not in losses or d.loss > losses[d.stage].loss):
            losses[d.stage] = d
    failures = {x.name: x.failed["runtime"] for x in report.lanes if "runtime" in x.failed}
    crashed = [f"stage 5 (runtime) fails with {name}: {why}" for name, why in failures.items()]
    if not losses and failures:  # a runtime that cannot run a drafter loses all of it
        name = next(iter(failures))
        lane = next(x for x in report.lanes if x.name == name)
        kept = [s for s in STAGES[1:4] if s in lane.values]
        facts = []
        if kept:
            al = lane.values[kept[-1]].mean_acceptance_length.mean
            facts.append(_not_your_file(report, f"the emulated runtime semantics run {name} ({al:.3f} at stage "
                                                f"{number(kept[-1])})"))
        return Verdict("runtime", name, 0.0, None, facts + crashed[1:], failures=failures)  # [0] is the text
    if not losses:
        return Verdict(None, facts=_no_loss_facts(report))
    # the largest loss; on a tie the earlier stage, where the later ones inherit it from
    worst = max(losses.values(), key=lambda d: (d.loss, -number(d.stage)))
    v = Verdict(worst.stage, worst.drafter, worst.loss, worst, losses=dict(sorted(
        losses.items(), key=lambda kv: number(kv[0]))), failures=failures)
    v.facts = _facts(report, worst) + [f"also lost at stage {number(s)} ({s}): {d.drafter} {d.delta:+.3f}"
                                     for s, d in v.losses.items() if d is not worst] + crashed
    return v

def _no_loss_facts(report: DiagnoseReport) -> list[str]:
    facts = []
    ck = report.checkpoint
    if report.expect is not None and ck is not None and "reference" in ck.values:
        ref = ck.values["reference"].mean_acceptance_length.mean
        if ref < report.expect:
            facts.append(f"the reference itself reaches {ref:.3f} of the published {report.expect:g}: the gap is "
                         "upstream of every stage here (the prompts, the target, or the checkpoint)")
    return facts


def recommend(report: DiagnoseReport) -> Recommendation:
    """The smallest GGUF whose mean acceptance length at the last stage is within 1σ of the
    best full-precision GGUF's there (or, with none, of the checkpoint's at that stage or the
    latest one before it that was measured)."""
    s = report.last_stage()
    if s is None:
        return Recommendation(None, text="no GGUF drafter was measured: nothing to recommend")
    ggufs = [x for x in report.lanes if not x.is_checkpoint and s in x.values]
    full = [x for x in ggufs if x.full_precision]
    base_stage: str | None = s
    if full:
        base = max(full, key=lambda x: x.values[s].mean_acceptance_length.mean)
    else:
        ck = report.checkpoint
        earlier = [t for t in STAGES[:number(s)] if ck is not None and t in ck.values]
        if not earlier:
            return Recommendation(s, text=f"no full-precision GGUF (F32/F16/BF16) measured at stage {number(s)} "
                                          f"({s}) to compare with: give one with --drafter-gguf, or use --quants")
        base, base_stage = ck, earlier[-1]
    b = base.values[base_stage].mean_acceptance_length
    keep = []
    for x in ggufs:
        a = x.values[s].mean_acceptance_length
        _sigma, real = change(b, a)
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


def _facts(report: DiagnoseReport, d: Delta) -> list[str]:
    """What explains the loss ``d``: the stage's own facts about the drafter that lost it."""
    lane = next(x for x in report.lanes if x.name == d.drafter)
    v = lane.values[d.stage]
    deltas = report.deltas()
    if d.stage == "conversion":
        return _conversion_facts(report, lane, v, deltas)
    if d.stage == "target":
        t3 = report.settings.get("target_stage3")  # which target stage 3 ran with (target.py)
        facts = [t3["label"] if t3 else f"the target's weights round-tripped through {report.settings.get('target_quant')}"]
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
    other = _other_engine(report)
    if other:
        facts.append(other)
    elif d.since == "runtime-semantics" and kept:
        facts.append(_not_your_file(report, f"the runtime loses {d.loss:.3f} mean acceptance length while the "
                                            f"emulated runtime semantics keep it ({d.before:.3f})"))
    elif d.since != "runtime-semantics":
        facts.append(f"compared with stage {number(d.since)} ({d.since}): the runtime's semantics were not emulated "
                     "for this drafter, so the loss may be the runtime's rules or the runtime's code")
    if report.server.get("build_info"):
        facts.append(f"llama-server build {report.server['build_info']}")
    return facts + v.notes


def _not_your_file(report: DiagnoseReport, what: str) -> str:
    """A runtime that loses (or fails on) what stage 4 keeps: a runtime bug, unless llama-server ran
    with --server-args, flags stage 4 does not model, which are then named instead."""
    args = report.settings.get("server_args") or ()
    if not args:
        return f"runtime bug, not your file: {what}"
    return (f"not your file: {what}, and llama-server ran with --server-args {shlex.join(args)!r}, which stage 4 "
            "does not model: rerun without them to tell them from a runtime bug")


def _other_engine(report: DiagnoseReport) -> str | None:
    """When stage 5 is another runtime than the one stage 4 emulates (a vLLM or SGLang server):
    stage 4 cannot tell its rules from its code."""
    engine, emulate = report.settings.get("engine", "llama.cpp"), report.settings.get("emulate", "llama.cpp")
    if engine == emulate:
        return None
    return (f"the runtime is {engine}, stage 4 emulates {emulate}'s rules: the loss may be {engine}'s rules or its "
            "code, not necessarily your file")


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
