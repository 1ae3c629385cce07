"""Our reference vs z-lab's own ``dflash_generate`` (PyPI dflash 0.1.0 on transformers 5.15).

Tiny random models are built with transformers' / dflash's classes, saved with
``save_pretrained`` and loaded by our loaders from those files; z-lab runs the in-memory
originals. Every case must give the same output ids, the same drafts in every round, the same
acceptance lengths, and draft logits within 1e-5 in the first block.
"""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
zlab = pytest.importorskip("dflash.model")

from dflash_gguf.reference import generate, load_drafter, load_target, tiny  # noqa: E402

pytestmark = pytest.mark.slow

PROMPT = [1, 2, 3, 4, 5]
HEADS = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=4096, tie_word_embeddings=False)

# name: (target arch, vocab, target seed, drafter seed, drafter config extras, dflash_config extras, generate kwargs)
CASES = {
    "qwen3_greedy": ("qwen3", 8, 1, 8, {}, {}, {}),
    "llama_greedy": ("llama", 8, 4, 3, {}, {}, {}),
    "sliding_then_full": ("qwen3", 8, 1, 8, dict(layer_types=["sliding_attention", "full_attention"],
                                                 use_sliding_window=True, sliding_window=3), {}, {}),
    "sliding_noncausal": ("qwen3", 8, 1, 8, dict(layer_types=["sliding_attention", "sliding_attention"],
                                                 use_sliding_window=True, sliding_window=5, is_causal=False), {}, {}),
    "yarn_drafter_rope": ("qwen3", 8, 1, 8, dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                                                  "original_max_position_embeddings": 16}), {}, {}),
    # transformers' default rope (so z-lab) rotates the whole head whatever partial_rotary_factor says;
    # the reference keeps that for every drafter z-lab defines (vLLM's slice is for MiMo, docs/parity.md)
    "partial_rotary_factor_ignored": ("qwen3", 8, 1, 8, dict(partial_rotary_factor=0.5), {}, {}),
    "output_transform": ("qwen3", 8, 1, 8, {}, dict(final_logit_softcapping=1.5, output_multiplier=0.8,
                                                    input_embedding_scale=1.2), {}),
    "stop_token": ("qwen3", 8, 1, 8, {}, {}, dict(stop_token_ids=[3])),
    "sampling": ("qwen3", 8, 1, 8, {}, {}, dict(temperature=0.8, top_p=0.9, top_k=5)),
    "dflash2_greedy": ("qwen3", 16, 1, 8, {}, {"dflash2": True}, {}),
    "dflash2_sampling": ("qwen3", 16, 1, 8, {}, {"dflash2": True}, dict(temperature=1.0)),
}


def _build(tmp_path, arch, vocab, tseed, dseed, extra, dflash_extra):
    tr = transformers
    if arch == "qwen3":
        target = tr.Qwen3ForCausalLM(tr.Qwen3Config(vocab_size=vocab, num_hidden_layers=4, rope_theta=10000.0, **HEADS))
    else:
        target = tr.LlamaForCausalLM(tr.LlamaConfig(vocab_size=vocab, num_hidden_layers=4, rope_theta=10000.0, **HEADS))
    tiny.randomize_(target, tseed)
    target.eval().save_pretrained(tmp_path / "target")
    dflash2 = dflash_extra.pop("dflash2", False)
    dc = {"mask_token_id": vocab - 1, "target_layer_ids": [0, 3], "block_size": 4, **dflash_extra}
    if dflash2:
        dc.update(conv_kernel_size=2, conv_group_size=16, selector_rank=8, selector_top_k=4)
    cls = zlab.DFlash2DraftModel if dflash2 else zlab.DFlashDraftModel
    kw = dict(HEADS, vocab_size=vocab, num_hidden_layers=2, num_target_layers=4)
    kw.update(extra)
    if "rope_parameters" not in kw:
        kw["rope_theta"] = 1e6
    draft = cls(tr.Qwen3Config(dflash_config=dc, architectures=[cls.__name__], **kw))
    tiny.randomize_(draft, dseed, residual=0.3)
    draft.eval().save_pretrained(tmp_path / "drafter")
    return target, draft


def _run_zlab(draft, target, n, kw, monkeypatch):
    """z-lab's loop, with the verify blocks and draft logits captured by hooks."""
    monkeypatch.setattr(zlab, "_cuda_time", time.perf_counter)  # return_stats synchronizes CUDA otherwise
    blocks, logits = [], []
    hook = target.register_forward_pre_hook(
        lambda m, args, kwargs: blocks.append((kwargs.get("input_ids", args[0] if args else None)).clone()),
        with_kwargs=True)
    compute = draft.compute_logits
    monkeypatch.setattr(draft, "compute_logits", lambda h, head: logits.append(compute(h, head)) or logits[-1])
    try:
        stats = zlab.dflash_generate(draft, target, torch.tensor([PROMPT]), n, kw.get("stop_token_ids"),
                                     temperature=kw.get("temperature", 0.0), top_p=kw.get("top_p", 1.0),
                                     top_k=kw.get("top_k", 0), return_stats=True)
    finally:
        hook.remove()
    drafts = [b[0, 1:].tolist() for b in blocks[1:]]  # blocks[0] is the prefill
    return stats, drafts, [l[0].float() for l in logits]


@pytest.mark.parametrize("case", sorted(CASES))
def test_reproduces_dflash_generate(case, tmp_path, monkeypatch):
    arch, vocab, tseed, dseed, extra, dflash_extra, kw = CASES[case]
    target_hf, draft_hf = _build(tmp_path, arch, vocab, tseed, dseed, dict(extra), dict(dflash_extra))
    target, drafter = load_target(tmp_path / "target"), load_drafter(tmp_path / "drafter")
    n = 48
    # Sampling cases draw from torch's global RNG in the same order in both implementations.
    torch.manual_seed(1234)
    ours = generate(drafter, target, PROMPT, n, kw.get("stop_token_ids"), record=True,
                    **{k: v for k, v in kw.items() if k != "stop_token_ids"})
    torch.manual_seed(1234)
    stats, drafts, logits = _run_zlab(draft_hf, target_hf, n, kw, monkeypatch)

    assert ours.output_ids == stats.output_ids[0].tolist()
    assert [s.draft for s in ours.steps] == drafts
    assert ours.acceptance_lengths == stats.acceptance_lengths
    ours_logits = [s.draft_logits for s in ours.steps if s.draft]
    assert len(ours_logits) == len(logits)
    assert (ours_logits[0] - logits[0]).abs().max().item() <= 1e-5
    assert max((a - b).abs().max().item() for a, b in zip(ours_logits, logits)) <= 1e-4
    if "stop_token_ids" in kw:
        assert ours.stopped and ours.new_ids[-1] in kw["stop_token_ids"]
    else:
        assert len(ours.new_ids) == n
        assert max(ours.acceptance_lengths) > 1  # the case really commits multi-token blocks


def test_reproduces_dflash_generate_bfloat16(tmp_path):
    target_hf, draft_hf = _build(tmp_path, "qwen3", 8, 1, 8, {}, {})
    target = load_target(tmp_path / "target", dtype="bfloat16")
    drafter = load_drafter(tmp_path / "drafter", dtype="bfloat16")
    ours = generate(drafter, target, PROMPT, 40)
    theirs = zlab.dflash_generate(draft_hf.to(torch.bfloat16), target_hf.to(torch.bfloat16),
                                  torch.tensor([PROMPT]), 40, None)
    assert ours.output_ids == theirs[0].tolist()
