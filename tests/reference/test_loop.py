"""The draft → verify loop: lossless greedy, edges, stop tokens, sampling, caches, teacher forcing."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.reference import (  # noqa: E402
    Workspace, generate, greedy_decode, load_drafter, load_target, teacher_forced, tiny,
)

# vocab 8 and these seeds give a mix of acceptance lengths 1..4 (random models rarely agree).
TARGET = tiny.target_config(vocab=8, layers=4, tie=False)
PROMPT = [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("loop")
    target = load_target(tiny.save_target(root / "t", TARGET, seed=1))
    drafter = load_drafter(tiny.save_drafter(root / "d", tiny.drafter_config(TARGET, block_size=4), seed=8,
                                             residual=0.3))
    return drafter, target


@pytest.fixture(scope="module")
def greedy(models):
    return greedy_decode(models[1], PROMPT, 60)


def _naive_greedy(target, prompt, n):
    """Greedy with a fresh cache every token: independent of the cache bookkeeping under test."""
    from dflash_gguf.reference.common import RopeTable

    ids = list(prompt)
    for _ in range(n):
        rope = RopeTable(target.spec.rope, len(ids), torch.float32, torch.device("cpu"))
        with torch.no_grad():
            logits = target(torch.tensor([ids]), rope, target.new_cache(len(ids)), logits_to_keep=1)
        ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_greedy_decode_is_plain_greedy(models, greedy):
    assert greedy[:20] == _naive_greedy(models[1], PROMPT, 20)


@pytest.mark.parametrize("block_size", [None, 2, 7])
def test_lossless_at_temperature_zero(models, greedy, block_size):
    drafter, target = models
    r = generate(drafter, target, PROMPT, 60, block_size=block_size)
    assert r.new_ids == greedy
    assert r.output_ids == PROMPT + greedy
    if block_size is None:
        assert max(r.acceptance_lengths) > 2  # the fixture really exercises multi-token commits


def test_block_size_one_is_autoregressive(models, greedy):
    drafter, target = models
    r = generate(drafter, target, PROMPT, 12, block_size=1)
    assert r.new_ids == greedy[:12]
    assert all(s.draft == [] and s.produced == 1 for s in r.steps)


def test_step_bookkeeping(models):
    drafter, target = models
    r = generate(drafter, target, PROMPT, 45)
    assert sum(r.acceptance_lengths) + 1 == len(r.new_ids) == 45
    committed = PROMPT + r.new_ids
    for s in r.steps:
        assert s.block[0] == committed[s.start]
        assert s.block[1:] == [drafter.mask_token_id] * (len(s.block) - 1)
        assert len(s.draft) == len(s.block) - 1 and 0 <= s.accepted <= len(s.draft)
        assert 1 <= s.produced <= s.accepted + 1
        assert committed[s.start + 1:s.start + 1 + s.produced] == (s.draft[:s.accepted] + [s.bonus])[:s.produced]
    assert r.acceptance_lengths == [s.produced for s in r.steps]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 9, 10, 11, 19, 23])
def test_max_new_tokens_edges(models, greedy, n):
    drafter, target = models
    r = generate(drafter, target, PROMPT, n)
    assert r.new_ids == greedy[:n]
    # The bonus past the end is written to the buffer but never counted as produced.
    assert sum(r.acceptance_lengths) + 1 == max(n, 1) if n else r.acceptance_lengths == []
    if n <= 1:
        assert r.steps == []  # the prefill alone produced everything
    else:
        # The last round never drafts past the end: its block is cut to the remaining slots.
        assert all(s.start + len(s.block) <= len(PROMPT) + n for s in r.steps)


def test_stop_tokens(models, greedy):
    drafter, target = models
    seen = set()
    for k, tok in enumerate(greedy[:30]):
        if tok in seen:
            continue
        seen.add(tok)
        r = generate(drafter, target, PROMPT, 60, stop_token_ids=[tok])
        assert r.new_ids == greedy[:k + 1] and r.stopped
        if k == 0:
            assert r.steps == []  # the prefill's own token stops it
    r = generate(drafter, target, PROMPT, 60, stop_token_ids=[t for t in range(8) if t not in greedy])
    assert r.new_ids == greedy and not r.stopped


def test_mask_id_in_output_is_kept_and_not_a_stop(models, tmp_path, greedy):
    """z-lab PR #76: the buffer tail is full of mask ids; only the committed slice is scanned."""
    drafter, target = models
    common = max(set(greedy), key=greedy.count)
    cfg = tiny.drafter_config(TARGET, block_size=4, mask_token_id=common)
    masked = load_drafter(tiny.save_drafter(tmp_path, cfg, seed=8, residual=0.3))
    assert generate(masked, target, PROMPT, 60).new_ids == greedy
    absent = next(t for t in range(8) if t not in greedy)
    cfg = tiny.drafter_config(TARGET, block_size=4, mask_token_id=absent)
    masked = load_drafter(tiny.save_drafter(tmp_path / "absent", cfg, seed=8, residual=0.3))
    r = generate(masked, target, PROMPT, 60, stop_token_ids=[absent])
    assert r.new_ids == greedy and not r.stopped


def test_sampling_is_seeded(models):
    drafter, target = models
    kw = dict(temperature=1.5, top_p=0.95, top_k=6)
    a = generate(drafter, target, PROMPT, 40, seed=11, **kw)
    b = generate(drafter, target, PROMPT, 40, seed=11, **kw)
    assert a.new_ids == b.new_ids and a.acceptance_lengths == b.acceptance_lengths
    others = [generate(drafter, target, PROMPT, 40, seed=s, **kw).new_ids for s in (12, 13, 14)]
    assert any(o != a.new_ids for o in others)
    # seed=None uses torch's global RNG, like z-lab: seeding it reproduces the run.
    torch.manual_seed(3)
    c = generate(drafter, target, PROMPT, 40, **kw)
    torch.manual_seed(3)
    assert generate(drafter, target, PROMPT, 40, **kw).new_ids == c.new_ids


def test_top_k_one_sampling_equals_greedy(models, greedy):
    """With top_k=1 both distributions are one-hot: rejection sampling must reduce to prefix match."""
    drafter, target = models
    r = generate(drafter, target, PROMPT, 60, temperature=0.7, top_k=1, seed=0)
    assert r.new_ids == greedy


def test_bad_arguments(models):
    drafter, target = models
    for kw in (dict(temperature=-1.0), dict(top_p=0.0), dict(top_k=-1)):
        with pytest.raises(ValueError):
            generate(drafter, target, PROMPT, 4, **kw)
    with pytest.raises(ValueError):
        generate(drafter, target, [], 4)


def test_static_workspace(models, greedy):
    drafter, target = models
    ws = Workspace(drafter, target, 80)
    tensors = [ws.target_cache.k, ws.target_cache.v, ws.draft_cache.k, ws.draft_cache.v, ws.features, ws.ids]
    ptrs = [t.data_ptr() for t in tensors]
    for n in (60, 30, 60):
        assert generate(drafter, target, PROMPT, n, workspace=ws).new_ids == greedy[:n]
    assert [t.data_ptr() for t in (ws.target_cache.k, ws.target_cache.v, ws.draft_cache.k, ws.draft_cache.v,
                                   ws.features, ws.ids)] == ptrs
    with pytest.raises(ValueError, match="too small"):
        generate(drafter, target, PROMPT, 80, workspace=ws)


@pytest.mark.gpu
def test_cuda_matches_cpu(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    t = tiny.save_target(tmp_path / "t", TARGET, seed=1)
    d = tiny.save_drafter(tmp_path / "d", tiny.drafter_config(TARGET, block_size=4), seed=8, residual=0.3)
    runs = [generate(load_drafter(d, device=dev), load_target(t, device=dev), PROMPT, 40).new_ids
            for dev in ("cpu", "cuda")]
    assert runs[0] == runs[1]


# --- draft_context: older llama.cpp's cross_ctx cap ---------------------------------------------
LONG_PROMPT = [1, 2, 3, 4, 5, 6, 0, 2, 4, 6, 1, 3, 5, 0, 1, 2]


def _same(a, b):
    assert a.new_ids == b.new_ids and a.acceptance_lengths == b.acceptance_lengths
    assert [s.draft for s in a.steps] == [s.draft for s in b.steps]
    for x, y in zip(a.steps, b.steps):
        assert (x.draft_logits is None) == (y.draft_logits is None)
        if x.draft_logits is not None:
            assert torch.equal(x.draft_logits, y.draft_logits)


def test_draft_context_at_least_the_length_changes_nothing(models):
    drafter, target = models
    free = generate(drafter, target, LONG_PROMPT, 30, record=True)
    for cap in (len(LONG_PROMPT) + 30, len(LONG_PROMPT) + 28, 10_000):
        _same(generate(drafter, target, LONG_PROMPT, 30, record=True, draft_context=cap), free)
    with pytest.raises(ValueError, match="draft_context"):
        generate(drafter, target, PROMPT, 4, draft_context=0)


def test_draft_context_cap_matches_an_independent_windowed_run(models):
    """Each round: the drafter run on a fresh cache fed only the last N context features, at their
    absolute positions, gives the logits generate(..., draft_context=N) recorded."""
    from dflash_gguf.reference.common import RopeTable

    drafter, target = models
    N = 4
    capped = generate(drafter, target, LONG_PROMPT, 30, record=True, draft_context=N)
    free = generate(drafter, target, LONG_PROMPT, 30, record=True)
    full = RopeTable(drafter.rope_spec, len(LONG_PROMPT) + 30, torch.float32, torch.device("cpu"))
    feats, checked = [], 0
    for s in capped.steps:
        if not s.draft:
            continue
        feats.append(s.context)
        context = torch.cat(feats)  # features of positions [0, start)
        assert context.shape[0] == s.start
        lo = max(0, s.start - N)

        class rope:  # a fresh cache starts at 0: shift to the absolute positions
            def __call__(a, b, lo=lo):
                return full(a + lo, b + lo)

            def rolled(a, b, lo=lo):
                return full.rolled(a + lo, b + lo)

        cache = drafter.new_cache(N + len(s.block))
        with torch.no_grad():
            block = torch.tensor([s.block])
            hidden = drafter(drafter.embed(block, target.embed_weight), context[lo:][None], rope, cache)[:, 1:]
            logits = drafter.compute_logits(hidden, target.head_weight)[0]
        torch.testing.assert_close(logits, s.draft_logits, atol=1e-5, rtol=0)
        checked += 1
    assert checked >= 3
    # The first round has the same inputs in both runs except the cap (prompt 16 > N): it must matter.
    assert capped.steps[0].start == free.steps[0].start == len(LONG_PROMPT)
    assert (capped.steps[0].draft_logits - free.steps[0].draft_logits).abs().max() > 1e-3


@pytest.mark.parametrize("cap", [1, 3, 8])
def test_draft_context_cap_is_still_lossless(models, cap):
    drafter, target = models
    r = generate(drafter, target, LONG_PROMPT, 40, draft_context=cap)
    assert r.new_ids == greedy_decode(target, LONG_PROMPT, 40)


def test_draft_context_workspace_reuse_and_teacher_forced(models):
    drafter, target = models
    ws = Workspace(drafter, target, 60)
    free = generate(drafter, target, LONG_PROMPT, 30, record=True)
    capped = generate(drafter, target, LONG_PROMPT, 30, record=True, draft_context=4, workspace=ws)
    # a capped run leaves no window behind in a reused workspace
    _same(generate(drafter, target, LONG_PROMPT, 30, record=True, workspace=ws), free)
    assert capped.draft_context == 4 and free.draft_context is None
    tf = teacher_forced(drafter, target, capped)  # replayed with the same cap
    assert tf.max_abs_diff == 0.0 and tf.token_agreement == 1.0


def test_divergence_lines_up_with_the_drafts(models, greedy):
    """divergence=True: one KL per drafted position, the verify row that judged that draft. At
    temperature 0 a draft is accepted exactly when it is the target's argmax there, and every draft is
    the drafter's argmax, so the accepted run is the leading run of same-top positions."""
    drafter, target = models
    r = generate(drafter, target, PROMPT, 60, divergence=True)
    assert r.new_ids == greedy  # the bookkeeping changes nothing
    drafted = [s for s in r.steps if s.draft]
    assert sum(s.accepted for s in drafted) > 0  # the check below is not vacuous
    for s in drafted:
        kl = s.divergence
        assert kl.count == len(s.draft) and (kl.values >= 0).all()
        lead = next((i for i, same in enumerate(kl.same.tolist()) if not same), len(s.draft))
        assert s.accepted == lead
    assert all(s.divergence is None for s in generate(drafter, target, PROMPT, 20).steps)
