"""One drafting round, for every drafter family: which block the drafter sees, which of its
slots are predictions, and how tokens are chosen from them.

* DFlash1: block ``[last, MASK × (w − 1)]`` with ``w = min(B, room)``; slots 1..w−1 are the
  drafts, chosen by argmax or sampled from temperature/top-k/top-p probabilities (z-lab).
* DFlash2: the same slots, re-ranked by the candidate selector (z-lab).
* DSpark: the block is always the trained width B (mlx-dspark runs bidirectional heads at full
  width; llama.cpp decodes a fixed ``n_max`` block), predictions start at slot 0
  (``sample_from_anchor``) or 1, at most ``room − 1`` of them are used, and each is chosen
  through the Markov chain (``dspark.chain``).

``room`` is how many positions are left before ``max_length``, counting the block's anchor.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .common import KVCache, RopeTable
from .sampling import sample_probs, sampling_probs


@dataclass
class Drafted:
    tokens: torch.Tensor  # (1, n) target ids for positions start+1 … start+n
    logits: torch.Tensor  # (1, n, V') what each token was chosen from (DSpark: its own, maybe reduced, vocabulary)
    probs: torch.Tensor | None  # sampling: (1, n, V), or (1, n, K) over ``indices`` (DFlash2)
    indices: torch.Tensor | None  # DFlash2 candidate ids (1, n, K)
    confidence: torch.Tensor | None  # DSpark confidence head (1, n)


def block_shape(drafter, block_size: int, room: int) -> tuple[int, int, int]:
    """(width the drafter runs at, first prediction slot, number of drafts) for one round."""
    if drafter.is_dspark:
        first = drafter.first_draft_slot
        return block_size, first, max(0, min(block_size - first, room - 1))
    width = min(block_size, room)
    return width, 1, width - 1


def draft(drafter, block: torch.Tensor, context: torch.Tensor, rope: RopeTable, cache: KVCache,
          embed_w: torch.Tensor, head_w: torch.Tensor, first: int, n: int, temperature: float,
          top_p: float = 1.0, top_k: int = 0, generator: torch.Generator | None = None,
          forced: torch.Tensor | None = None) -> Drafted:
    """Run the drafter on ``block`` (1, w) over ``context`` (1, c, T·H) and choose ``n`` tokens
    from slots ``first … first+n−1``. The caller crops ``cache`` back to the committed prefix.
    ``forced`` (1, n) teacher-forces a DSpark Markov chain (``dspark.chain``)."""
    hidden = drafter(drafter.embed(block, embed_w), context, rope, cache)[:, first:first + n]
    logits = drafter.compute_logits(hidden, head_w)  # (1, n, V')
    if drafter.is_dspark:
        from .dspark import chain

        d = chain(drafter, hidden, logits, block[:, 0], temperature, top_p, top_k, generator, forced)
        return Drafted(d.tokens, d.logits, d.probs, None, d.confidence)
    if drafter.cfg.is_dflash2:
        tokens, indices, probs = drafter.candidate_selector.select(hidden, logits, block[:, 0], temperature, generator)
        return Drafted(tokens, logits, probs, indices, None)
    if temperature > 0:
        probs = sampling_probs(logits, temperature, top_p, top_k)
        return Drafted(sample_probs(probs, generator), logits, probs, None, None)
    return Drafted(torch.argmax(logits, dim=-1), logits, None, None, None)
