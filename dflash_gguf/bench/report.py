"""The bench report: per configuration (drafter × suite × chat mode) the acceptance numbers
and speed, each mean ± sd over runs, the speed-up against the no-draft baseline, and the >1σ
verdict between every pair of drafters; and its JSON form (docs/bench.md has the schema).

Acceptance comes from the shared ``metrics`` module, so ``bench`` and ``parity`` define every
number the same way. Where the engine gives the steps themselves (llama.cpp's trace) everything
is computed from them; where it gives per-position counters (vLLM) or a histogram (SGLang) the
steps are rebuilt from those (an accepted run is a prefix, so the two determine each other), but
their order is lost and drift is not reported; with totals only, rate and mean length are.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..metrics.acceptance import Acceptance
from ..metrics.spread import Stat, beyond_sigma
from .run import BenchResult, ConfigResult, RequestRecord

SCHEMA = "dflash-gguf.bench/1"


@dataclass
class RunNumbers:
    """One run of one configuration."""

    tokens_per_s: float
    predicted: int
    acceptance: dict[str, Any] | None  # Acceptance.to_json(), or the totals-only subset


@dataclass
class Row:
    config: str
    suite: str
    mode: str
    drafter: str | None
    spec_type: str | None
    runs: list[RunNumbers]
    source: str | None                   # trace | metrics | histogram | totals | None (no drafting)
    tokens_per_s: Stat
    acceptance_rate: Stat | None = None
    mean_length: Stat | None = None
    per_position: list[Stat] | None = None
    histogram: list[int] | None = None   # steps accepting exactly k drafts, summed over runs
    drift: dict[str, Stat] | None = None
    speedup: Stat | None = None
    same_as_baseline: tuple[int, int] | None = None  # (same text, compared), temperature 0 only
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def st(s: Stat | None):
            return None if s is None else s.to_json()

        return {
            "config": self.config, "suite": self.suite, "mode": self.mode, "drafter": self.drafter,
            "spec_type": self.spec_type, "source": self.source,
            "acceptance_rate": st(self.acceptance_rate), "mean_acceptance_length": st(self.mean_length),
            "per_position": None if self.per_position is None else [s.to_json() for s in self.per_position],
            "histogram": self.histogram,
            "drift": None if self.drift is None else {k: v.to_json() for k, v in self.drift.items()},
            "tokens_per_s": st(self.tokens_per_s), "speedup": st(self.speedup),
            "same_as_baseline": None if self.same_as_baseline is None else
            {"same": self.same_as_baseline[0], "compared": self.same_as_baseline[1]},
            "runs": [{"tokens_per_s": r.tokens_per_s, "predicted_tokens": r.predicted, "acceptance": r.acceptance}
                     for r in self.runs],
            "notes": self.notes,
        }


@dataclass
class BenchReport:
    result: BenchResult
    rows: list[Row]
    comparisons: list[dict[str, Any]]
    plots: list[str] = field(default_factory=list)

    def to_json(self, with_requests: bool = True) -> dict[str, Any]:
        r = self.result
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "settings": r.settings,
            "server": r.server_info,
            "suites": [{"name": s.name, "source": s.source, "prompts": len(s.prompts)} for s in r.suites],
            "modes": [m.label for m in r.modes],
            "configurations": [_config_json(c) for c in r.configs],
            "rows": [row.to_json() for row in self.rows],
            "comparisons": self.comparisons,
            "plots": self.plots,
            "notes": r.notes,
        }
        if with_requests:
            out["requests"] = [{"config": c.name, **_request_json(q)} for c in r.configs for q in c.records]
        return out


def build_report(result: BenchResult) -> BenchReport:
    rows = []
    for c in result.configs:
        for suite, mode in dict.fromkeys((q.suite, q.mode) for q in c.records):  # run order
            recs = [q for q in c.records if q.suite == suite and q.mode == mode]
            rows.append(_row(c, suite, mode, recs, result))
    # suite, then mode, then configuration: the rows to compare sit together, the baseline first
    groups = list(dict.fromkeys((r.suite, r.mode) for r in rows))
    rows.sort(key=lambda r: groups.index((r.suite, r.mode)))
    _add_baseline_numbers(rows, result)
    return BenchReport(result, rows, _comparisons(rows))


def _row(c: ConfigResult, suite: str, mode: str, recs: list[RequestRecord], result: BenchResult) -> Row:
    runs_idx = sorted({q.run for q in recs})
    by_run = [[q for q in recs if q.run == i] for i in runs_idx]
    numbers, accs, source = [], [], None
    for rr in by_run:
        acc, source = _acceptance(rr, c.n_draft)
        numbers.append(RunNumbers(_tps(rr), sum(q.predicted_n for q in rr), acc))
        accs.append(acc)
    row = Row(config=c.name, suite=suite, mode=mode, drafter=None if c.drafter is None else str(c.drafter),
              spec_type=c.spec_type, runs=numbers, source=source, tokens_per_s=Stat.of([n.tokens_per_s for n in numbers]),
              notes=list(c.notes))
    if source is None:
        if c.drafter is not None:
            row.notes.append("the server drafted nothing with this drafter (speculative decoding off?)")
        return row
    row.acceptance_rate = Stat.of([a["acceptance_rate"] for a in accs])
    if all(a.get("mean_acceptance_length") is not None for a in accs):
        row.mean_length = Stat.of([a["mean_acceptance_length"] for a in accs])
    if all(a.get("per_position") for a in accs):
        width = max(len(a["per_position"]) for a in accs)
        row.per_position = [Stat.of([(a["per_position"] + [0.0] * width)[i] for a in accs]) for i in range(width)]
    if all(a.get("histogram") for a in accs):
        width = max(len(a["histogram"]) for a in accs)
        row.histogram = [sum((a["histogram"] + [0] * width)[k] for a in accs) for k in range(width)]
    if all(a.get("drift") for a in accs):
        row.drift = {k: Stat.of([a["drift"][k] for a in accs]) for k in ("first", "last", "delta")}
    return row


def _tps(recs: list[RequestRecord]) -> float:
    """Tokens per second over a run: all generated tokens over all decode time (token-weighted,
    so a long answer counts for what it costs)."""
    secs = sum((q.decode_s if q.decode_s else q.wall_s) for q in recs)
    return sum(q.predicted_n for q in recs) / secs if secs > 0 else 0.0


def _acceptance(recs: list[RequestRecord], n_draft: int | None) -> tuple[dict[str, Any] | None, str | None]:
    drafted = sum(q.drafted or 0 for q in recs)
    if drafted == 0 and not any(q.steps for q in recs):
        return None, None
    if all(q.steps is not None for q in recs):
        return Acceptance.of([q.steps for q in recs], n_draft).to_json(), "trace"
    accepted = sum(q.accepted or 0 for q in recs)
    steps = sum(q.verify_steps or 0 for q in recs) if all(q.verify_steps is not None for q in recs) else None
    rebuilt = _rebuilt_steps(recs)
    out: dict[str, Any] = {"steps": steps, "drafted": drafted, "accepted": accepted,
                           "acceptance_rate": accepted / drafted if drafted else 0.0,
                           "mean_acceptance_length": 1.0 + accepted / steps if steps else None}
    if rebuilt is not None:
        acc = Acceptance.of([rebuilt[0]], rebuilt[1])
        out["per_position"], out["histogram"] = acc.per_position(), acc.histogram()
        return out, rebuilt[2]
    return out, "totals"


def _rebuilt_steps(recs: list[RequestRecord]) -> tuple[list[tuple[int, int]], int, str] | None:
    """Steps as a multiset from vLLM per-position counts or SGLang histograms: the number of
    steps accepting exactly k drafts is count(reached k) − count(reached k + 1)."""
    if all(q.per_position is not None and q.verify_steps is not None for q in recs):
        width = max(len(q.per_position) for q in recs)
        steps: list[tuple[int, int]] = []
        for q in recs:
            reach = [q.verify_steps] + q.per_position + [0] * (width - len(q.per_position)) + [0]
            for k in range(width + 1):
                steps += [(width, k)] * max(reach[k] - reach[k + 1], 0)
        return steps, width, "metrics"
    if all(q.histogram is not None for q in recs):
        width = max(len(q.histogram) for q in recs) - 1
        steps = [(width, k) for q in recs for k, n in enumerate(q.histogram) for _ in range(n)]
        return steps, width, "histogram"
    return None


def _add_baseline_numbers(rows: list[Row], result: BenchResult) -> None:
    base = {(r.suite, r.mode): r for r in rows if r.config == "baseline"}
    greedy = result.settings.get("temperature", 0) == 0
    texts = {}
    for c in result.configs:
        if c.is_baseline:
            texts = {(q.suite, q.mode, q.run, q.prompt_id): q.text for q in c.records}
    for r in rows:
        b = base.get((r.suite, r.mode))
        if b is None or r is b:
            continue
        if b.tokens_per_s.mean > 0:
            # each run against the baseline's mean: the spread shown is this configuration's own
            r.speedup = Stat.of([n.tokens_per_s / b.tokens_per_s.mean for n in r.runs])
        if greedy and texts:
            c = next(c for c in result.configs if c.name == r.config)
            pairs = [(q.text, texts.get((q.suite, q.mode, q.run, q.prompt_id))) for q in c.records
                     if q.suite == r.suite and q.mode == r.mode]
            pairs = [(a, b2) for a, b2 in pairs if b2 is not None]
            r.same_as_baseline = (sum(a == b2 for a, b2 in pairs), len(pairs))


def _comparisons(rows: list[Row]) -> list[dict[str, Any]]:
    """Every pair of drafters on the same suite and mode: b − a, real only beyond 1σ."""
    out = []
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        if r.source is not None:
            groups.setdefault((r.suite, r.mode), []).append(r)
    for (suite, mode), rs in groups.items():
        for a, b in itertools.combinations(rs, 2):
            d: dict[str, Any] = {"suite": suite, "mode": mode, "a": a.config, "b": b.config}
            for key in ("mean_length", "acceptance_rate", "tokens_per_s"):
                sa, sb = getattr(a, key), getattr(b, key)
                d["mean_acceptance_length" if key == "mean_length" else key] = (
                    None if sa is None or sb is None else beyond_sigma(sa, sb))
            out.append(d)
    return out


def _config_json(c: ConfigResult) -> dict[str, Any]:
    return {"name": c.name, "drafter": None if c.drafter is None else str(c.drafter), "url": c.url,
            "spec_type": c.spec_type, "n_draft": c.n_draft, "model_bytes": c.model_bytes, "argv": c.argv,
            "notes": c.notes}


def _request_json(q: RequestRecord) -> dict[str, Any]:
    return {"suite": q.suite, "mode": q.mode, "run": q.run, "prompt_id": q.prompt_id, "prompt_n": q.prompt_n,
            "predicted_n": q.predicted_n, "decode_s": q.decode_s, "wall_s": q.wall_s, "drafted": q.drafted,
            "accepted": q.accepted, "verify_steps": q.verify_steps,
            "steps": None if q.steps is None else [list(s) for s in q.steps],
            "per_position": q.per_position, "histogram": q.histogram, "text": q.text}
