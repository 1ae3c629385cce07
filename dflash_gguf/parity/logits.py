"""Teacher-forced logit parity: a GGUF drafter's logits on the reference trajectory's exact
inputs (``reference.teacher_forced``) against the reference drafter's."""
from __future__ import annotations

import statistics
from typing import Any


def logit_parity(reference_result, tf) -> dict[str, Any]:
    """max |Δlogit|, mean/max KL(reference ‖ other), top-1 agreement, first argmax divergence."""
    import torch

    ref_steps = {s.start: s for s in reference_result.steps if s.draft}
    max_abs, kls, agree, total, first = 0.0, [], 0, 0, None
    for k, s in enumerate(tf.steps):
        r = ref_steps[s.start].draft_logits.float().cpu()
        o = s.logits.float().cpu()
        max_abs = max(max_abs, float((o - r).abs().max()))
        lp = torch.log_softmax(r.double(), dim=-1)
        lq = torch.log_softmax(o.double(), dim=-1)
        kl = (lp.exp() * (lp - lq)).sum(dim=-1)  # (q−1,)
        kls += kl.tolist()
        ra, oa = r.argmax(dim=-1), o.argmax(dim=-1)
        same = (ra == oa)
        agree += int(same.sum())
        total += same.numel()
        if first is None and not bool(same.all()):
            j = int((~same).nonzero()[0, 0])
            first = {"step": k, "position": j, "absolute_position": s.start + 1 + j,
                     "reference_token": int(ra[j]), "other_token": int(oa[j])}
    return {
        "max_abs": max_abs,
        "mean_kl": statistics.fmean(kls) if kls else 0.0,
        "max_kl": max(kls) if kls else 0.0,
        "top1_agreement": agree / total if total else 1.0,
        "first_divergence": first,
        "positions": total,
    }
