"""reference/sampling.py: temperature / top-k / top-p probabilities worked out by hand, the
speculative-sampling rule checked on its defining property (the emitted token is distributed as
the target's p), and z-lab's own functions (PyPI dflash 0.1.0) drawing the same numbers."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.reference.sampling import (  # noqa: E402
    rejection_sample, sample, sample_probs, sampling_probs, validate_sampling,
)

# softmax of log(1..4) is (1, 2, 3, 4) / 10
LOGITS = torch.log(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))


def _close(a, b):
    torch.testing.assert_close(a, torch.tensor(b, dtype=torch.float32), rtol=1e-6, atol=1e-7)


def test_temperature_scales_the_logits():
    _close(sampling_probs(LOGITS, 1.0), [[0.1, 0.2, 0.3, 0.4]])
    root = [math.sqrt(k) for k in (1, 2, 3, 4)]  # logits / 2: exp gives the square roots
    _close(sampling_probs(LOGITS, 2.0), [[r / sum(root) for r in root]])


def test_top_k_keeps_the_k_largest_in_their_places():
    _close(sampling_probs(LOGITS, 1.0, top_k=2), [[0, 0, 3 / 7, 4 / 7]])
    _close(sampling_probs(LOGITS, 1.0, top_k=4), [[0.1, 0.2, 0.3, 0.4]])  # k >= V: no cut
    _close(sampling_probs(LOGITS, 1.0, top_k=0), [[0.1, 0.2, 0.3, 0.4]])


def test_top_p_keeps_tokens_while_the_mass_before_them_is_below_p():
    # sorted 0.4, 0.3, 0.2, 0.1: mass before each 0, 0.4, 0.7, 0.9
    _close(sampling_probs(LOGITS, 1.0, top_p=0.5), [[0, 0, 3 / 7, 4 / 7]])
    _close(sampling_probs(LOGITS, 1.0, top_p=0.35), [[0, 0, 0, 1]])  # the top token always stays
    _close(sampling_probs(LOGITS, 1.0, top_p=0.95), [[0.1, 0.2, 0.3, 0.4]])


def test_top_k_then_top_p_on_each_row():
    logits = torch.cat([LOGITS, LOGITS.flip(-1)])  # rows (1, 2, 3, 4) and (4, 3, 2, 1)
    # top-3: 2, 3, 4 / 9; then mass before 0, 4/9, 7/9 < 0.6 keeps 4 and 3
    _close(sampling_probs(logits, 1.0, top_p=0.6, top_k=3), [[0, 0, 3 / 7, 4 / 7], [4 / 7, 3 / 7, 0, 0]])


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1)])
def test_bad_settings_are_refused(bad):
    kw = dict(temperature=1.0, top_p=1.0, top_k=0) | bad
    with pytest.raises(ValueError, match="need temperature >= 0"):
        validate_sampling(**kw)
    with pytest.raises(ValueError):
        sample(LOGITS, **kw)


def test_greedy_is_argmax_and_sampling_is_seeded():
    logits = torch.randn(3, 5, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample(logits), logits.argmax(-1))
    assert torch.equal(sample(logits, 0.8, top_k=1, generator=torch.Generator().manual_seed(1)), logits.argmax(-1))
    a = sample(logits, 1.0, generator=torch.Generator().manual_seed(2))
    b = sample(logits, 1.0, generator=torch.Generator().manual_seed(2))
    assert a.shape == (3, 5) and torch.equal(a, b)
    probs = sampling_probs(logits, 1.0, top_k=3)
    drawn = sample_probs(probs, torch.Generator().manual_seed(3))
    assert bool((probs.gather(-1, drawn[..., None]) > 0).all())  # only tokens with mass are drawn


def _one_hot(i, v=5):
    return torch.nn.functional.one_hot(torch.tensor(i), v).float()


def test_all_drafts_accepted_then_the_bonus_from_the_last_row():
    # p >= q for every draft: u * q < p for every u < 1
    draft = torch.tensor([[1, 2]])
    q = torch.stack([_one_hot(1) * 0.5 + 0.125, _one_hot(2) * 0.5 + 0.125])[None]
    p = torch.stack([_one_hot(1), _one_hot(2), _one_hot(4)])[None]
    assert rejection_sample(draft, p, q, generator=torch.Generator().manual_seed(0)) == (2, torch.tensor(4))


def test_a_rejection_samples_the_residual_or_falls_back_to_the_target_row():
    draft = torch.tensor([[1, 2]])
    q = torch.stack([_one_hot(1), _one_hot(2)])[None]
    # draft 2 has p = 0 at position 1: always rejected there; max(p - q, 0) = (0, .25, 0, .75, 0)
    p = torch.stack([_one_hot(1), torch.tensor([0.0, 0.25, 0.0, 0.75, 0.0]), _one_hot(0)])[None]
    for seed in range(5):
        accepted, tok = rejection_sample(draft, p, q, generator=torch.Generator().manual_seed(seed))
        assert accepted == 1 and tok.item() in (1, 3)
    # q covers p everywhere at the rejected position: no residual mass, so the target row itself
    p2 = torch.stack([_one_hot(1), _one_hot(4), _one_hot(0)])[None]
    q2 = torch.stack([_one_hot(1), _one_hot(4)])[None]
    draft2 = torch.tensor([[1, 3]])  # q(3) = 0: u * 0 < p(3) = 0 is false, rejected; p - q = 0
    assert rejection_sample(draft2, p2, q2, generator=torch.Generator().manual_seed(0)) == (1, torch.tensor(4))


def test_candidate_probabilities_over_indices():
    # DFlash2: q is over K candidate ids; the drafted token's q is its candidate's
    draft = torch.tensor([[3]])
    idx = torch.tensor([[[3, 1]]])
    q = torch.tensor([[[0.9, 0.1]]])
    p = torch.stack([torch.tensor([0.0, 0.3, 0.0, 0.5, 0.2]), _one_hot(2)])[None]
    # accept with probability p/q = 0.5/0.9, then the bonus 2; on rejection the residual p - q with q
    # scattered to the candidates: (0, 0.2, 0, -0.4, 0.2) clamped -> tokens 1 or 4
    seen = {rejection_sample(draft, p, q, idx, torch.Generator().manual_seed(s)) for s in range(40)}
    assert {(a, t.item()) for a, t in seen} <= {(1, 2), (0, 1), (0, 4)}
    assert {a for a, _ in seen} == {0, 1}


def test_the_emitted_token_is_distributed_as_the_target():
    # the defining property of speculative sampling: whatever q proposes, the first emitted token ~ p
    gen = torch.Generator().manual_seed(123)
    p_row = torch.tensor([0.1, 0.4, 0.2, 0.3, 0.0])
    q_row = torch.tensor([0.4, 0.1, 0.1, 0.1, 0.3])
    p = torch.stack([p_row, _one_hot(0)])[None]
    counts = torch.zeros(5)
    n = 6000
    drafts = torch.multinomial(q_row, n, replacement=True, generator=gen)
    for d in drafts.tolist():
        accepted, tok = rejection_sample(torch.tensor([[d]]), p, q_row[None, None], generator=gen)
        counts[d if accepted else tok.item()] += 1
    assert (counts / n - p_row).abs().max() < 0.025  # ~4 sigma at n = 6000


@pytest.mark.slow
def test_same_draws_as_zlab():
    """z-lab's _sampling_probs / _sample_probs / _rejection_sample on the global torch RNG, seeded
    the same: the same probabilities bit for bit, the same tokens, the same acceptances."""
    zlab = pytest.importorskip("dflash.model", reason="PyPI dflash (z-lab) is not installed (the [test] extra)")
    gen = torch.Generator().manual_seed(5)
    for case in range(30):
        logits = torch.randn(1, 4, 32, generator=gen) * 3
        kw = dict(temperature=[0.5, 1.0, 1.7][case % 3], top_p=[1.0, 0.9, 0.5][case % 3], top_k=[0, 8, 3][case % 3])
        mine = sampling_probs(logits, **kw)
        assert torch.equal(mine, zlab._sampling_probs(logits, **kw))
        torch.manual_seed(case)
        a = sample_probs(mine)
        torch.manual_seed(case)
        assert torch.equal(a, zlab._sample_probs(mine))
        target = sampling_probs(torch.randn(1, 5, 32, generator=gen) * 2, 1.0)
        draft = torch.multinomial(mine[0], 1, generator=gen).T
        torch.manual_seed(100 + case)
        got = rejection_sample(draft, target, mine)
        torch.manual_seed(100 + case)
        want = zlab._rejection_sample(draft, target, mine)
        assert got[0] == want[0] and torch.equal(got[1], want[1])
