"""Teacher-forced replay: a recorded trajectory's drafting rounds fed, input for input, to
another drafter (a GGUF-loaded one, or an external runtime through a callable).

Every round gets exactly the reference's inputs (context features, block, positions; for a
DSpark drafter also the reference's drafted tokens, which condition its Markov chain), so a
difference in round k is that drafter's own and errors cannot compound.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .common import KVCache, RopeTable
from .drafter import DFlashDrafter
from .drafting import draft
from .loop import GenerationResult
from .target import Target


@dataclass
class StepInputs:
    """Exactly what the reference drafter saw in one round."""

    start: int  # absolute position of block[0]
    context: torch.Tensor  # (c, T·H) features of positions [start − c, start)
    block: list[int]  # [last committed token, MASK × (q − 1)] at positions [start, start + q)
    draft_context: int | None = None  # attend to positions [start − draft_context, start) only (None: all)
    draft: list[int] = field(default_factory=list)  # the reference's drafted tokens (DSpark: its Markov chain's inputs)


@dataclass
class StepLogits:
    start: int
    logits: torch.Tensor  # (n, V') float32, the other drafter's logits for the drafted positions
    tokens: list[int]  # its greedy choice (argmax; DFlash2: the selector's greedy path; DSpark: through d2t)
    reference_tokens: list[int] | None  # the reference's drafts (greedy runs only)
    max_abs_diff: float | None  # vs the reference's recorded logits


@dataclass
class TeacherForcedResult:
    steps: list[StepLogits]

    @property
    def max_abs_diff(self) -> float | None:
        diffs = [s.max_abs_diff for s in self.steps if s.max_abs_diff is not None]
        return max(diffs) if diffs else None

    @property
    def token_agreement(self) -> float | None:
        """Share of drafted positions where the other drafter's greedy token equals the reference's."""
        pairs = [(a, b) for s in self.steps if s.reference_tokens is not None for a, b in zip(s.tokens, s.reference_tokens)]
        return sum(a == b for a, b in pairs) / len(pairs) if pairs else None


def step_inputs(result: GenerationResult) -> list[StepInputs]:
    """The drafting rounds of a ``record=True`` trajectory, as plain inputs.

    Raises:
        ValueError: the result was generated without ``record=True``.
    """
    out = []
    for s in result.steps:
        if not s.draft:
            continue
        if s.context is None:
            raise ValueError("this GenerationResult has no recorded inputs; run generate(..., record=True)")
        out.append(StepInputs(start=s.start, context=s.context, block=s.block, draft_context=result.draft_context,
                              draft=list(s.draft)))
    return out


@torch.inference_mode()
def teacher_forced(
    drafter: DFlashDrafter | Callable[[StepInputs], torch.Tensor],
    target: Target,
    result: GenerationResult,
) -> TeacherForcedResult:
    """Replay a recorded trajectory through another drafter and collect its logits per round.

    ``drafter`` is a ``DFlashDrafter`` (e.g. loaded from a GGUF) sharing ``target``'s embeddings
    and head, or a callable taking ``StepInputs`` and returning (n, V) logits (an external
    runtime). A trajectory generated with ``draft_context`` is replayed with the same cap.
    """
    inputs = step_inputs(result)
    greedy = result.temperature == 0
    ref_steps = {s.start: s for s in result.steps if s.draft}
    out: list[StepLogits] = []
    if isinstance(drafter, DFlashDrafter):
        p = drafter.fc.weight  # the drafter may differ from the target in dtype (e.g. a GGUF run in bf16)
        embed_w = target.embed_weight.to(device=p.device, dtype=p.dtype)
        head_w = target.head_weight.to(device=p.device, dtype=p.dtype)
        capacity = max((i.start + len(i.block) for i in inputs), default=0)
        cache: KVCache = drafter.new_cache(capacity)
        rope = RopeTable(drafter.rope_spec, capacity, p.dtype, p.device)
    for inp in inputs:
        ref = ref_steps[inp.start]
        tokens: list[int]
        if isinstance(drafter, DFlashDrafter):
            if cache.length + inp.context.shape[0] != inp.start:
                raise ValueError(f"trajectory is not contiguous at position {inp.start}")
            block = torch.tensor([inp.block], dtype=torch.long, device=p.device)
            ctx = inp.context.to(device=p.device, dtype=p.dtype)[None]
            cache.window_start = 0 if inp.draft_context is None else max(0, inp.start - inp.draft_context)
            forced = torch.tensor([inp.draft], dtype=torch.long, device=p.device)
            d = draft(drafter, block, ctx, rope, cache, embed_w, head_w, drafter.first_draft_slot, len(inp.draft),
                      0.0, forced=forced)
            cache.crop(inp.start)
            tokens = d.tokens[0].tolist()
            logits = d.logits[0].float()
        else:
            logits = torch.as_tensor(drafter(inp)).float()
            tokens = torch.argmax(logits, dim=-1).tolist()
        diff = None
        if ref.draft_logits is not None:
            diff = float((logits.cpu() - ref.draft_logits.cpu()).abs().max().item())
        out.append(StepLogits(start=inp.start, logits=logits, tokens=tokens,
                              reference_tokens=list(ref.draft) if greedy else None, max_abs_diff=diff))
    return TeacherForcedResult(steps=out)
