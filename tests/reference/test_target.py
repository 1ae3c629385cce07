"""The reference target: cache-free float64 re-derivation, feature taps, loading quirks."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.errors import ConfigError, TargetError  # noqa: E402
from dflash_gguf.reference import load_target, tiny  # noqa: E402
from dflash_gguf.reference.common import RopeTable  # noqa: E402

F = torch.nn.functional


def _rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def naive_target(sd, cfg, ids):
    """(logits (L, V), hidden_states list as transformers builds it) with no cache, causal, float64."""
    sd = {k: v.detach().double() for k, v in sd.items()}
    eps, D, L = cfg["rms_norm_eps"], cfg["head_dim"], len(ids)
    inv = cfg["rope_theta"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(L, dtype=torch.float64)[:, None] * inv
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]

    def rope(x):
        return x * cos + torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1) * sin

    x = sd["model.embed_tokens.weight"][ids]
    states = [x]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, sd[p + "input_layernorm.weight"], eps)
        q = (h @ sd[p + "self_attn.q_proj.weight"].T).view(L, -1, D)
        k = (h @ sd[p + "self_attn.k_proj.weight"].T).view(L, -1, D)
        v = (h @ sd[p + "self_attn.v_proj.weight"].T).view(L, -1, D)
        if cfg["model_type"] == "qwen3":
            q, k = _rms(q, sd[p + "self_attn.q_norm.weight"], eps), _rms(k, sd[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q), rope(k)
        groups = q.shape[1] // k.shape[1]
        out = torch.zeros_like(q)
        for hq in range(q.shape[1]):
            s = q[:, hq] @ k[:, hq // groups].T * D**-0.5
            s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
            out[:, hq] = torch.softmax(s, -1) @ v[:, hq // groups]
        x = x + out.reshape(L, -1) @ sd[p + "self_attn.o_proj.weight"].T
        h = _rms(x, sd[p + "post_attention_layernorm.weight"], eps)
        x = x + (F.silu(h @ sd[p + "mlp.gate_proj.weight"].T) * (h @ sd[p + "mlp.up_proj.weight"].T)) @ sd[
            p + "mlp.down_proj.weight"].T
        states.append(x)
    x = _rms(x, sd["model.norm.weight"], eps)
    states[-1] = x  # transformers replaces the last entry with the final-normed state
    head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    return x @ head.T, states


@pytest.mark.parametrize("arch,tie", [("qwen3", False), ("qwen3", True), ("llama", False)])
def test_cached_forward_matches_naive(arch, tie, tmp_path):
    cfg = tiny.target_config(arch, vocab=48, layers=3, tie=tie)
    target = load_target(tiny.save_target(tmp_path, cfg, seed=2))
    if tie:
        assert target.lm_head.weight is target.model.embed_tokens.weight
    assert (target.model.layers[0].self_attn.q_norm is None) == (arch == "llama")
    ids = torch.randint(0, 48, (13,), generator=torch.Generator().manual_seed(0))
    taps = (0, 1, 2)  # 2 is the last layer: its "feature" is the final-normed state
    cap = 16
    cache, rope = target.new_cache(cap), RopeTable(target.spec.rope, cap, torch.float32, torch.device("cpu"))
    feats = torch.full((cap, 3 * cfg["hidden_size"]), float("nan"))
    chunks, logits = [(0, 6), (6, 7), (7, 11), (11, 13)], []  # prefill, one token, a verify block, another
    with torch.no_grad():
        for a, b in chunks:
            logits.append(target(ids[None, a:b], rope, cache, taps, feats)[0])
    want_logits, states = naive_target(target.state_dict(), cfg, ids)
    torch.testing.assert_close(torch.cat(logits).double(), want_logits, rtol=1e-4, atol=1e-4)
    want_feats = torch.cat([states[t + 1] for t in taps], -1)  # z-lab's hidden_states[L + 1]
    torch.testing.assert_close(feats[:13].double(), want_feats, rtol=1e-4, atol=1e-4)
    assert torch.isnan(feats[13:]).all()  # nothing written past the tokens fed


def test_crop_discards_rejected_rows(tmp_path):
    cfg = tiny.target_config(vocab=48, layers=2)
    target = load_target(tiny.save_target(tmp_path, cfg))
    rope = RopeTable(target.spec.rope, 32, torch.float32, torch.device("cpu"))
    a, b = target.new_cache(32), target.new_cache(32)
    with torch.no_grad():
        target(torch.tensor([[1, 2, 3]]), rope, a)
        target(torch.tensor([[9, 9, 9, 9]]), rope, a)  # a verify block that gets rejected
        a.crop(4)  # keep only its first token (9)
        la = target(torch.tensor([[5]]), rope, a)
        target(torch.tensor([[1, 2, 3, 9]]), rope, b)
        lb = target(torch.tensor([[5]]), rope, b)
    torch.testing.assert_close(la, lb)


def test_logits_to_keep(tmp_path):
    target = load_target(tiny.save_target(tmp_path, tiny.target_config(vocab=48, layers=2)))
    rope = RopeTable(target.spec.rope, 8, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        full = target(torch.tensor([[1, 2, 3]]), rope, target.new_cache(8))
        last = target(torch.tensor([[1, 2, 3]]), rope, target.new_cache(8), logits_to_keep=1)
    assert last.shape == (1, 1, 48)
    torch.testing.assert_close(last[0, 0], full[0, -1])


def test_bad_taps_and_unsupported_models(tmp_path):
    target = load_target(tiny.save_target(tmp_path / "t", tiny.target_config(vocab=48, layers=2)))
    with pytest.raises(TargetError, match="valid 0..1"):
        target.check_taps((0, 2))
    bad = tiny.target_config(vocab=48, layers=2)
    bad["model_type"] = "gemma3"
    with pytest.raises(ConfigError, match="gemma3"):
        tiny.save_target(tmp_path / "g", bad)


def test_matches_transformers_with_scaled_rope(tmp_path):
    """Llama with llama3 rope and Qwen3 with yarn against transformers itself (hidden states too)."""
    tr = pytest.importorskip("transformers")
    scalings = {
        "llama": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8},
        "qwen3": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
    }
    for arch, scaling in scalings.items():
        cfg = tiny.target_config(arch, vocab=48, layers=3, rope_scaling=scaling, max_positions=64)
        path = tiny.save_target(tmp_path / arch, cfg, seed=4)
        hf = tr.AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
        ours = load_target(path)
        ids = torch.randint(0, 48, (1, 20), generator=torch.Generator().manual_seed(1))
        feats = torch.zeros(32, 3 * cfg["hidden_size"])
        with torch.no_grad():
            out = hf(ids, output_hidden_states=True)
            logits = ours(ids, RopeTable(ours.spec.rope, 32, torch.float32, torch.device("cpu")), ours.new_cache(32),
                          (0, 1, 2), feats)
        torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(feats[:20], torch.cat([out.hidden_states[i + 1][0] for i in (0, 1, 2)], -1),
                                   rtol=1e-5, atol=1e-5)


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures" / "targets"


def _logits(target, ids):
    with torch.no_grad():
        return target(ids, RopeTable(target.spec.rope, 16, torch.float32, torch.device("cpu")), target.new_cache(16))


def test_llama_gguf_target_matches_hf_dir():
    """llama.cpp's converter permutes llama Q/K rows; loading must undo it exactly."""
    from dflash_gguf.reference.load import target_from_gguf

    if not (FIXTURES / "llama-tiny.gguf").is_file():
        pytest.skip("fixtures/targets/llama-tiny.gguf not present")
    ids = torch.tensor([[1, 5, 9, 33, 7, 100, 42]])
    want = _logits(load_target(FIXTURES / "llama-tiny"), ids)
    torch.testing.assert_close(_logits(target_from_gguf(FIXTURES / "llama-tiny.gguf"), ids), want, rtol=0, atol=0)


def test_qwen3_gguf_target_matches_safetensors(tmp_path):
    gguf = pytest.importorskip("gguf")
    from dflash_gguf.reference.load import target_from_gguf

    cfg = tiny.target_config(vocab=48, layers=2, tie=False, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                                          "original_max_position_embeddings": 8})
    ours = load_target(tiny.save_target(tmp_path / "hf", cfg, seed=6))
    w = gguf.GGUFWriter(tmp_path / "t.gguf", "qwen3")
    w.add_block_count(2)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(64)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(16)
    w.add_value_length(16)
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(4.0)
    w.add_rope_scaling_orig_ctx_len(8)
    # Names from gguf-py's own TensorNameMap (what llama.cpp's converter uses), not from our tables.
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, 2)
    for name, t in ours.state_dict().items():
        w.add_tensor(name_map.get_name(name, try_suffixes=(".weight", ".bias")), t.detach().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]])  # past original_max_position_embeddings: yarn matters
    torch.testing.assert_close(_logits(target_from_gguf(tmp_path / "t.gguf"), ids), _logits(ours, ids), rtol=0, atol=0)
