"""reference/drafting.py: which block each drafter family runs and which slots are drafts
(block_shape), and one drafting round on tiny random drafters: greedy drafts are the argmax of
the head's logits over the prediction slots, sampled drafts come from sampling_probs of them."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from dflash_gguf.reference import load_drafter, load_target, tiny  # noqa: E402
from dflash_gguf.reference.common import RopeTable  # noqa: E402
from dflash_gguf.reference.drafting import block_shape, draft  # noqa: E402
from dflash_gguf.reference.sampling import sampling_probs  # noqa: E402

TARGET = tiny.target_config(vocab=32, layers=4, tie=False)


def test_block_shape_by_anchor_convention():
    anchor = SimpleNamespace(is_dspark=True, first_draft_slot=0)
    bonus = SimpleNamespace(is_dspark=True, first_draft_slot=1)
    dflash = SimpleNamespace(is_dspark=False)
    assert block_shape(anchor, 4, 100) == (4, 0, 4)  # B slots, B drafts
    assert block_shape(bonus, 4, 100) == (4, 1, 3)  # slot 0 is a bonus anchor: B − 1 drafts
    assert block_shape(anchor, 4, 3) == (4, 0, 2)  # full width, drafts cut to the room left
    assert block_shape(dflash, 4, 3) == (3, 1, 2)  # DFlash shrinks the block instead (z-lab)


def test_block_shape_with_no_room_left():
    # room 1: only the anchor fits; DFlash runs a 1-wide block with no drafts, DSpark its full width
    assert block_shape(SimpleNamespace(is_dspark=False), 8, 1) == (1, 1, 0)
    assert block_shape(SimpleNamespace(is_dspark=True, first_draft_slot=0), 8, 1) == (8, 0, 0)
    assert block_shape(SimpleNamespace(is_dspark=True, first_draft_slot=1), 8, 0) == (8, 1, 0)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("drafting")
    target = load_target(tiny.save_target(root / "t", TARGET, seed=1))
    d1 = load_drafter(tiny.save_drafter(root / "d1", tiny.drafter_config(TARGET, block_size=4), seed=2))
    d2 = load_drafter(tiny.save_drafter(root / "d2", tiny.drafter_config(TARGET, block_size=4, dflash2=True), seed=3))
    return target, d1, d2


def _round(drafter, target, temperature=0.0, **kw):
    """One round after 6 committed positions: block [last, MASK x 3], slots 1..3 drafted."""
    gen = torch.Generator().manual_seed(0)
    ctx = torch.randn(1, 6, drafter.fc.in_features, generator=gen)
    block = torch.tensor([[5] + [drafter.mask_token_id] * 3])
    rope = RopeTable(drafter.rope_spec, 16, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        d = draft(drafter, block, ctx, rope, drafter.new_cache(16), target.embed_weight, target.head_weight, 1, 3,
                  temperature, **kw)
        # the same forward pass by hand: the drafter's hidden states, then the target's head
        h = drafter(drafter.embed(block, target.embed_weight), ctx, rope, drafter.new_cache(16))[:, 1:4]
        want_logits = F.linear(h, target.head_weight)
    return d, want_logits


def test_greedy_drafts_are_the_argmax_of_the_prediction_slots(models):
    target, d1, _ = models
    d, want = _round(d1, target)
    torch.testing.assert_close(d.logits, want)
    assert d.tokens.shape == (1, 3) and torch.equal(d.tokens, want.argmax(-1))
    assert d.probs is None and d.indices is None and d.confidence is None


def test_sampled_drafts_come_from_sampling_probs(models):
    target, d1, _ = models
    kw = dict(top_p=0.9, top_k=5)
    a, want = _round(d1, target, 1.3, generator=torch.Generator().manual_seed(7), **kw)
    b, _ = _round(d1, target, 1.3, generator=torch.Generator().manual_seed(7), **kw)
    torch.testing.assert_close(a.probs, sampling_probs(want, 1.3, **kw))
    assert torch.equal(a.tokens, b.tokens)  # seeded
    assert bool((a.probs.gather(-1, a.tokens[..., None]) > 0).all())  # drawn where there is mass
    one, want = _round(d1, target, 0.7, top_k=1, generator=torch.Generator().manual_seed(8))
    assert torch.equal(one.tokens, want.argmax(-1))  # top-k 1 is greedy


def test_dflash2_drafts_are_among_each_slots_top_k(models):
    target, _, d2 = models
    d, want = _round(d2, target)
    k = d2.candidate_selector.top_k
    top = want.topk(k, dim=-1).indices
    assert d.indices.shape == (1, 3, k) and d.probs is None
    assert all(int(d.tokens[0, p]) in top[0, p].tolist() for p in range(3))
    assert torch.equal(d.indices.sort(-1).values, top.sort(-1).values)
    s, _ = _round(d2, target, 1.0, generator=torch.Generator().manual_seed(1))
    assert s.probs.shape == (1, 3, k) and torch.allclose(s.probs.sum(-1), torch.ones(1, 3))
