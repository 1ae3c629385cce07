"""Temperature / top-k / top-p sampling and speculative rejection sampling.

Same formulas and the same random draws, in the same order, as ``dflash/model.py``
(``_sampling_probs``, ``_sample_probs``, ``_rejection_sample``) of PyPI dflash 0.1.0: with
``generator=None`` the global torch RNG is used exactly as z-lab uses it, so a seeded run of
either implementation draws the same numbers.
"""
from __future__ import annotations

import torch


def validate_sampling(temperature: float, top_p: float, top_k: int) -> None:
    if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
        raise ValueError(f"need temperature >= 0, top_k >= 0 and 0 < top_p <= 1 (got {temperature}, {top_k}, {top_p})")


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """(…, V) logits -> float32 probabilities after temperature, then top-k, then top-p."""
    scores = logits.float() / temperature
    vocab = scores.shape[-1]
    indices = None
    if 0 < top_k < vocab:
        scores, indices = torch.topk(scores, top_k, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Keep a token while the mass strictly before it is < top_p (so the top token always stays).
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if indices is not None:
        probs = torch.zeros_like(logits, dtype=probs.dtype).scatter(-1, indices, probs)
    return probs


def sample_probs(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of (…, V) probabilities -> (…) token ids."""
    shape = probs.shape[:-1]
    return torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator).view(shape)


def sample(logits: torch.Tensor, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    validate_sampling(temperature, top_p, top_k)
    if temperature <= 0:
        return torch.argmax(logits, dim=-1)
    return sample_probs(sampling_probs(logits, temperature, top_p, top_k), generator)


def rejection_sample(
    draft_tokens: torch.Tensor,  # (1, γ)
    target_probs: torch.Tensor,  # (1, γ+1, V)
    draft_probs: torch.Tensor,  # (1, γ, V), or (1, γ, K) over draft_indices (DFlash2)
    draft_indices: torch.Tensor | None = None,  # (1, γ, K) candidate ids (DFlash2)
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:
    """Standard speculative sampling: accept draft i while u·q < p; on the first rejection
    sample from the renormalised residual max(p − q, 0); if all γ pass, sample the bonus
    from the last target row. Returns (accepted, bonus token)."""
    gamma = draft_tokens.shape[1]
    p = target_probs[:, :gamma].gather(-1, draft_tokens[..., None])[..., 0]  # (1, γ)
    if draft_indices is None:
        q = draft_probs.gather(-1, draft_tokens[..., None])[..., 0]
    else:
        q = (draft_probs * (draft_indices == draft_tokens[..., None])).sum(-1)
    u = torch.rand(q.shape, dtype=q.dtype, device=q.device, generator=generator)
    accepted = int((u * q < p).to(torch.int32).cumprod(-1).sum(-1)[0].item())
    if accepted == gamma:
        return accepted, sample_probs(target_probs[:, -1], generator)[0]

    residual = target_probs[0, accepted].clone()
    if draft_indices is None:
        residual.sub_(draft_probs[0, accepted])
    else:
        residual.scatter_add_(0, draft_indices[0, accepted], -draft_probs[0, accepted])
    residual.clamp_min_(0)
    total = residual.sum()
    # All residual mass gone (q dominated p everywhere): fall back to the target row itself.
    residual = torch.where(
        total > 0, residual / total.clamp_min(torch.finfo(residual.dtype).tiny), target_probs[0, accepted]
    )
    return accepted, sample_probs(residual[None], generator)[0]
