"""The reference drafter against a float64 re-derivation of the DFlash equations, plus its parts."""
from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.config import RopeScaling, load_config  # noqa: E402
from dflash_gguf.errors import ConfigError, WeightsError  # noqa: E402
from dflash_gguf.reference import load_drafter, load_target, tiny  # noqa: E402
from dflash_gguf.reference.common import RopeSpec, RopeTable, inv_freq, visibility_mask  # noqa: E402
from dflash_gguf.reference.drafter import layer_rules  # noqa: E402
from dflash_gguf.reference.rules import attention_rules  # noqa: E402

F = torch.nn.functional


# ---------------------------------------------------------------------------------------------
# A deliberately naive float64 drafter: explicit positions, a python mask, eager softmax.
# ---------------------------------------------------------------------------------------------

def _rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _rope(x, positions, theta, dims=None, pairs=False):
    """x (L, heads, D): rotate the first ``dims`` (default all) in NeoX halves, or GPT-J pairs."""
    R = dims or x.shape[-1]
    inv = theta ** (-torch.arange(0, R, 2, dtype=torch.float64) / R)
    ang = (positions[:, None].double() * inv[None])[:, None]  # (L, 1, R/2)
    if pairs:
        a, b = x[..., 0:R:2], x[..., 1:R:2]
        rot = torch.stack([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()], -1).flatten(-2)
    else:
        a, b = x[..., : R // 2], x[..., R // 2:R]
        rot = torch.cat([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()], -1)
    return torch.cat([rot, x[..., R:]], -1)


def _conv(x, dyn, base, group):  # x (L, H); dyn (L, k, G); base (k, H): causal along the block
    L, H = x.shape
    out = torch.zeros_like(x)
    for p in range(L):
        for o in range(base.shape[0]):
            if p - o >= 0:
                coef = base[o] + dyn[p, o].repeat_interleave(group)
                out[p] += coef * x[p - o]
    return out


def naive_drafter(sd, cfg, embed, head, features, block, first_pos):
    """logits (q-1, V) for block[1:], with the context `features` at positions [first_pos, first_pos+c)."""
    sd = {k: v.detach().double() for k, v in sd.items()}
    # a DSpark drafter that ships its own table and head uses them
    embed, head = sd.get("embed_tokens.weight", embed).detach(), sd.get("lm_head.weight", head).detach()
    eps, D = cfg.rms_norm_eps, cfg.head_dim
    rules = attention_rules(cfg)
    c, q = features.shape[0], len(block)
    ctx = _rms(features.double() @ sd["fc.weight"].T, sd["hidden_norm.weight"], eps)
    x = embed.double()[block] * (cfg.input_embedding_scale or 1.0)
    kpos = torch.arange(first_pos, first_pos + c + q)
    qpos = kpos[c:]
    for i, (causal, window) in enumerate(layer_rules(cfg)):
        p = f"layers.{i}."
        h = _rms(x, sd[p + "input_layernorm.weight"], eps)
        if cfg.is_dflash2:
            dyn = (h @ sd[p + "attention_conv.kernel_projection.weight"].T).view(q, 2, cfg.conv_kernel_size, -1)
            h = _conv(h, dyn[:, 0], sd[p + "attention_conv.base_kernel"][0], cfg.conv_group_size)
        a = p + "self_attn."
        Q = _rms((h @ sd[a + "q_proj.weight"].T).view(q, -1, D), sd[a + "q_norm.weight"], eps)
        K = _rms((torch.cat([ctx, h]) @ sd[a + "k_proj.weight"].T).view(c + q, -1, D), sd[a + "k_norm.weight"], eps)
        V = (torch.cat([ctx, h]) @ sd[a + "v_proj.weight"].T).view(c + q, -1, D) * (rules.value_scale or 1.0)
        rope = dict(dims=rules.rotary_dim, pairs=rules.interleaved)
        Q, K = _rope(Q, qpos, cfg.rope_theta, **rope), _rope(K, kpos, cfg.rope_theta, **rope)
        groups = Q.shape[1] // K.shape[1]
        out = torch.zeros(q, Q.shape[1], D, dtype=torch.float64)
        for hq in range(Q.shape[1]):
            kv = hq // groups
            for iq in range(q):
                qa = int(qpos[iq])
                visible = []
                for jk in range(c + q):
                    ka = int(kpos[jk])
                    ok = (not causal or ka <= qa) and (window is None or qa - ka < window)
                    ok = ok and (causal or window is None or ka - qa < window)
                    visible.append(ok)
                vis = torch.tensor(visible)
                s = (K[:, kv] @ Q[iq, hq]) * D**-0.5
                s[~vis] = -math.inf
                if a + "attention_sink_bias" in sd:  # one more logit in the denominator, no value
                    s = torch.cat([s, sd[a + "attention_sink_bias"][hq:hq + 1]])
                out[iq, hq] = torch.softmax(s, 0)[:c + q] @ V[:, kv]
        h = out.reshape(q, -1) @ sd[a + "o_proj.weight"].T
        if cfg.is_dflash2:
            h = _conv(h, dyn[:, 1], sd[p + "attention_conv.base_kernel"][1], cfg.conv_group_size)
        x = x + h
        h = _rms(x, sd[p + "post_attention_layernorm.weight"], eps)
        if cfg.is_dflash2:
            dyn = (h @ sd[p + "mlp_conv.kernel_projection.weight"].T).view(q, 2, cfg.conv_kernel_size, -1)
            h = _conv(h, dyn[:, 0], sd[p + "mlp_conv.base_kernel"][0], cfg.conv_group_size)
        m = p + "mlp."
        h = (F.silu(h @ sd[m + "gate_proj.weight"].T) * (h @ sd[m + "up_proj.weight"].T)) @ sd[m + "down_proj.weight"].T
        if cfg.is_dflash2:
            h = _conv(h, dyn[:, 1], sd[p + "mlp_conv.base_kernel"][1], cfg.conv_group_size)
        x = x + h
    x = _rms(x, sd["norm.weight"], eps)[1:]
    logits = (x @ head.double().T) * (cfg.output_multiplier or 1.0)
    if cfg.final_logit_softcapping:
        logits = torch.tanh(logits / cfg.final_logit_softcapping) * cfg.final_logit_softcapping
    return logits, x


TARGET = tiny.target_config(vocab=32, layers=3, tie=False)

VARIANTS = {
    "full": {},
    "sliding_then_full": dict(layer_types=["sliding_attention", "full_attention"], sliding_window=3),
    "sliding_noncausal": dict(layer_types=["sliding_attention", "sliding_attention"], sliding_window=3, is_causal=False),
    "full_forced_causal": dict(is_causal=True),
    "output_transform": dict(softcap=2.0, output_multiplier=0.7, input_embedding_scale=1.3),
    "dflash2": dict(dflash2=True),
    # MiMo (vLLM's rules): sinks, V × 0.6, half the head rotated, every layer sliding and bidirectional
    "mimo": dict(dflash_extra=dict(use_swa=True, swa_window_size=3, attention_sink_bias=True,
                                   attention_value_scale=0.6), extra=dict(partial_rotary_factor=0.5)),
    "interleaved_partial": dict(dflash_extra=dict(attention_sink_bias=True),
                                extra=dict(partial_rotary_factor=0.5, rope_is_neox_style=False)),
    # DSpark backbone (mlx-dspark's rules): causal block, a window, sinks; its own lm_head
    "dspark": dict(sliding_window=3, extra=dict(architectures=["DSparkDraftModel"], markov_rank=4,
                                                dflash_query_causal=True, attention_sink_bias=True)),
}


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return load_target(tiny.save_target(tmp_path_factory.mktemp("t"), TARGET, seed=3))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_drafter_matches_naive_equations(variant, target, tmp_path):
    dcfg = tiny.drafter_config(TARGET, taps=(0, 2), block_size=4, **VARIANTS[variant])
    drafter = load_drafter(tiny.save_drafter(tmp_path, dcfg, seed=5, residual=0.5))
    cfg = drafter.cfg
    g = torch.Generator().manual_seed(0)
    c1, c2 = 5, 3  # the context arrives in two rounds: the second call must see the first's K/V
    feats = torch.randn(c1 + c2, drafter.fc.in_features, generator=g)
    block = [7, cfg.mask_token_id, cfg.mask_token_id, cfg.mask_token_id]
    rope = RopeTable(drafter.rope_spec, 64, torch.float32, torch.device("cpu"))
    cache = drafter.new_cache(64)
    with torch.no_grad():
        embed = drafter.embed(torch.tensor([[3, cfg.mask_token_id]]), target.embed_weight)
        drafter(embed, feats[None, :c1], rope, cache)  # round 1 (its block is discarded)
        cache.crop(c1)
        ids = torch.tensor([block])
        hidden = drafter(drafter.embed(ids, target.embed_weight), feats[None, c1:], rope, cache)[:, 1:]
        logits = drafter.compute_logits(hidden, target.head_weight)[0]
    want, want_hidden = naive_drafter(drafter.state_dict(), cfg, target.embed_weight, target.head_weight,
                                      feats, block, 0)
    assert cache.length == c1 + c2 + len(block)
    torch.testing.assert_close(logits.double(), want, rtol=1e-4, atol=1e-4)
    if cfg.final_logit_softcapping:
        assert logits.abs().max() < cfg.final_logit_softcapping
    if cfg.is_dflash2:
        # The selector's greedy path, by brute force over each slot's top-k.
        sd = {k: v.detach().double() for k, v in drafter.state_dict().items()}
        proj = want_hidden @ sd["candidate_selector.hidden_projection.weight"].T
        prev, path = block[0], []
        for p in range(len(block) - 1):
            cands = torch.topk(want[p], cfg.selector_top_k).indices.tolist()
            score = {t: float(want[p, t] + (sd["candidate_selector.predecessor_codebook"][prev] * proj[p]
                                            * sd["candidate_selector.successor_codebook"][t]).sum()) for t in cands}
            prev = max(score, key=score.get)
            path.append(prev)
        with torch.no_grad():
            got = drafter.candidate_selector.select(hidden, drafter.compute_logits(hidden, target.head_weight),
                                                    ids[:, 0], 0.0)[0][0].tolist()
        assert got == path


def test_mask_rule_changes_the_drafts(target, tmp_path):
    """Guard against the naive test passing for a mask that is never applied."""
    outs = []
    for name in ("full", "sliding_then_full"):
        dcfg = tiny.drafter_config(TARGET, taps=(0, 2), **VARIANTS[name])
        d = load_drafter(tiny.save_drafter(tmp_path / name, dcfg, seed=5, residual=0.5))
        feats = torch.randn(1, 9, d.fc.in_features, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            h = d(d.embed(torch.tensor([[3, 31, 31, 31]]), target.embed_weight), feats,
                  RopeTable(d.rope_spec, 16, torch.float32, torch.device("cpu")), d.new_cache(16))
        outs.append(h)
    assert (outs[0] - outs[1]).abs().max() > 1e-3


def test_visibility_mask_patterns():
    # 2 context keys + 3 block queries (kv 5): query i sits at key index 2 + i.
    assert visibility_mask(3, 5, causal=False, window=None, device="cpu") is None
    causal = visibility_mask(3, 5, causal=True, window=None, device="cpu").int().tolist()
    assert causal == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    sliding = visibility_mask(3, 5, causal=True, window=2, device="cpu").int().tolist()
    assert sliding == [[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
    both_ways = visibility_mask(3, 5, causal=False, window=2, device="cpu").int().tolist()
    assert both_ways == [[0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]


def _cfg(tmp_path, **raw):
    base = tiny.drafter_config(TARGET, layers=3)
    base.update(raw)
    (tmp_path / "config.json").write_text(json.dumps(base))
    return load_config(tmp_path)


def test_layer_rules_follow_zlab(tmp_path):
    types = ["sliding_attention", "sliding_attention", "full_attention"]
    # Per-layer rule: sliding layers causal with the window, full layers neither.
    assert layer_rules(_cfg(tmp_path, layer_types=types, use_sliding_window=True, sliding_window=8)) == [
        (True, 8), (True, 8), (False, None)]
    # Top-level is_causal overrides causality for every layer, not the window.
    assert layer_rules(_cfg(tmp_path, layer_types=types, use_sliding_window=True, sliding_window=8,
                            is_causal=False)) == [(False, 8), (False, 8), (False, None)]
    # transformers drops the window when use_sliding_window is false; the layer stays causal.
    assert layer_rules(_cfg(tmp_path, layer_types=types, use_sliding_window=False, sliding_window=8)) == [
        (True, None), (True, None), (False, None)]
    # No layer_types: Qwen3Config makes layers >= max_window_layers sliding.
    assert layer_rules(_cfg(tmp_path, use_sliding_window=True, sliding_window=8, max_window_layers=1)) == [
        (False, None), (True, 8), (True, 8)]


def test_rope_default_and_scaled_formulas():
    d = 8
    inv, scale = inv_freq(RopeSpec(d, 10000.0))
    torch.testing.assert_close(inv, 10000.0 ** (-torch.arange(0, d, 2).float() / d))
    assert scale == 1.0
    lin, _ = inv_freq(RopeSpec(d, 10000.0, RopeScaling("linear", 4.0, None, {"factor": 4.0})))
    torch.testing.assert_close(lin, inv / 4)
    l3, _ = inv_freq(RopeSpec(d, 500000.0, RopeScaling("llama3", 8.0, 64, {
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64})))
    base = 500000.0 ** (-torch.arange(0, d, 2).float() / d)
    wavelen = 2 * math.pi / base
    assert torch.allclose(l3[wavelen < 16], base[wavelen < 16])  # high frequencies untouched
    assert torch.allclose(l3[wavelen > 64], base[wavelen > 64] / 8)  # low frequencies divided by factor
    _, yscale = inv_freq(RopeSpec(d, 10000.0, RopeScaling("yarn", 4.0, 64, {"factor": 4.0})))
    assert yscale == pytest.approx(0.1 * math.log(4.0) + 1.0)
    with pytest.raises(ConfigError):
        inv_freq(RopeSpec(d, 10000.0, RopeScaling("longrope", 4.0, 64, {})))


def test_rope_matches_transformers():
    tr = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cases = [
        ("linear", {"rope_type": "linear", "factor": 3.0}),
        ("yarn", {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 256, "beta_fast": 32.0,
                  "beta_slow": 1.0}),
        ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 256}),
    ]
    for kind, params in cases:
        hf = tr.Qwen3Config(head_dim=32, hidden_size=64, num_attention_heads=2, max_position_embeddings=4096,
                            rope_parameters={"rope_theta": 50000.0, **params})
        want, want_scale = ROPE_INIT_FUNCTIONS[kind](hf, None)
        num = {k: float(v) for k, v in params.items() if k != "rope_type"}
        got, got_scale = inv_freq(RopeSpec(32, 50000.0, RopeScaling(kind, params["factor"],
                                                                    params.get("original_max_position_embeddings"),
                                                                    num), None, 4096))
        assert torch.equal(got, want.float()), kind
        assert got_scale == pytest.approx(want_scale), kind


def test_strict_names_and_shapes(tmp_path):
    from safetensors.torch import load_file, save_file

    path = tiny.save_drafter(tmp_path, tiny.drafter_config(TARGET))
    state = load_file(str(path / "model.safetensors"))
    # Extras some exports carry are dropped; the reference uses the target's tables.
    save_file({**state, "embed_tokens.weight": torch.zeros(32, 64)}, str(path / "model.safetensors"))
    load_drafter(path)
    renamed = dict(state)
    renamed["layers.0.self_attn.qproj.weight"] = renamed.pop("layers.0.self_attn.q_proj.weight")
    save_file(renamed, str(path / "model.safetensors"))
    with pytest.raises(WeightsError, match="q_proj"):
        load_drafter(path)
    state["fc.weight"] = state["fc.weight"][:, :-1].contiguous()
    save_file(state, str(path / "model.safetensors"))
    with pytest.raises(WeightsError, match="fc.weight"):
        load_drafter(path)


def test_dtype_and_device_arguments(tmp_path):
    path = tiny.save_drafter(tmp_path, tiny.drafter_config(TARGET))
    d = load_drafter(path, dtype="bfloat16", device="cpu")
    assert d.fc.weight.dtype == torch.bfloat16 and d.fc.weight.device.type == "cpu"
    from dflash_gguf.errors import UsageError

    with pytest.raises(UsageError):
        load_drafter(path, dtype="float8")


@pytest.mark.gpu
def test_drafter_on_cuda_matches_cpu(target, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    path = tiny.save_drafter(tmp_path, tiny.drafter_config(TARGET, **VARIANTS["sliding_then_full"]))
    outs = []
    for dev in ("cpu", "cuda"):
        d = load_drafter(path, device=dev)
        t = target.to(dev)
        feats = torch.randn(1, 6, d.fc.in_features, generator=torch.Generator().manual_seed(2)).to(dev)
        with torch.no_grad():
            h = d(d.embed(torch.tensor([[3, 31, 31, 31]], device=dev), t.embed_weight), feats,
                  RopeTable(d.rope_spec, 16, torch.float32, torch.device(dev)), d.new_cache(16))
            outs.append(d.compute_logits(h, t.head_weight).cpu())
    target.to("cpu")
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4)


FIXTURE_TOKENIZER = __import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures" / "targets" / "qwen3-tiny"


@pytest.fixture(scope="module")
def gguf_setup(tmp_path_factory):
    """A target with the fixture's tokenizer (the converter needs one) and a recorded trajectory."""
    import shutil

    if not (FIXTURE_TOKENIZER / "tokenizer.json").is_file():
        pytest.skip("fixtures/targets/qwen3-tiny tokenizer not present")
    from dflash_gguf.reference import generate

    root = tmp_path_factory.mktemp("gguf")
    tcfg = tiny.target_config(vocab=512, layers=3, tie=False)
    tiny.save_target(root / "t", tcfg, seed=3)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(FIXTURE_TOKENIZER / name, root / "t" / name)
    target = load_target(root / "t")
    runs = {}
    for kind, kw in (("dflash1", {}), ("dflash2", dict(dflash2=True, layer_types=["sliding_attention"] * 2,
                                                       sliding_window=6, is_causal=False, softcap=20.0))):
        tiny.save_drafter(root / kind, tiny.drafter_config(tcfg, taps=(0, 2), **kw), seed=5, residual=0.5)
        drafter = load_drafter(root / kind)
        runs[kind] = generate(drafter, target, [1, 2, 3, 4, 5], 16, record=True)
    return root, target, runs


@pytest.mark.parametrize("kind,fmt,outtype", [
    ("dflash1", "llama.cpp", "f32"), ("dflash1", "llama.cpp-pr22105", "f32"), ("dflash1", "dflash-draft", "f32"),
    ("dflash1", "lucebox", "f32"), ("dflash1", "llama.cpp", "q8_0"), ("dflash2", "llama.cpp", "f32"),
])
def test_drafter_from_gguf_replays_the_reference(gguf_setup, kind, fmt, outtype):
    from dflash_gguf.convert import convert
    from dflash_gguf.reference import teacher_forced
    from dflash_gguf.reference.load import drafter_from_gguf

    root, target, runs = gguf_setup
    out = root / f"{kind}-{fmt}-{outtype}.gguf"
    convert(root / kind, out, format=fmt, outtype=outtype, target_dir=root / "t")
    drafter = drafter_from_gguf(out, root / kind)
    tf = teacher_forced(drafter, target, runs[kind])
    if outtype == "f32":
        # Names and layouts map back exactly: every parameter equals the checkpoint's, bit for bit.
        want = dict(load_drafter(root / kind).named_parameters())
        got = dict(drafter.named_parameters())
        assert want.keys() == got.keys()
        assert all(torch.equal(want[k], got[k]) for k in want), [k for k in want if not torch.equal(want[k], got[k])]
        # Same weights and code, but BLAS may pick another GEMM kernel (AVX2 vs AVX-512 MKL paths, other
        # alignment), i.e. another summation order: 9.5e-7 was seen on AVX2. Logits here are O(10), built
        # from sums of <= 256 float32 products; reordering moves them by at most a few hundred ulps of 10
        # (1 ulp ~ 9.5e-7), while a single wrong weight moves them by > 1e-2.
        assert tf.max_abs_diff <= 1e-4 and tf.token_agreement == 1.0
    else:
        assert 0.0 < tf.max_abs_diff < 0.1  # quantization moves the logits, a little


def test_drafter_from_gguf_refuses_another_drafter(gguf_setup, tmp_path):
    from dflash_gguf.convert import convert
    from dflash_gguf.reference.load import drafter_from_gguf

    root, _, _ = gguf_setup
    out = tmp_path / "d.gguf"
    convert(root / "dflash1", out, format="llama.cpp", outtype="f32", target_dir=root / "t")
    other = tiny.drafter_config(tiny.target_config(vocab=512, layers=3, tie=False), taps=(0, 1))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps(other))
    with pytest.raises(WeightsError, match="target_layer_ids is \\(0, 2\\) in the GGUF but \\(0, 1\\)"):
        drafter_from_gguf(out, tmp_path / "other")
