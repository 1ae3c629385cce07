"""DSpark's heads on top of the DFlash backbone: the Markov bias chained along the block, the
confidence head, and the reduced draft vocabulary.

Equations from mlx-dspark 0.20.3 (``model.py``: ``VanillaMarkov``, ``ConfidenceHead``,
``DSparkDrafter.sample_block`` / ``sample_block_probs`` / ``confidence_logits`` /
``set_draft_vocab_map``; ``generate.py``'s draft round), which mainline llama.cpp's
``build_dspark_markov_head`` (src/models/dflash.cpp) reproduces in-graph for greedy drafting:

* slot ``s`` of the block is the first prediction: ``s = 0`` when ``sample_from_anchor`` (the
  anchor's own hidden state predicts the next token; a block of B slots drafts B tokens), else
  ``s = 1`` (DFlash's convention: slot 0 is a bonus anchor whose logits are never read;
  B − 1 drafts);
* ``logits_i = head(h_i) + markov_w2 · markov_w1[prev_i]`` with ``prev`` = the anchor for the
  first drafted slot, then the token chosen at the previous slot: a sequential chain, so a
  sampled draft conditions on the *sampled* token (llama.cpp's in-graph chain follows the
  argmax instead: a documented difference under sampling);
* ``confidence_i = sigmoid(proj([h_i ; markov_w1[prev_i]]) + b)`` (without the Markov half
  when ``confidence_head_with_markov`` is false), ``h_i`` the final-normed hidden state;
* a reduced head (``lm_head`` and ``markov_w2`` emit ``draft_vocab_size`` logits) maps a draft id
  to the target's with the checkpoint's offsets, ``target = draft + d2t[draft]``, before the
  token is emitted *or fed back* (``markov_w1`` is indexed by target ids); for speculative
  sampling the draft distribution is scattered onto the target vocabulary, zeros elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import DrafterConfig
from ..errors import WeightsError

W1, W2 = "markov_head.markov_w1.weight", "markov_head.markov_w2.weight"
CONF_W, CONF_B = "confidence_head.proj.weight", "confidence_head.proj.bias"


class MarkovHead(nn.Module):
    """``markov_w1`` (target vocab → rank) then ``markov_w2`` (rank → draft vocab)."""

    def __init__(self, vocab: int, rank: int, draft_vocab: int):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, draft_vocab, bias=False)

    def forward(self, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """prev (B,) target ids -> (markov_w1[prev] (B, R), bias (B, Vd))."""
        e = self.markov_w1(prev)
        return e, self.markov_w2(e)


class ConfidenceHead(nn.Module):
    def __init__(self, in_dim: int):
        super().__init__()
        self.proj = nn.Linear(in_dim, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(features))[..., 0]


@dataclass(frozen=True)
class DSparkLayout:
    """Which DSpark tensors a drafter has and their sizes (the config does not say all of it)."""

    markov_rank: int  # 0: no Markov head (mlx-dspark allows it)
    confidence: bool
    confidence_with_markov: bool
    own_embed: bool  # embed_tokens shipped: the block is embedded with it, not the target's table
    own_head: bool  # lm_head shipped: logits come from it, not the target's head
    draft_vocab: int
    reduced: bool  # d2t maps draft ids to target ids


def layout_from_config(cfg: DrafterConfig, *, own_embed: bool = False) -> DSparkLayout:
    """The layout the config implies, with mlx-dspark's defaults (rank 256, confidence head
    with the Markov half). Used to build fresh modules (``tiny``); loading reads the weights."""
    spec, mlx = cfg.dspark, cfg.dspark.mlx
    reduced = spec.draft_vocab_size != cfg.vocab_size
    return DSparkLayout(
        markov_rank=mlx.built_markov_rank, confidence=mlx.confidence_head,
        confidence_with_markov=mlx.confidence_head_with_markov,
        own_embed=own_embed, own_head=reduced or mlx.has_lm_head,
        draft_vocab=spec.draft_vocab_size, reduced=reduced)


def layout_from_state(cfg: DrafterConfig, state: dict[str, torch.Tensor]) -> DSparkLayout:
    """The layout the tensors have, checked against the config.

    Raises:
        WeightsError: shapes that contradict each other or the config (a rank other than the
            declared ``markov_rank``, a reduced head without ``lm_head``/``d2t``, …).
    """
    where = str(cfg.path.parent)
    H, V, Vd = cfg.hidden_size, cfg.vocab_size, cfg.dspark.draft_vocab_size
    rank = int(state[W1].shape[1]) if W1 in state else 0
    declared = cfg.dspark.mlx.markov_rank
    if declared is not None and declared != rank:
        raise WeightsError(f"{where}: markov_rank is {declared} in the config but the weights hold rank {rank}")
    conf_in = int(state[CONF_W].shape[1]) if CONF_W in state else None
    if conf_in is not None and conf_in not in (H, H + rank):
        raise WeightsError(f"{where}: {CONF_W} takes {conf_in} inputs; hidden {H} (+ markov rank {rank}) expected")
    reduced = "d2t" in state  # a map is applied even when it spans the whole vocabulary (it may permute)
    if Vd != V and not reduced:
        raise WeightsError(f"{where}: draft_vocab_size {Vd} is not vocab_size {V}, but the weights lack a d2t map")
    if reduced and state["d2t"].numel() != Vd:
        raise WeightsError(f"{where}: d2t has {state['d2t'].numel()} entries for draft_vocab_size {Vd}")
    if reduced and "lm_head.weight" not in state:
        raise WeightsError(f"{where}: a reduced-vocabulary head (d2t) needs its own lm_head.weight")
    return DSparkLayout(markov_rank=rank, confidence=conf_in is not None, confidence_with_markov=rank > 0 and conf_in == H + rank,
                        own_embed="embed_tokens.weight" in state, own_head="lm_head.weight" in state,
                        draft_vocab=Vd, reduced=reduced)


def check_vocab_maps(state: dict[str, torch.Tensor], vocab: int, where: str) -> None:
    """d2t offsets must land inside the target vocabulary without collisions, and agree with
    ``t2d`` (a target-vocab mask of the mapped ids) when the checkpoint ships it; mlx-dspark
    calls the encoding self-proving for exactly this reason.

    Raises:
        WeightsError: an offset table that maps outside the vocabulary, twice to one id, or
            to another set than ``t2d`` marks.
    """
    d2t = state.get("d2t")
    if d2t is None:
        return
    ids = torch.arange(d2t.numel()) + d2t.reshape(-1).long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise WeightsError(f"{where}: d2t maps draft ids outside the target vocabulary (0..{vocab - 1})")
    if ids.unique().numel() != ids.numel():
        raise WeightsError(f"{where}: d2t maps two draft ids to one target id")
    t2d = state.get("t2d")
    if t2d is not None:
        marked = torch.nonzero(t2d.reshape(-1).bool()).reshape(-1)
        if not torch.equal(marked, ids.sort().values):
            raise WeightsError(f"{where}: d2t and t2d disagree on which target ids the draft vocabulary covers")


@dataclass
class DSparkDraft:
    tokens: torch.Tensor  # (1, n) target ids
    logits: torch.Tensor  # (1, n, Vd) head + Markov bias: what each token was chosen from
    probs: torch.Tensor | None  # (1, n, V) over the target vocabulary (sampling only)
    confidence: torch.Tensor | None  # (1, n)


def chain(drafter, hidden: torch.Tensor, base: torch.Tensor, anchor: torch.Tensor, temperature: float,
          top_p: float = 1.0, top_k: int = 0, generator: torch.Generator | None = None,
          forced: torch.Tensor | None = None) -> DSparkDraft:
    """Draft ``n`` tokens left to right from hidden (1, n, H) and head logits base (1, n, Vd).

    ``anchor`` (1,) is the last committed token. ``forced`` (1, n) teacher-forces the chain:
    position i is conditioned on ``forced[:, i − 1]`` instead of this drafter's own choice, so
    another drafter's logits can be compared position by position on one trajectory.
    """
    from .sampling import sample_probs, sampling_probs

    markov, conf = drafter.markov_head, drafter.confidence_head
    with_markov = drafter.dspark.confidence_with_markov and markov is not None
    ids = drafter.draft_ids()  # (Vd,) target id of each draft id, None when the head is full-vocab
    prev = anchor
    tokens, logits, probs, confs = [], [], [], []
    for i in range(hidden.shape[1]):
        if forced is not None and i > 0:
            prev = forced[:, i - 1]
        row, e = base[:, i], None
        if markov is not None:
            e, bias = markov(prev)
            row = row + bias
        if conf is not None:
            feats = torch.cat((hidden[:, i], e), dim=-1) if with_markov else hidden[:, i]
            confs.append(conf(feats))
        if temperature > 0:
            q = sampling_probs(row[:, None], temperature, top_p, top_k)[:, 0]  # (1, Vd)
            pick = sample_probs(q, generator)
            if ids is not None:
                q = torch.zeros((1, drafter.cfg.vocab_size), dtype=q.dtype, device=q.device).index_copy(1, ids, q)
            probs.append(q)
        else:
            pick = torch.argmax(row, dim=-1)
        prev = pick if ids is None else ids[pick]
        tokens.append(prev)
        logits.append(row)
    return DSparkDraft(torch.stack(tokens, dim=1), torch.stack(logits, dim=1),
                       torch.stack(probs, dim=1) if probs else None, torch.stack(confs, dim=1) if confs else None)
