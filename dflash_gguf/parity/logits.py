"""Teacher-forced logit parity: a GGUF drafter's logits on the reference trajectory's exact
inputs (``reference.teacher_forced``) against the reference drafter's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..metrics.kl import KLStats


@dataclass
class LogitParity:
    max_abs: float  # max |Δlogit| over every drafted position
    divergence: KLStats  # KL(reference ‖ other) and same-argmax, per drafted position
    first_divergence: dict[str, Any] | None  # the first position whose argmax differs

    @property
    def top1_agreement(self) -> float:
        return self.divergence.same_top

    def to_json(self) -> dict[str, Any]:
        kl = self.divergence
        return {
            "max_abs": self.max_abs,
            "mean_kl": kl.mean,
            "max_kl": kl.percentile(1.0),
            "top1_agreement": self.top1_agreement,
            "first_divergence": self.first_divergence,
            "positions": kl.count,
            "kl_divergence": kl.to_json(),
        }


def logit_parity(reference_result, tf) -> LogitParity:
    """max |Δlogit|, KL(reference ‖ other) per drafted position, top-1 agreement, first argmax divergence."""
    ref_steps = {s.start: s for s in reference_result.steps if s.draft}
    max_abs, parts, first = 0.0, [], None
    for k, s in enumerate(tf.steps):
        r = ref_steps[s.start].draft_logits.float().cpu()
        o = s.logits.float().cpu()
        max_abs = max(max_abs, float((o - r).abs().max()))
        part = KLStats.of(r, o)
        parts.append(part)
        if first is None and not part.same.all():
            j = int((~part.same).nonzero()[0][0])
            first = {"step": k, "position": j, "absolute_position": s.start + 1 + j,
                     "reference_token": int(r[j].argmax()), "other_token": int(o[j].argmax())}
    return LogitParity(max_abs, KLStats.pool(parts), first)
