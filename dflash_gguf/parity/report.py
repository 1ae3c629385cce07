"""The parity report: per-drafter summaries (mean ± sd over runs), per-prompt and whole-run
reports, and their JSON form."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..metrics.spread import Stat, beyond_sigma


@dataclass
class RunSummary:
    """One drafter's free-running results on one prompt (run 0 in detail, all runs as stats)."""

    name: str
    format: str | None
    new_ids: list[int]
    steps: list[dict[str, Any]]
    acceptance_lengths: list[int]
    mean_acceptance_length: Stat
    acceptance_rate: Stat  # accepted / drafted, as llama.cpp reports it
    tokens_per_s: Stat
    lossless: bool | None  # temperature 0 only: equals the target's greedy decoding
    logit_parity: dict[str, Any] | None = None
    delta_vs_reference: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name, "format": self.format, "new_ids": self.new_ids, "steps": self.steps,
            "acceptance_lengths": self.acceptance_lengths,
            "mean_acceptance_length": self.mean_acceptance_length.mean,
            "mean_acceptance_length_sd": self.mean_acceptance_length.sd,
            "acceptance_rate": self.acceptance_rate.mean, "acceptance_rate_sd": self.acceptance_rate.sd,
            "tokens_per_s": self.tokens_per_s.mean, "tokens_per_s_sd": self.tokens_per_s.sd,
            "lossless": self.lossless,
        }
        if self.logit_parity is not None:
            out["logit_parity"] = self.logit_parity
        if self.delta_vs_reference is not None:
            out["delta_vs_reference"] = self.delta_vs_reference
        if self.notes:
            out["notes"] = self.notes
        return out


@dataclass
class PromptReport:
    prompt_ids: list[int]
    reference: RunSummary
    drafters: list[RunSummary]
    emulated: RunSummary | None
    greedy_ids: list[int] | None


@dataclass
class ParityReport:
    settings: dict[str, Any]
    prompts: list[PromptReport]
    device: str
    dump: str | None = None
    against: dict[str, Any] | None = None

    @property
    def lossless(self) -> bool:
        return all(r.lossless is not False for p in self.prompts for r in [p.reference, *p.drafters])

    def to_json(self) -> dict[str, Any]:
        first = self.prompts[0]
        out: dict[str, Any] = {
            "prompt_ids": first.prompt_ids,
            "reference": first.reference.to_json(),
            "drafters": [d.to_json() for d in first.drafters],
            "settings": self.settings,
            "device": self.device,
            "lossless": self.lossless,
            "acceptance_metrics": {
                "acceptance_length": "tokens committed per draft-verify round including the bonus token (z-lab's "
                                     "'acceptance length', 1..drafts per round + 1: block_size for DFlash, "
                                     "block_size + 1 for a DSpark head that samples from its anchor)",
                "acceptance_rate": "accepted draft tokens / drafted tokens (llama.cpp's 'draft acceptance rate')",
            },
        }
        if first.emulated is not None:
            out["emulated"] = first.emulated.to_json()
        if len(self.prompts) > 1:
            out["prompts"] = [{"prompt_ids": p.prompt_ids, "reference": p.reference.to_json(),
                               "drafters": [d.to_json() for d in p.drafters],
                               **({"emulated": p.emulated.to_json()} if p.emulated else {})} for p in self.prompts]
        if self.dump:
            out["dump"] = self.dump
        if self.against is not None:
            out["against"] = self.against
        return out


def summarize(name: str, fmt: str | None, runs, greedy_ids) -> RunSummary:
    """One drafter's runs of ``reference.generate`` on one prompt as a RunSummary."""
    r0 = runs[0]
    lossless = None if greedy_ids is None else all(r.new_ids == greedy_ids for r in runs)
    return RunSummary(
        name=name, format=fmt, new_ids=list(r0.new_ids),
        steps=[_step(s) for s in r0.steps],
        acceptance_lengths=list(r0.acceptance_lengths),
        mean_acceptance_length=Stat.of([r.mean_acceptance_length for r in runs]),
        acceptance_rate=Stat.of([_rate(r) for r in runs]),
        tokens_per_s=Stat.of([r.tokens_per_s for r in runs]),
        lossless=lossless,
    )


def _step(s) -> dict[str, Any]:
    out = {"draft": list(s.draft), "accepted": int(s.accepted), "bonus": int(s.bonus)}
    if getattr(s, "confidence", None) is not None:  # DSpark: the confidence head, one value per draft
        out["confidence"] = [round(c, 6) for c in s.confidence]
    return out


def _rate(result) -> float:
    drafted = sum(len(s.draft) for s in result.steps)
    accepted = sum(min(s.accepted, len(s.draft)) for s in result.steps)
    return accepted / drafted if drafted else 0.0


def delta(a: RunSummary, b: RunSummary) -> dict[str, Any]:
    """b − a on mean acceptance length, called real only beyond 1σ of the run-to-run spread."""
    d = beyond_sigma(a.mean_acceptance_length, b.mean_acceptance_length)
    return {"mean_acceptance_length": d["delta"], "sigma": d["sigma"], "real": d["real"]}
