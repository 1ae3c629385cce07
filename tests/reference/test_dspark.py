"""reference/dspark.py: the Markov chain, the confidence head and the reduced vocabulary against
hand-computed values, then tiny DSpark drafters through the draft → verify loop."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.errors import WeightsError  # noqa: E402
from dflash_gguf.reference import generate, greedy_decode, load_drafter, load_target, teacher_forced, tiny  # noqa: E402
from dflash_gguf.reference.common import RopeTable  # noqa: E402
from dflash_gguf.reference.dspark import (  # noqa: E402
    ConfidenceHead, MarkovHead, chain, check_vocab_maps, layout_from_state,
)


def _sigmoid(z):
    return 1 / (1 + math.exp(-z))


def _hand_drafter(reduced=True, markov=True):
    """Target vocab 4, draft vocab 3 mapped to target ids (1, 3, 0), Markov rank 2, hidden 2.

    markov_w1 rows (target ids 0..3): (1, 0) (0, 1) (0, 0) (−1, 0); markov_w2 rows (draft ids):
    (0, 2) (1, 0) (−1, −1); so the bias after target t is w2·w1[t]:
    t0 → (0, 1, −1), t1 → (2, 0, −1), t2 → (0, 0, 0), t3 → (0, −1, 1).
    Confidence: proj (0.5, −0.5 | 1, 2), bias −1 over [h ; w1[prev]].
    """
    head = MarkovHead(4, 2, 3)
    conf = ConfidenceHead(4)
    with torch.no_grad():
        head.markov_w1.weight.copy_(torch.tensor([[1.0, 0], [0, 1], [0, 0], [-1, 0]]))
        head.markov_w2.weight.copy_(torch.tensor([[0.0, 2], [1, 0], [-1, -1]]))
        conf.proj.weight.copy_(torch.tensor([[0.5, -0.5, 1, 2]]))
        conf.proj.bias.fill_(-1.0)
    ids = torch.tensor([1, 3, 0]) if reduced else None
    return SimpleNamespace(markov_head=head if markov else None, confidence_head=conf,
                           dspark=SimpleNamespace(confidence_with_markov=True), draft_ids=lambda: ids,
                           cfg=SimpleNamespace(vocab_size=4))


BASE = torch.tensor([[[0.0, 0.5, 0.0], [0.0, 0.0, 0.0], [0.2, 0.0, 0.0]]])  # head logits of 3 slots
HIDDEN = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]])
ANCHOR = torch.tensor([2])


def test_markov_chain_feeds_back_the_mapped_token():
    with torch.no_grad():
        d = chain(_hand_drafter(), HIDDEN, BASE, ANCHOR, 0.0)
    # slot 0 after anchor t2: (0, .5, 0) + 0 -> draft 1 = target 3
    # slot 1 after t3: (0, 0, 0) + (0, −1, 1) -> draft 2 = target 0
    # slot 2 after t0: (.2, 0, 0) + (0, 1, −1) -> draft 1 = target 3
    assert d.tokens.tolist() == [[3, 0, 3]]
    torch.testing.assert_close(d.logits, torch.tensor([[[0.0, 0.5, 0.0], [0.0, -1.0, 1.0], [0.2, 1.0, -1.0]]]))
    # confidence: sigmoid(0.5 h0 − 0.5 h1 + w1[prev]·(1, 2) − 1), prev = t2, t3, t0
    want = [_sigmoid(0.5 - 1), _sigmoid(-0.5 - 1 - 1), _sigmoid(1 - 1 + 1 - 1)]
    torch.testing.assert_close(d.confidence, torch.tensor([want]))
    assert d.probs is None
    # unchained (every slot after the anchor) would give (3, 1, 1); feeding back the *draft* id
    # (1 = target t1) at slot 1 would give (2, 0, −1) -> target 1: both differ from (3, 0, 3)


def test_teacher_forced_chain_uses_the_given_tokens():
    with torch.no_grad():
        d = chain(_hand_drafter(), HIDDEN, BASE, ANCHOR, 0.0, forced=torch.tensor([[1, 1, 1]]))
    # slots 1 and 2 follow target t1: bias (2, 0, −1)
    torch.testing.assert_close(d.logits, torch.tensor([[[0.0, 0.5, 0.0], [2.0, 0.0, -1.0], [2.2, 0.0, -1.0]]]))
    assert d.tokens.tolist() == [[3, 1, 1]]


def test_full_vocab_head_and_no_markov_head():
    with torch.no_grad():
        full = chain(_hand_drafter(reduced=False), HIDDEN, BASE, ANCHOR, 0.0)
        plain = _hand_drafter(markov=False)
        plain.confidence_head = ConfidenceHead(2)  # without the Markov half: proj(h) only
        plain = chain(plain, HIDDEN, BASE, ANCHOR, 0.0)
    assert full.tokens.tolist() == [[1, 0, 1]]  # argmax ids are target ids: slot 1 follows t1, bias (2, 0, −1)
    torch.testing.assert_close(plain.logits, BASE)  # rank 0: the head's logits as they are
    assert plain.tokens.tolist() == [[3, 1, 1]]


def test_sampled_chain_conditions_on_the_sample_and_widens_q():
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        d = chain(_hand_drafter(), HIDDEN, BASE, ANCHOR, 1.0, generator=gen)
    # q0 = softmax(0, .5, 0) over draft ids (0, 1, 2), scattered to targets (1, 3, 0); target 2 gets 0
    z = 2 + math.exp(0.5)
    torch.testing.assert_close(d.probs[0, 0], torch.tensor([1 / z, 1 / z, 0.0, math.exp(0.5) / z]))
    assert set(d.tokens[0].tolist()) <= {0, 1, 3}
    torch.testing.assert_close(d.probs.sum(-1), torch.ones(1, 3))
    assert bool((d.probs[..., 2] == 0).all())
    # slot 1's distribution is the one after the token actually sampled at slot 0
    hand = _hand_drafter()
    _, bias = hand.markov_head(d.tokens[:, 0])
    q1 = torch.softmax(BASE[:, 1] + bias, dim=-1)[0]
    with torch.no_grad():
        torch.testing.assert_close(d.probs[0, 1, [1, 3, 0]], q1)
    again = chain(_hand_drafter(), HIDDEN, BASE, ANCHOR, 1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.tokens, d.tokens)


def test_vocab_maps_are_checked():
    ok = {"d2t": torch.tensor([1, 2, -2]), "t2d": torch.tensor([True, True, False, True])}
    check_vocab_maps(ok, 4, "x")
    with pytest.raises(WeightsError, match="outside the target vocabulary"):
        check_vocab_maps({"d2t": torch.tensor([1, 2, 5])}, 4, "x")
    with pytest.raises(WeightsError, match="two draft ids to one target id"):
        check_vocab_maps({"d2t": torch.tensor([1, 0, -2])}, 4, "x")
    with pytest.raises(WeightsError, match="disagree"):
        check_vocab_maps({"d2t": ok["d2t"], "t2d": torch.tensor([True, True, True, False])}, 4, "x")


TARGET = tiny.target_config(vocab=8, layers=4, tie=False)
PROMPT = [1, 2, 3, 4, 5]
N = 16


def _dspark(anchor: bool, **extra) -> dict:
    return tiny.drafter_config(TARGET, block_size=4, extra={
        "architectures": ["DSparkDraftModel"], "markov_rank": 8, "sample_from_anchor": anchor,
        "draft_vocab_size": 6, **extra})


def _agreeing_dspark(path, anchor: bool, target):
    """A reduced-vocab DSpark drafter whose own head and table are the target's rows and whose
    Markov bias is small: random heads never agree with the target, and the loop's acceptance
    paths (several drafts accepted, the whole block accepted) would go untested."""
    from safetensors.torch import load_file, save_file

    tiny.save_drafter(path, _dspark(anchor), seed=8, residual=0.3, own_embed=True)
    st = load_file(path / "model.safetensors")
    st["lm_head.weight"] = target.head_weight[torch.arange(6) + st["d2t"]].detach().clone()
    st["embed_tokens.weight"] = target.embed_weight.detach().clone()
    st["markov_head.markov_w2.weight"] *= 0.2
    save_file(st, path / "model.safetensors")
    return load_drafter(path)


def test_layout_from_state_refuses_contradictions(tmp_path):
    from dflash_gguf.config import load_config
    from dflash_gguf.reference.load import read_safetensors

    path = tiny.save_drafter(tmp_path, _dspark(True), seed=2)
    cfg, state = load_config(path), read_safetensors(path)
    lay = layout_from_state(cfg, state)
    assert (lay.markov_rank, lay.draft_vocab, lay.reduced, lay.own_head, lay.confidence_with_markov) == (8, 6, True,
                                                                                                           True, True)
    with pytest.raises(WeightsError, match="needs its own lm_head"):
        layout_from_state(cfg, {k: v for k, v in state.items() if k != "lm_head.weight"})
    with pytest.raises(WeightsError, match="the weights lack a d2t map"):
        layout_from_state(cfg, {k: v for k, v in state.items() if k != "d2t"})
    with pytest.raises(WeightsError, match="d2t has 5 entries for draft_vocab_size 6"):
        layout_from_state(cfg, {**state, "d2t": state["d2t"][:5]})
    with pytest.raises(WeightsError, match="weights hold rank 4"):
        layout_from_state(cfg, {**state, "markov_head.markov_w1.weight": torch.zeros(8, 4)})


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return load_target(tiny.save_target(tmp_path_factory.mktemp("t"), TARGET, seed=1))


@pytest.mark.parametrize("anchor", [True, False])
def test_dspark_drafter_in_the_loop(anchor, target, tmp_path):
    d = _agreeing_dspark(tmp_path, anchor, target)
    assert d.lm_head.weight.shape == (6, 64)
    ids = torch.tensor([[1, 2]])
    assert torch.equal(d.embed(ids, torch.zeros(8, 64)), d.embed_tokens.weight[ids])  # its own table
    r = generate(d, target, PROMPT, N, record=True)
    assert r.new_ids == greedy_decode(target, PROMPT, N)  # lossless: the target verifies every draft
    n_draft = 4 if anchor else 3
    assert max(r.acceptance_lengths) == n_draft + 1  # a whole block accepted, bonus included
    end = len(PROMPT) + N
    assert [len(s.draft) for s in r.steps] == [min(n_draft, end - s.start - 1) for s in r.steps]
    mapped = set((torch.arange(6) + d.d2t).tolist())
    assert all(t in mapped for s in r.steps for t in s.draft)  # drafts are target ids through d2t
    assert all(len(s.confidence) == len(s.draft) and all(0 < c < 1 for c in s.confidence) for s in r.steps)

    # round 1 by hand: the drafter's hidden states of slots first..first+n, then the chain
    s = r.steps[0]
    with torch.no_grad():
        h = d(d.embed(torch.tensor([s.block]), target.embed_weight), s.context[None],
              RopeTable(d.rope_spec, 32, torch.float32, torch.device("cpu")), d.new_cache(32))
        first = 0 if anchor else 1
        h = h[:, first:first + n_draft]
        want = chain(d, h, d.compute_logits(h, target.head_weight), torch.tensor([s.block[0]]), 0.0)
    assert s.block == [r.new_ids[0]] + [d.mask_token_id] * 3  # full width even when drafting from slot 0
    assert s.draft == want.tokens[0].tolist()
    torch.testing.assert_close(torch.tensor(s.confidence), want.confidence[0])
    torch.testing.assert_close(s.draft_logits, want.logits[0])

    tf = teacher_forced(d, target, r)  # a drafter replayed on its own trajectory reproduces it
    assert tf.max_abs_diff == 0.0 and tf.token_agreement == 1.0


def test_dspark_seeded_sampling(target, tmp_path):
    d = _agreeing_dspark(tmp_path, True, target)
    runs = [generate(d, target, PROMPT, N, temperature=1.0, seed=3, record=True) for _ in range(2)]
    assert runs[0].new_ids == runs[1].new_ids and runs[0].acceptance_lengths == runs[1].acceptance_lengths
    assert len(runs[0].new_ids) == N
    assert all(1 <= a <= 5 for a in runs[0].acceptance_lengths) and max(runs[0].acceptance_lengths) > 1
    assert generate(d, target, PROMPT, N, temperature=1.0, seed=4).new_ids != runs[0].new_ids
