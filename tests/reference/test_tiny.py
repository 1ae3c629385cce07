"""reference/tiny.py: tiny random checkpoints in the Hugging Face layout, read back with
safetensors and json (not with our loaders): the files, the tensor shapes the configs imply, the
seeds, and what ``shared``, ``residual`` and a DSpark reduced vocabulary do to the weights."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from dflash_gguf.reference import tiny  # noqa: E402

TARGET = tiny.target_config(vocab=16, layers=3, hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=48)


def test_target_config_and_files(tmp_path):
    cfg = tiny.target_config("llama", tie=False, rope_scaling={"rope_type": "linear", "factor": 2.0})
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert cfg["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
    path = tiny.save_target(tmp_path / "t", TARGET, seed=0)
    assert json.loads((path / "config.json").read_text()) == TARGET
    st = load_file(path / "model.safetensors")
    assert "lm_head.weight" not in st  # tied: the embedding is the head
    assert st["model.embed_tokens.weight"].shape == (16, 32)
    for i in range(3):
        assert st[f"model.layers.{i}.self_attn.q_proj.weight"].shape == (4 * 8, 32)
        assert st[f"model.layers.{i}.self_attn.k_proj.weight"].shape == (2 * 8, 32)
        assert st[f"model.layers.{i}.mlp.down_proj.weight"].shape == (32, 48)
    untied = load_file(tiny.save_target(tmp_path / "u", {**TARGET, "tie_word_embeddings": False}) / "model.safetensors")
    assert untied["lm_head.weight"].shape == (16, 32)


def test_seeds_make_the_weights(tmp_path):
    a = load_file(tiny.save_target(tmp_path / "a", TARGET, seed=4) / "model.safetensors")
    b = load_file(tiny.save_target(tmp_path / "b", TARGET, seed=4) / "model.safetensors")
    c = load_file(tiny.save_target(tmp_path / "c", TARGET, seed=5) / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.layers.0.self_attn.q_proj.weight"], c["model.layers.0.self_attn.q_proj.weight"])
    norm = a["model.layers.0.input_layernorm.weight"]
    assert (norm - 1).abs().max() < 0.6 and not torch.equal(norm, torch.ones_like(norm))  # gains near 1


def test_residual_scales_only_what_the_sublayers_add(tmp_path):
    one = load_file(tiny.save_target(tmp_path / "a", TARGET, seed=2) / "model.safetensors")
    half = load_file(tiny.save_target(tmp_path / "b", TARGET, seed=2, residual=0.5) / "model.safetensors")
    for k in one:
        if k.endswith(("o_proj.weight", "down_proj.weight")):
            assert torch.equal(half[k], one[k] * 0.5), k  # the same draw, halved (exact in float32)
        else:
            assert torch.equal(half[k], one[k]), k


def test_shared_direction_makes_embeddings_alike(tmp_path):
    def mean_cosine(shared):
        st = load_file(tiny.save_target(tmp_path / f"s{shared}", TARGET, seed=3, shared=shared) / "model.safetensors")
        e = torch.nn.functional.normalize(st["model.embed_tokens.weight"], dim=-1)
        sim = e @ e.T
        return (sim.sum() - sim.diagonal().sum()) / (sim.numel() - len(sim))

    # unit-normal rows in 32 dimensions are nearly orthogonal; a common row of norm ~3 * sqrt(32) dominates them
    assert abs(mean_cosine(0.0)) < 0.1 and mean_cosine(3.0) > 0.8


def test_drafter_config_defaults_and_knobs():
    d = tiny.drafter_config(TARGET)
    assert d["dflash_config"] == {"mask_token_id": 15, "target_layer_ids": [0, 2], "block_size": 4}
    assert d["architectures"] == ["DFlashDraftModel"] and d["num_target_layers"] == 3
    assert d["hidden_size"] == 32 and d["tie_word_embeddings"] is False
    d2 = tiny.drafter_config(TARGET, dflash2=True, taps=(1,), softcap=30.0, sliding_window=8,
                             layer_types=["sliding_attention", "full_attention"], dflash_extra={"x": 1}, extra={"y": 2})
    assert d2["architectures"] == ["DFlash2DraftModel"]
    assert d2["dflash_config"]["target_layer_ids"] == [1] and d2["dflash_config"]["final_logit_softcapping"] == 30.0
    assert d2["dflash_config"]["selector_top_k"] == 4 and d2["dflash_config"]["x"] == 1 and d2["y"] == 2
    assert d2["sliding_window"] == 8 and d2["use_sliding_window"] is True


def test_drafter_files_have_the_drafters_tensors(tmp_path):
    path = tiny.save_drafter(tmp_path / "d", tiny.drafter_config(TARGET, layers=2, taps=(0, 1, 2)), seed=1)
    st = load_file(path / "model.safetensors")
    assert st["fc.weight"].shape == (32, 3 * 32)  # the taps' features concatenated -> hidden
    assert st["hidden_norm.weight"].shape == (32,)
    assert {k.split(".")[1] for k in st if k.startswith("layers.")} == {"0", "1"}
    assert "embed_tokens.weight" not in st and "lm_head.weight" not in st  # the target's are used


def test_a_reduced_dspark_head_maps_its_ids_through_d2t(tmp_path):
    cfg = tiny.drafter_config(TARGET, block_size=4, extra={
        "architectures": ["DSparkDraftModel"], "markov_rank": 4, "sample_from_anchor": True, "draft_vocab_size": 6})
    st = load_file(tiny.save_drafter(tmp_path / "d", cfg, seed=2, own_embed=True) / "model.safetensors")
    spread = [0, 2, 4, 6, 8, 10]  # the first six of the even target ids, then the odd ones
    assert (st["d2t"] + torch.arange(6)).tolist() == spread
    assert st["t2d"].dtype == torch.bool and torch.nonzero(st["t2d"]).flatten().tolist() == spread
    assert st["lm_head.weight"].shape == (6, 32) and st["embed_tokens.weight"].shape == (16, 32)
    chosen = [15, 3, 7, 0, 1, 2]
    st = load_file(tiny.save_drafter(tmp_path / "e", cfg, seed=2, draft_ids=chosen) / "model.safetensors")
    assert (st["d2t"] + torch.arange(6)).tolist() == chosen and sorted(torch.nonzero(st["t2d"]).flatten().tolist()) == sorted(chosen)
