"""Acceptance statistics of speculative decoding from per-step counts.

One verification step drafts up to ``n_draft`` tokens and the target accepts a leading run of
``k`` of them (0 ≤ k ≤ drafted). Both reports count the way llama-server does
(``tools/server/server-context.cpp``):

* acceptance rate = accepted / drafted ("draft acceptance");
* mean acceptance length = 1 + accepted / steps ("mean len": the accepted drafts plus the
  target's own token; z-lab's τ);
* acceptance at position i = share of steps whose accepted run reaches past draft i
  (llama-server's "acc per pos", printed with ``LLAMA_TRACE``);
* histogram: how many steps accepted exactly 0, 1, …, n_draft drafts;
* drift: the rate over the first half of each request's steps against the last half (a drafter
  that follows the target early but loses it as the context grows shows here).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence


@dataclass(frozen=True)
class Step:
    drafted: int
    accepted: int


@dataclass(frozen=True)
class Acceptance:
    requests: tuple[tuple[Step, ...], ...]  # steps in order, per request
    n_draft: int  # the most drafts one step can hold (block size − 1 for DFlash)

    @classmethod
    def of(cls, requests: Iterable[Sequence[tuple[int, int]]], n_draft: int | None = None) -> "Acceptance":
        """From ``(drafted, accepted)`` pairs per step, per request.

        Raises:
            ValueError: a step accepted more than it drafted, or a count is negative.
        """
        reqs = tuple(tuple(Step(int(d), int(a)) for d, a in steps) for steps in requests)
        for steps in reqs:
            for s in steps:
                if s.drafted < 0 or not 0 <= s.accepted <= s.drafted:
                    raise ValueError(f"a step accepted {s.accepted} of {s.drafted} drafted tokens")
        widest = max((s.drafted for steps in reqs for s in steps), default=0)
        return cls(reqs, max(widest, n_draft or 0))

    @property
    def steps(self) -> list[Step]:
        return [s for steps in self.requests for s in steps]

    @property
    def drafted(self) -> int:
        return sum(s.drafted for s in self.steps)

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.steps)

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_length(self) -> float:
        n = len(self.steps)
        return 1.0 + self.accepted / n if n else 1.0

    def per_position(self) -> list[float]:
        n = len(self.steps)
        return [sum(s.accepted > i for s in self.steps) / n if n else 0.0 for i in range(self.n_draft)]

    def histogram(self) -> list[int]:
        counts = [0] * (self.n_draft + 1)
        for s in self.steps:
            counts[s.accepted] += 1
        return counts

    def drift(self) -> dict[str, float]:
        """Acceptance rate over the first and the last half of every request's steps (the middle
        step of an odd count is in neither)."""
        first: list[Step] = []
        last: list[Step] = []
        for steps in self.requests:
            half = len(steps) // 2
            first += steps[:half]
            last += steps[len(steps) - half:]
        r1, r2 = _rate(first), _rate(last)
        return {"first": r1, "last": r2, "delta": r2 - r1}

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": len(self.steps), "drafted": self.drafted, "accepted": self.accepted,
            "acceptance_rate": self.rate, "mean_acceptance_length": self.mean_length,
            "per_position": self.per_position(), "histogram": self.histogram(), "drift": self.drift(),
        }


def _rate(steps: Sequence[Step]) -> float:
    drafted = sum(s.drafted for s in steps)
    return sum(s.accepted for s in steps) / drafted if drafted else 0.0
