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

A DSpark drafter runs the same loop with its own block layout (``drafting``): the drafter
always sees its trained width B, drafts B tokens (``sample_from_anchor``) or B − 1, each
through its Markov chain, and the target verifies [last committed token, drafts…].

Caches, the feature buffer, the output buffer and the RoPE tables are allocated once per
``Workspace``; nothing is reallocated per step. The teacher-forced replay lives in ``replay``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch

from .common import RopeTable
from .drafter import DFlashDrafter
from .drafting import block_shape, draft
from .sampling import rejection_sample, sample, sample_probs, sampling_probs, validate_sampling
from .target import Target

if TYPE_CHECKING:
    from ..metrics.kl import KLStats


@dataclass
class Step:
    """One draft → verify round."""

    start: int  # index of the block's first token (the last committed one)
    block: list[int]  # what the drafter was fed: [last committed token, MASK × (width − 1)]
    draft: list[int]  # the drafted tokens, verified after the last committed one (empty when none)
    accepted: int  # leading draft tokens the target agreed with
    bonus: int  # the target's token after the accepted drafts
    produced: int  # tokens committed: accepted + 1, cut by max_new_tokens or a stop token
    context: torch.Tensor | None = field(default=None, repr=False)  # (c, T·H) features fed this round (record=True)
    draft_logits: torch.Tensor | None = field(default=None, repr=False)  # (len(draft), V') (record=True)
    confidence: list[float] | None = None  # DSpark confidence head, one per drafted token
    # generate(divergence=True): metrics.kl.KLStats of the target's verify distribution against the
    # drafter's, one per drafted position (None when the drafter's head has its own reduced vocabulary)
    divergence: KLStats | None = field(default=None, repr=False)


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

    def __init__(self, drafter: DFlashDrafter, target: Target, capacity: int, block_size: int | None = None):
        p = target.lm_head.weight
        if drafter.fc.weight.device != p.device or drafter.fc.weight.dtype != p.dtype:
            raise ValueError(f"drafter ({drafter.fc.weight.device}, {drafter.fc.weight.dtype}) and target "
                             f"({p.device}, {p.dtype}) must share a device and dtype")
        self.drafter, self.target, self.capacity = drafter, target, capacity
        self.target_cache = target.new_cache(capacity)
        self.target_rope = RopeTable(target.spec.rope, capacity, p.dtype, p.device)
        self.ids = torch.empty((1, capacity + 1), dtype=torch.long, device=p.device)  # +1: the bonus slot past the end
        # a DSpark block keeps its full width up to the last round: its rows may reach past capacity
        self.draft_capacity = capacity + ((block_size or drafter.block_size) if drafter.is_dspark else 0)
        self.draft_cache = drafter.new_cache(self.draft_capacity)
        self.draft_rope = RopeTable(drafter.rope_spec, self.draft_capacity, p.dtype, p.device)
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
    divergence: bool = False,
) -> GenerationResult:
    """Speculative decoding with ``drafter`` proposing and ``target`` verifying (batch 1).

    ``block_size=1`` runs the same loop with no drafting (z-lab's autoregressive baseline).
    ``seed=None`` draws from torch's global RNG exactly as z-lab does; an int uses a private
    generator. ``record=True`` keeps each round's context features and draft logits, which
    ``teacher_forced`` replays. ``draft_context=N`` lets the drafter attend to only the last N
    committed positions (plus the block) each round; None (the default) is z-lab's unlimited
    context, bit for bit. ``divergence=True`` gives every drafting round's ``Step.divergence``:
    KL(target ‖ drafter) and same-argmax per drafted position, from the raw logits (temperature
    1) of the verify pass and the draft; its cost is left out of ``decode_s``.

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
    taps = drafter.target_layer_ids if block_shape(drafter, B, B + 1)[2] > 0 else ()  # no drafts: no features
    target.check_taps(drafter.target_layer_ids)
    max_length = n + max_new_tokens
    ws = workspace or Workspace(drafter, target, max_length, B)
    need = max_length + (B if drafter.is_dspark else 0)
    if ws.capacity < max_length or ws.draft_capacity < need or ws.drafter is not drafter or ws.target is not target:
        raise ValueError(f"workspace is for other models or too small ({ws.capacity} < {max_length} positions)")
    device = ws.ids.device
    gen = None
    if seed is not None:
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
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
    aside = 0.0  # seconds spent on divergence bookkeeping, not decoding
    start = n
    stopped = stop is not None and bool(torch.isin(ids[:, start], stop).any())
    while start + 1 < max_length and not stopped:
        width, first, n_draft = block_shape(drafter, B, max_length - start)
        block = ids[:, start:start + n_draft + 1].clone()  # (1, n_draft+1): [last committed, MASK…], drafts go in [1:]
        fed = [int(ids[0, start])] + [drafter.mask_token_id] * (width - 1)
        context = d = None
        if n_draft > 0:
            context = feats[dcache.length:start]  # (c, T·H): positions committed since the last draft
            if record:
                context = context.clone()
            if draft_context is not None:
                dcache.window_start = max(0, start - draft_context)  # attend to [start − N, start) + block
            drafter_block = block if width == n_draft + 1 else torch.tensor([fed], dtype=torch.long, device=device)
            d = draft(drafter, drafter_block, context[None], ws.draft_rope, dcache, embed_w, head_w, first, n_draft,
                      temperature, top_p, top_k, gen)
            dcache.crop(start)  # keep only committed context rows; the block's K/V are never reused
            block[:, 1:] = d.tokens

        logits = target(block, ws.target_rope, tcache, taps, feats)  # (1, n_draft+1, V); writes those feature rows
        if temperature > 0:
            target_probs = sampling_probs(logits, temperature, top_p, top_k)
            if n_draft > 0:
                accepted, bonus = rejection_sample(block[:, 1:], target_probs, d.probs, d.indices, gen)
            else:
                accepted, bonus = 0, sample_probs(target_probs[:, -1], gen)[0]
        else:
            posterior = torch.argmax(logits, dim=-1)  # (1, n_draft+1)
            accepted = int((block[:, 1:] == posterior[:, :-1]).cumprod(dim=1).sum(dim=1)[0].item())
            bonus = posterior[:, accepted][0]
        kl = None
        if divergence and d is not None and d.logits.shape[-1] == logits.shape[-1]:
            from ..metrics.kl import KLStats

            t = _clock(device)
            kl = KLStats.of(logits[0, :n_draft], d.logits[0])  # row i of the verify predicts draft i
            aside += _clock(device) - t
        ids[:, start:start + accepted + 1] = block[:, :accepted + 1]
        ids[:, start + accepted + 1] = bonus
        produced = min(accepted + 1, max_length - start - 1)
        if stop is not None:
            hits = torch.isin(ids[0, start + 1:start + produced + 1], stop).nonzero(as_tuple=True)[0]
            if hits.numel() > 0:
                produced = int(hits[0].item()) + 1
                stopped = True
        steps.append(Step(
            start=start, block=fed, draft=block[0, 1:].tolist(), accepted=accepted,
            bonus=int(bonus), produced=produced, context=context if record else None,
            draft_logits=d.logits[0].float().clone() if record and d is not None else None,
            confidence=d.confidence[0].float().tolist() if d is not None and d.confidence is not None else None,
            divergence=kl,
        ))
        start += produced
        tcache.crop(start)  # drop the verify rows past the committed prefix
        acceptance_lengths.append(produced)
    t2 = _clock(device)

    end = min(start + 1, max_length)
    return GenerationResult(
        prompt_ids=prompt, new_ids=ids[0, n:end].tolist(), steps=steps, acceptance_lengths=acceptance_lengths,
        stopped=stopped, temperature=temperature, prefill_s=t1 - t0, decode_s=t2 - t1 - aside,
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
