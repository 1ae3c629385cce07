"""The draft → verify loop (``generate``) and teacher-forced replay (``teacher_forced``).

``generate`` follows ``dflash_generate`` of z-lab's PyPI dflash 0.1.0 step for step:

* prefill the prompt; the first new token is sampled from the last logit; the target's
  features of every prompt position become the drafter's first context;
* each round, ``start`` is the index of the last committed token and the block is
  ``ids[start : start + verify_size]`` = [last committed token, MASK × (B−1)] (the output
  buffer is pre-filled with the mask id); the drafter fills block[1:], one target forward
  verifies the whole block, the longest agreeing prefix is accepted and the target's next
  token is the bonus;
* ``produced = min(accepted + 1, max_length − start − 1)`` tokens are committed (the bonus is
  written to the buffer but its features only arrive next round, when it heads the block);
  stop tokens are looked for in the newly committed slice only;
* the target cache is cropped to the committed prefix; the drafter's cache never keeps a
  block's K/V, only the context rows.

``draft_context=N`` (not in z-lab; None there) emulates a runtime that gives the drafter at
most the last N committed positions as context (older llama.cpp's ``cross_ctx`` = 512): every
round the draft cache's ``window_start`` moves to ``start − N``, so attention sees only the K/V
of positions [start − N, start) plus the block, each still at its absolute RoPE position.

Caches, the feature buffer, the output buffer and the RoPE tables are allocated once per
``Workspace``; nothing is reallocated per step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .common import KVCache, RopeTable
from .drafter import DFlashDrafter
from .sampling import rejection_sample, sample, sample_probs, sampling_probs, validate_sampling
from .target import Target


@dataclass
class Step:
    """One draft → verify round."""

    start: int  # index of the block's first token (the last committed one)
    block: list[int]  # what the drafter was fed: [last committed token, MASK × (verify_size − 1)]
    draft: list[int]  # the drafter's tokens for block[1:] (empty when verify_size == 1)
    accepted: int  # leading draft tokens the target agreed with
    bonus: int  # the target's token after the accepted drafts
    produced: int  # tokens committed: accepted + 1, cut by max_new_tokens or a stop token
    context: torch.Tensor | None = field(default=None, repr=False)  # (c, T·H) features fed this round (record=True)
    draft_logits: torch.Tensor | None = field(default=None, repr=False)  # (verify_size − 1, V) (record=True)


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    new_ids: list[int]  # committed tokens after the prompt (the prefill's token first)
    steps: list[Step]
    acceptance_lengths: list[int]  # per round, tokens committed incl. the bonus (z-lab's stat)
    stopped: bool  # a stop token ended the generation
    temperature: float
    prefill_s: float  # prompt forward + first token (z-lab's time_to_first_token)
    decode_s: float  # the rounds
    draft_context: int | None = None  # the drafter's context cap (None: the whole prefix, as z-lab)

    @property
    def output_ids(self) -> list[int]:
        return self.prompt_ids + self.new_ids

    @property
    def mean_acceptance_length(self) -> float:
        return sum(self.acceptance_lengths) / len(self.acceptance_lengths) if self.acceptance_lengths else 0.0

    @property
    def tokens_per_s(self) -> float:
        total = self.prefill_s + self.decode_s
        return len(self.new_ids) / total if total > 0 else 0.0


class Workspace:
    """Everything a generation of up to ``capacity`` positions needs, allocated once."""

    def __init__(self, drafter: DFlashDrafter, target: Target, capacity: int):
        p = target.lm_head.weight
        if drafter.fc.weight.device != p.device or drafter.fc.weight.dtype != p.dtype:
            raise ValueError(f"drafter ({drafter.fc.weight.device}, {drafter.fc.weight.dtype}) and target "
                             f"({p.device}, {p.dtype}) must share a device and dtype")
        self.drafter, self.target, self.capacity = drafter, target, capacity
        self.target_cache = target.new_cache(capacity)
        self.target_rope = RopeTable(target.spec.rope, capacity, p.dtype, p.device)
        self.ids = torch.empty((1, capacity + 1), dtype=torch.long, device=p.device)  # +1: the bonus slot past the end
        self.draft_cache = drafter.new_cache(capacity)
        self.draft_rope = RopeTable(drafter.rope_spec, capacity, p.dtype, p.device)
        self.features = torch.empty((capacity, drafter.fc.in_features), dtype=p.dtype, device=p.device)


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _as_list(input_ids: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError(f"batch size must be 1, got input_ids of shape {tuple(input_ids.shape)}")
            input_ids = input_ids[0]
        return [int(t) for t in input_ids.tolist()]
    return [int(t) for t in input_ids]


@torch.inference_mode()
def generate(
    drafter: DFlashDrafter,
    target: Target,
    input_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    stop_token_ids: Sequence[int] | None = None,
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    block_size: int | None = None,
    seed: int | None = None,
    record: bool = False,
    workspace: Workspace | None = None,
    draft_context: int | None = None,
) -> GenerationResult:
    """Speculative decoding with ``drafter`` proposing and ``target`` verifying (batch 1).

    ``block_size=1`` runs the same loop with no drafting (z-lab's autoregressive baseline).
    ``seed=None`` draws from torch's global RNG exactly as z-lab does; an int uses a private
    generator. ``record=True`` keeps each round's context features and draft logits, which
    ``teacher_forced`` replays. ``draft_context=N`` lets the drafter attend to only the last N
    committed positions (plus the block) each round; None (the default) is z-lab's unlimited
    context, bit for bit.

    Raises:
        ValueError: bad sampling arguments, an empty prompt, or a workspace that is too small.
        TargetError: the drafter taps a layer the target does not have.
    """
    validate_sampling(temperature, top_p, top_k)
    prompt = _as_list(input_ids)
    n = len(prompt)
    if n == 0:
        raise ValueError("input_ids is empty")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    B = drafter.block_size if block_size is None else int(block_size)
    if B < 1:
        raise ValueError(f"block_size must be >= 1, got {B}")
    if draft_context is not None and draft_context < 1:
        raise ValueError(f"draft_context must be >= 1 or None, got {draft_context}")
    taps = drafter.target_layer_ids if B > 1 else ()
    target.check_taps(drafter.target_layer_ids)
    max_length = n + max_new_tokens
    ws = workspace or Workspace(drafter, target, max_length)
    if ws.capacity < max_length or ws.drafter is not drafter or ws.target is not target:
        raise ValueError(f"workspace is for other models or too small ({ws.capacity} < {max_length} positions)")
    device = ws.ids.device
    gen = None
    if seed is not None:
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
    is_dflash2 = drafter.cfg.is_dflash2
    embed_w, head_w = target.embed_weight, target.head_weight
    ids = ws.ids
    ids.fill_(drafter.mask_token_id)  # unwritten slots are MASK, so a block slice is [token, MASK...]
    ids[0, :n] = torch.tensor(prompt, dtype=torch.long, device=device)
    tcache, dcache, feats = ws.target_cache, ws.draft_cache, ws.features
    tcache.crop(0)
    dcache.crop(0)
    dcache.window_start = 0
    stop = torch.tensor(list(stop_token_ids), dtype=torch.long, device=device) if stop_token_ids is not None else None

    t0 = _clock(device)
    logits = target(ids[:, :n], ws.target_rope, tcache, taps, feats, logits_to_keep=1)  # (1, 1, V)
    ids[:, n:n + 1] = sample(logits, temperature, top_p, top_k, gen)
    t1 = _clock(device)

    steps: list[Step] = []
    acceptance_lengths: list[int] = []
    start = n
    stopped = stop is not None and bool(torch.isin(ids[:, start], stop).any())
    while start + 1 < max_length and not stopped:
        vs = min(B, max_length - start)
        block = ids[:, start:start + vs].clone()  # (1, vs)
        fed = block[0].tolist()
        context = draft_logits = draft_probs = draft_indices = None
        if vs > 1:
            context = feats[dcache.length:start]  # (c, T·H): positions committed since the last draft
            if record:
                context = context.clone()
            if draft_context is not None:
                dcache.window_start = max(0, start - draft_context)  # attend to [start − N, start) + block
            hidden = drafter(drafter.embed(block, embed_w), context[None], ws.draft_rope, dcache)[:, 1 - vs:]
            dcache.crop(start)  # keep only committed context rows; the block's K/V are never reused
            draft_logits = drafter.compute_logits(hidden, head_w)  # (1, vs−1, V)
            if is_dflash2:
                tokens, draft_indices, draft_probs = drafter.candidate_selector.select(
                    hidden, draft_logits, block[:, 0], temperature, gen)
                block[:, 1:] = tokens
            elif temperature > 0:
                draft_probs = sampling_probs(draft_logits, temperature, top_p, top_k)
                block[:, 1:] = sample_probs(draft_probs, gen)
            else:
                block[:, 1:] = torch.argmax(draft_logits, dim=-1)

        logits = target(block, ws.target_rope, tcache, taps, feats)  # (1, vs, V); writes features rows [start, start+vs)
        if temperature > 0:
            target_probs = sampling_probs(logits, temperature, top_p, top_k)
            if vs > 1:
                accepted, bonus = rejection_sample(block[:, 1:], target_probs, draft_probs, draft_indices, gen)
            else:
                accepted, bonus = 0, sample_probs(target_probs[:, -1], gen)[0]
        else:
            posterior = torch.argmax(logits, dim=-1)  # (1, vs)
            accepted = int((block[:, 1:] == posterior[:, :-1]).cumprod(dim=1).sum(dim=1)[0].item())
            bonus = posterior[:, accepted][0]
        ids[:, start:start + accepted + 1] = block[:, :accepted + 1]
        ids[:, start + accepted + 1] = bonus
        produced = min(accepted + 1, max_length - start - 1)
        if stop is not None:
            hits = torch.isin(ids[0, start + 1:start + produced + 1], stop).nonzero(as_tuple=True)[0]
            if hits.numel() > 0:
                produced = int(hits[0].item()) + 1
                stopped = True
        steps.append(Step(
            start=start, block=fed, draft=block[0, 1:].tolist() if vs > 1 else [], accepted=accepted,
            bonus=int(bonus), produced=produced, context=context if record else None,
            draft_logits=draft_logits[0].float().clone() if record and draft_logits is not None else None,
        ))
        start += produced
        tcache.crop(start)  # drop the verify rows past the committed prefix
        acceptance_lengths.append(produced)
    t2 = _clock(device)

    end = min(start + 1, max_length)
    return GenerationResult(
        prompt_ids=prompt, new_ids=ids[0, n:end].tolist(), steps=steps, acceptance_lengths=acceptance_lengths,
        stopped=stopped, temperature=temperature, prefill_s=t1 - t0, decode_s=t2 - t1,
        draft_context=draft_context,
    )


@torch.inference_mode()
def greedy_decode(
    target: Target,
    input_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    stop_token_ids: Sequence[int] | None = None,
) -> list[int]:
    """Plain greedy decoding of the target alone (one token per forward): the lossless yardstick."""
    prompt = _as_list(input_ids)
    p = target.lm_head.weight
    cache = target.new_cache(len(prompt) + max_new_tokens)
    rope = RopeTable(target.spec.rope, len(prompt) + max_new_tokens, p.dtype, p.device)
    stops = set(stop_token_ids or ())
    tokens = torch.tensor([prompt], dtype=torch.long, device=p.device)
    new: list[int] = []
    while len(new) < max_new_tokens:
        logits = target(tokens, rope, cache, logits_to_keep=1)
        tok = int(torch.argmax(logits[0, -1]).item())
        new.append(tok)
        if tok in stops:
            break
        tokens = torch.tensor([[tok]], dtype=torch.long, device=p.device)
    return new


@dataclass
class StepInputs:
    """Exactly what the reference drafter saw in one round."""

    start: int  # absolute position of block[0]
    context: torch.Tensor  # (c, T·H) features of positions [start − c, start)
    block: list[int]  # [last committed token, MASK × (q − 1)] at positions [start, start + q)
    draft_context: int | None = None  # attend to positions [start − draft_context, start) only (None: all)


@dataclass
class StepLogits:
    start: int
    logits: torch.Tensor  # (q − 1, V) float32, the other drafter's logits for block[1:]
    tokens: list[int]  # its greedy choice (argmax; DFlash2: the selector's greedy path)
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
        out.append(StepInputs(start=s.start, context=s.context, block=s.block, draft_context=result.draft_context))
    return out


@torch.inference_mode()
def teacher_forced(
    drafter: DFlashDrafter | Callable[[StepInputs], torch.Tensor],
    target: Target,
    result: GenerationResult,
) -> TeacherForcedResult:
    """Replay a recorded trajectory through another drafter and collect its logits per round.

    Every round gets exactly the reference's inputs (context features, block, positions), so
    errors cannot compound: a difference in round k is that drafter's own. ``drafter`` is a
    ``DFlashDrafter`` (e.g. loaded from a GGUF) sharing ``target``'s embeddings and head, or a
    callable taking ``StepInputs`` and returning (q − 1, V) logits (an external runtime).
    A trajectory generated with ``draft_context`` is replayed with the same cap.
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
            hidden = drafter(drafter.embed(block, embed_w), ctx, rope, cache)[:, 1:]
            cache.crop(inp.start)
            logits = drafter.compute_logits(hidden, head_w)  # (1, q−1, V)
            if drafter.cfg.is_dflash2:
                tokens = drafter.candidate_selector.select(hidden, logits, block[:, 0], 0.0)[0][0].tolist()
            else:
                tokens = torch.argmax(logits[0], dim=-1).tolist()
            logits = logits[0].float()
        else:
            logits = torch.as_tensor(drafter(inp)).float()
            tokens = torch.argmax(logits, dim=-1).tolist()
        diff = None
        if ref.draft_logits is not None:
            diff = float((logits.cpu() - ref.draft_logits.cpu()).abs().max().item())
        out.append(StepLogits(start=inp.start, logits=logits, tokens=tokens,
                              reference_tokens=list(ref.draft) if greedy else None, max_abs_diff=diff))
    return TeacherForcedResult(steps=out)
