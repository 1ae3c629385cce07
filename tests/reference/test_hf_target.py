"""--target-backend transformers: HFTarget drives the loop exactly like the native reference target."""
from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dflash_gguf.errors import TargetError, UsageError  # noqa: E402
from dflash_gguf.reference import Workspace, generate, greedy_decode, load_drafter, load_target, tiny  # noqa: E402
from dflash_gguf.reference.hf_target import HFTarget, load_hf_target  # noqa: E402

pytestmark = pytest.mark.slow

PROMPT = [1, 2, 3, 4, 5]
# (arch, tie, target seed, drafter seed): seeds chosen so greedy runs mix accepted and rejected drafts.
# qwen3-sliding: layers 2-3 use a 6-token window, so crops roll back DynamicSlidingWindowLayer's recorded past.
CASES = {"qwen3": ("qwen3", False, 1, 8), "llama": ("llama", False, 3, 5), "qwen3-tied": ("qwen3", True, 1, 8),
         "qwen3-sliding": ("qwen3", False, 1, 8)}


def _save_hf_target(path, arch: str, tie: bool, seed: int, sliding: bool = False) -> dict:
    """A tiny random target built and saved by transformers itself."""
    cfg = tiny.target_config(arch, vocab=8, layers=4, tie=tie)
    if sliding:
        cfg.update(use_sliding_window=True, sliding_window=6, max_window_layers=2)
    kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    if arch == "qwen3":
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**kwargs))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs))
    tiny.randomize_(model, seed)
    model.save_pretrained(path)
    return cfg


@pytest.fixture(scope="module", params=list(CASES))
def models(request, tmp_path_factory):
    arch, tie, tseed, dseed = CASES[request.param]
    root = tmp_path_factory.mktemp(f"hf-{request.param}")
    cfg = _save_hf_target(root / "t", arch, tie, tseed, sliding=request.param.endswith("sliding"))
    drafter = load_drafter(tiny.save_drafter(root / "d", tiny.drafter_config(cfg, block_size=4), seed=dseed,
                                             residual=0.3), device="cpu")
    native = load_target(root / "t", device="cpu")
    hf = load_hf_target(root / "t", dtype="float32", device="cpu")
    return request.param, drafter, native, hf


def test_generate_matches_native(models):
    name, drafter, native, hf = models
    assert isinstance(hf, HFTarget)
    a = generate(drafter, native, PROMPT, 40, record=True)
    b = generate(drafter, hf, PROMPT, 40, record=True)
    assert b.new_ids == a.new_ids
    assert [s.draft for s in b.steps] == [s.draft for s in a.steps]
    assert [s.accepted for s in b.steps] == [s.accepted for s in a.steps]
    assert b.acceptance_lengths == a.acceptance_lengths
    assert (b.steps[0].draft_logits - a.steps[0].draft_logits).abs().max().item() <= 1e-5
    for x, y in zip(a.steps, b.steps):  # the tapped features (incl. the final-normed last layer) agree
        assert torch.allclose(x.context, y.context, atol=1e-5, rtol=0)
    if not name.endswith("tied"):
        assert max(a.acceptance_lengths) > 1 and min(a.acceptance_lengths) < 4  # both paths exercised


def test_greedy_decode_matches_native_and_generate(models):
    _, drafter, native, hf = models
    g = greedy_decode(hf, PROMPT, 40)
    assert g == greedy_decode(native, PROMPT, 40)
    assert generate(drafter, hf, PROMPT, 40).new_ids == g  # lossless through the HF backend too


def test_workspace_reuse_and_block_size_one(models):
    _, drafter, native, hf = models
    ws = Workspace(drafter, hf, 64)
    first = generate(drafter, hf, PROMPT, 30, workspace=ws)
    again = generate(drafter, hf, PROMPT, 30, workspace=ws)  # crop(0) gives a fresh DynamicCache
    assert again.new_ids == first.new_ids == generate(drafter, native, PROMPT, 30).new_ids
    assert generate(drafter, hf, PROMPT, 20, block_size=1).new_ids == greedy_decode(native, PROMPT, 20)


def test_spec_and_weights(models):
    name, _, native, hf = models
    assert hf.spec.vocab_size == native.spec.vocab_size
    assert hf.spec.num_hidden_layers == native.spec.num_hidden_layers
    assert hf.spec.hidden_size == native.spec.hidden_size
    assert hf.spec.tie_word_embeddings is name.endswith("tied")
    assert torch.equal(hf.embed_weight, native.embed_weight)
    assert torch.equal(hf.head_weight, native.head_weight)
    assert hf.lm_head.weight.dtype == torch.float32
    with pytest.raises(TargetError, match="layers"):
        hf.check_taps((0, 4))
    hf.check_taps((0, 3))


def test_cache_crop_tracks_length(models):
    _, _, _, hf = models
    cache = hf.new_cache(16)
    feats = torch.zeros(16, 2 * hf.spec.hidden_size)
    hf(torch.tensor([PROMPT]), None, cache, (0, 3), feats)
    assert cache.length == cache.inner.get_seq_length() == 5
    hf(torch.tensor([[6, 7, 7]]), None, cache, (0, 3), feats)
    cache.crop(6)
    assert cache.length == cache.inner.get_seq_length() == 6
    assert feats[:8].abs().sum(dim=1).gt(0).all() and feats[8:].eq(0).all()
    with pytest.raises(IndexError):
        cache.crop(9)


def test_missing_transformers_is_a_usage_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UsageError, match=r"needs the 'transformers' package: pip install 'dflash-gguf\[hf\]'"):
        load_hf_target(tmp_path)
