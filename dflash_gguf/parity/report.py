"""The parity report: per-drafter summaries (mean ± sd over runs), per-prompt and whole-run
reports, and their JSON form."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..metrics.acceptance import Acceptance
from ..metrics.kl import KLStats
from ..metrics.spread import Stat, beyond_sigma

# (drafted, accepted) per drafting round, per run: what Acceptance is built from
RunSteps = list[list[tuple[int, int]]]


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
    run_steps: RunSteps = field(default_factory=list)  # every run's drafting rounds
    n_draft: int = 0  # the most drafts one round holds (block size − 1; DSpark from its anchor: block size)
    target_divergence: KLStats | None = None  # KL(target ‖ drafter) over every run's drafted positions
    logit_parity: Any = None  # parity.logits.LogitParity (GGUF drafters)
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
            "acceptance": acceptance_json([self.run_steps], self.n_draft),
        }
        if self.target_divergence is not None:
            out["target_divergence"] = self.target_divergence.to_json()
        if self.logit_parity is not None:
            out["logit_parity"] = self.logit_parity.to_json()
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
            "acceptance_metrics": ACCEPTANCE_METRICS,
            "pooled": self.pooled(),
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


    def pooled(self) -> dict[str, Any]:
        """Each drafter's acceptance and divergences pooled over every prompt (and run)."""
        def rows(pick) -> list[RunSummary]:
            return [pick(p) for p in self.prompts]

        out: dict[str, Any] = {"prompts": len(self.prompts), "reference": pooled_json(rows(lambda p: p.reference))}
        out["drafters"] = [pooled_json(rows(lambda p, i=i: p.drafters[i])) for i in range(len(self.prompts[0].drafters))]
        if self.prompts[0].emulated is not None:
            out["emulated"] = pooled_json(rows(lambda p: p.emulated))
        return out


ACCEPTANCE_METRICS = {
    "acceptance_length": "tokens committed per draft-verify round including the bonus token (z-lab's "
                         "'acceptance length', 1..drafts per round + 1: block_size for DFlash, "
                         "block_size + 1 for a DSpark head that samples from its anchor; cut by max_new_tokens "
                         "and stop tokens)",
    "acceptance_rate": "accepted draft tokens / drafted tokens (llama.cpp's 'draft acceptance rate')",
    "acceptance": "llama-server's statistics (metrics.acceptance) over the rounds that drafted: "
                  "mean_acceptance_length = 1 + accepted / steps (its 'mean len', not cut by max_new_tokens), "
                  "per_position[i] = share of rounds accepting more than i drafts, histogram[k] = rounds accepting "
                  "exactly k, drift = rate over the first vs the last half of each run's rounds; 'runs': mean ± sd "
                  "over runs",
    "target_divergence": "KL(target ‖ drafter) in nats per drafted position, target verify logits vs draft logits "
                         "at temperature 1, summarized as llama-perplexity --kl-divergence; same_top = argmax agrees",
    "logit_parity.kl_divergence": "KL(reference drafter ‖ GGUF drafter) per drafted position, teacher-forced",
}


def acceptance_json(prompts: Sequence[RunSteps], n_draft: int) -> dict[str, Any]:
    """Acceptance over every (prompt, run) as one request each; with several runs, also each run's
    rate and mean length (pooled over the prompts) as mean ± sd."""
    out = Acceptance.of([run for runs in prompts for run in runs], n_draft).to_json()
    n_runs = min((len(runs) for runs in prompts), default=0)
    if n_runs > 1:
        per_run = [Acceptance.of([runs[r] for runs in prompts], n_draft) for r in range(n_runs)]
        out["runs"] = {"acceptance_rate": Stat.of([a.rate for a in per_run]).to_json(),
                       "mean_acceptance_length": Stat.of([a.mean_length for a in per_run]).to_json()}
    return out


def pooled_json(rows: Sequence[RunSummary]) -> dict[str, Any]:
    """One drafter's rows (one per prompt) pooled: acceptance, KL against the target, and for a
    GGUF drafter the teacher-forced KL against the reference drafter."""
    first = rows[0]
    out: dict[str, Any] = {"name": first.name, "format": first.format,
                           "acceptance": acceptance_json([r.run_steps for r in rows], first.n_draft)}
    kl = [r.target_divergence for r in rows if r.target_divergence is not None]
    if kl:
        out["target_divergence"] = KLStats.pool(kl).to_json()
    tf = [r.logit_parity.divergence for r in rows if r.logit_parity is not None]
    if tf:
        out["logit_divergence"] = KLStats.pool(tf).to_json()
    return out


def summarize(name: str, fmt: str | None, runs, greedy_ids, n_draft: int = 0) -> RunSummary:
    """One drafter's runs of ``reference.generate`` on one prompt as a RunSummary."""
    r0 = runs[0]
    lossless = None if greedy_ids is None else all(r.new_ids == greedy_ids for r in runs)
    run_steps = [_drafting_rounds(r) for r in runs]
    kl = [s.divergence for r in runs for s in r.steps if s.divergence is not None]
    return RunSummary(
        name=name, format=fmt, new_ids=list(r0.new_ids),
        steps=[_step(s) for s in r0.steps],
        acceptance_lengths=list(r0.acceptance_lengths),
        mean_acceptance_length=Stat.of([r.mean_acceptance_length for r in runs]),
        acceptance_rate=Stat.of([Acceptance.of([steps]).rate for steps in run_steps]),
        tokens_per_s=Stat.of([r.tokens_per_s for r in runs]),
        lossless=lossless, run_steps=run_steps, n_draft=n_draft,
        target_divergence=KLStats.pool(kl) if kl else None,
    )


def _drafting_rounds(result) -> list[tuple[int, int]]:
    """(drafted, accepted) of every round that drafted, counted as llama-server counts them: a round
    with no draft (the last one, when a single position is left) is no speculative step, and near
    the token limit the server trims its draft to the tokens still to predict (less one for the
    target's own), so a round the limit cut counts only the drafts that could be kept."""
    limit = None if result.stopped else len(result.prompt_ids) + len(result.new_ids)
    rounds = []
    for s in result.steps:
        drafted = len(s.draft) if limit is None else min(len(s.draft), limit - s.start - 2)
        if drafted > 0:
            rounds.append((drafted, min(int(s.accepted), drafted)))
    return rounds


def _step(s) -> dict[str, Any]:
    out = {"draft": list(s.draft), "accepted": int(s.accepted), "bonus": int(s.bonus)}
    if getattr(s, "confidence", None) is not None:  # DSpark: the confidence head, one value per draft
        out["confidence"] = [round(c, 6) for c in s.confidence]
    return out


def delta(a: RunSummary, b: RunSummary) -> dict[str, Any]:
    """b − a on mean acceptance length, called real only beyond 1σ of the run-to-run spread."""
    d = beyond_sigma(a.mean_acceptance_length, b.mean_acceptance_length)
    return {"mean_acceptance_length": d["delta"], "sigma": d["sigma"], "real": d["real"]}
