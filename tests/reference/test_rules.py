"""reference/rules.py: which published reference each drafter's attention follows, and the
MiMo-only equations (value scale, interleaved RoPE) on a real module."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.config import parse_config  # noqa: E402
from dflash_gguf.errors import ConfigError  # noqa: E402
from dflash_gguf.reference import load_drafter, tiny  # noqa: E402
from dflash_gguf.reference.common import RopeTable, visibility_mask  # noqa: E402
from dflash_gguf.reference.load import drafter_from_state, read_safetensors  # noqa: E402
from dflash_gguf.reference.rules import MLX_DSPARK, VLLM, ZLAB, attention_rules  # noqa: E402

TARGET = tiny.target_config(vocab=32, layers=3, tie=False)
S, F = "sliding_attention", "full_attention"

# XiaomiMiMo/MiMo-V2.5-Pro-FP4-DFlash dflash/config.json @ b754e6c8 (the keys that matter, verbatim values)
MIMO = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 6144, "intermediate_size": 16384,
    "num_hidden_layers": 5, "num_attention_heads": 128, "num_key_value_heads": 8, "head_dim": 128,
    "v_head_dim": 128, "partial_rotary_factor": 0.5, "block_size": 8,
    "dflash_config": {"target_layer_ids": [0, 15, 31, 47, 69], "mask_token_id": 151669, "block_size": 8,
                      "use_swa": True, "swa_window_size": 1024, "backbone_rotary_base": 5000000,
                      "attention_value_scale": 0.612, "attention_sink_bias": True},
    "num_target_layers": 70, "vocab_size": 152064, "max_position_embeddings": 262144, "rope_theta": 10000,
    "sliding_window": 1024, "rms_norm_eps": 1e-05, "hidden_act": "silu", "attention_bias": False,
    "tie_word_embeddings": False,
}


def _rules(raw):
    return attention_rules(parse_config(raw, Path("x/config.json")))


def _tiny(**kw):
    return tiny.drafter_config(TARGET, layers=3, **kw)


def test_published_mimo_config_follows_vllm():
    r = _rules(MIMO)
    assert r.source == VLLM
    # no layer_types + use_swa: every layer slides over 1024 and is bidirectional (vLLM's table)
    assert r.layers == ((False, 1024),) * 5
    assert r.rotary_dim == 64 and not r.interleaved  # get_rope: int(128 × 0.5)
    assert r.sinks and r.value_scale == pytest.approx(0.612)


def test_zlab_drafters_keep_zlab_rules():
    r = _rules(_tiny(extra={"partial_rotary_factor": 0.5}))
    # z-lab (transformers' default rope) rotates the whole head whatever the factor
    assert r.source == ZLAB and r.rotary_dim is None and not r.sinks and r.value_scale is None
    r = _rules(_tiny(layer_types=[S, S, F], sliding_window=8))
    assert r.layers == ((True, 8), (True, 8), (False, None))
    # an interleaved checkpoint is rotated in pairs, under any rules
    r = _rules(_tiny(extra={"rope_is_neox_style": False}))
    assert r.source == ZLAB and r.interleaved and r.rotary_dim == 16


@pytest.mark.parametrize("kw,dflash,want", [
    # use_swa with layer_types: the listed types decide, sliding layers causal
    (dict(layer_types=[S, F, S]), {}, ((True, 8), (False, None), (True, 8))),
    # use_swa forces sliding on an all-full layer_types; no sliding layer listed -> not causal
    (dict(layer_types=[F, F, F]), {}, ((False, 8),) * 3),
    # top-level is_causal, then dflash_config.causal, override every layer
    (dict(is_causal=True), {}, ((True, 8),) * 3),
    ({}, {"causal": True}, ((True, 8),) * 3),
])
def test_vllm_layer_table(kw, dflash, want):
    raw = _tiny(**kw, dflash_extra={"use_swa": True, "swa_window_size": 8, "attention_sink_bias": True, **dflash})
    r = _rules(raw)
    assert r.source == VLLM and r.layers == want


@pytest.mark.parametrize("extra,want", [
    ({}, ((False, None),) * 3),  # DeepSpec heads: bidirectional, no window
    ({"dflash_query_causal": True}, ((True, None),) * 3),
    ({"dflash_config_causal": True}, ((True, None),) * 3),
])
def test_dspark_follows_mlx_dspark(extra, want):
    dflash = {"causal": True} if extra.pop("dflash_config_causal", False) else {}
    r = _rules(_tiny(dflash_extra=dflash, extra={"architectures": ["DSparkDraftModel"], **extra}))
    assert r.source == MLX_DSPARK and r.layers == want and r.rotary_dim is None


def test_dspark_speculators_sliding_layers_are_causal_unless_declared_otherwise():
    tlc = {k: v for k, v in _tiny().items() if k not in ("dflash_config", "architectures")}
    tlc.update(layer_types=[S, S, S], use_sliding_window=True, sliding_window=8)
    raw = {"architectures": ["DSparkSpeculator"], "transformer_layer_config": tlc,
           "aux_hidden_state_layer_ids": [1, 3], "mask_token_id": 31, "block_size": 4}
    assert _rules(raw).layers == ((True, 8),) * 3
    assert _rules({**raw, "sliding_window_non_causal": True}).layers == ((False, 8),) * 3


@pytest.mark.parametrize("extra,match", [
    ({"architectures": ["Gemma4DSparkModel"]}, "(?i)gemma4"),
    ({"architectures": ["DSparkDraftModel"], "enable_qwen35_gated_q_proj": True}, "qwen3_5"),
    ({"architectures": ["DSparkDraftModel"], "log_snr_conditioning": True}, "log-SNR"),
])
def test_unimplemented_dspark_backbones_are_refused(extra, match):
    with pytest.raises(ConfigError, match=match):
        _rules(_tiny(extra=extra))


MIMO_TINY = dict(dflash_extra={"use_swa": True, "swa_window_size": 6, "attention_sink_bias": True,
                               "attention_value_scale": 0.5}, extra={"partial_rotary_factor": 0.5})


def _context(d, n=5, seed=1):
    return torch.randn(1, n, d.fc.in_features, generator=torch.Generator().manual_seed(seed))


def test_value_scale_multiplies_context_and_block_values(tmp_path):
    d = load_drafter(tiny.save_drafter(tmp_path, tiny.drafter_config(TARGET, **MIMO_TINY), seed=5))
    attn = d.layers[0].self_attn
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))
    ctx = d.hidden_norm(d.fc(_context(d)))[0]
    rope = RopeTable(d.rope_spec, 16, torch.float32, torch.device("cpu"))
    cos, sin = rope(0, 9)
    masks = {(attn.causal, attn.window): visibility_mask(4, 9, causal=attn.causal, window=attn.window, device="cpu")}
    outs, caches = [], []
    for scale in (0.5, None):
        attn.value_scale = scale
        cache = d.new_cache(16)
        with torch.no_grad():
            outs.append(attn(x, ctx, cos, sin, cache, 0, 0, masks))
        caches.append(cache.v[0, :, :, :9].clone())
    with torch.no_grad():
        v_ctx = attn.v_proj(ctx).view(1, 5, 2, 16).transpose(1, 2)
    torch.testing.assert_close(caches[0][:, :, :5], 0.5 * v_ctx)  # the context rows, as cached
    torch.testing.assert_close(caches[0], 0.5 * caches[1])  # and the block rows
    torch.testing.assert_close(outs[0], 0.5 * outs[1])  # attention is linear in V; o_proj has no bias


def _permute(w: torch.Tensor, head_dim: int, rot: int) -> torch.Tensor:
    """The converter's interleaved -> NeoX row permutation, applied to the first ``rot`` rows of
    every head: w.reshape(-1, rot//2, 2, *rest).transpose(1, 2) (rot = head_dim: the whole head)."""
    rest = w.shape[1:]
    heads = w.reshape(-1, head_dim, *rest)
    out = heads.clone()
    out[:, :rot] = heads[:, :rot].reshape(-1, rot // 2, 2, *rest).transpose(1, 2).reshape(-1, rot, *rest)
    return out.reshape(w.shape)


def _hidden(d, target_embed):
    block = torch.tensor([[3, 31, 31, 31]])
    with torch.no_grad():
        return d(d.embed(block, target_embed), _context(d, 7),
                 RopeTable(d.rope_spec, 16, torch.float32, torch.device("cpu")), d.new_cache(16))


@pytest.mark.parametrize("variant", ["full_head", "partial"])
def test_interleaved_checkpoint_equals_its_neox_permutation(tmp_path, variant):
    kw = MIMO_TINY if variant == "partial" else {}
    extra = {**kw.get("extra", {}), "rope_is_neox_style": False}
    inter = tiny.drafter_config(TARGET, dflash_extra=kw.get("dflash_extra"), extra=extra)
    path = tiny.save_drafter(tmp_path / "inter", inter, seed=5, residual=0.5)
    d_inter = load_drafter(path)
    neox_raw = {k: v for k, v in inter.items() if k != "rope_is_neox_style"}
    neox_cfg = parse_config(neox_raw, tmp_path / "neox.json")
    rot = d_inter.rules.rotary_dim
    state = read_safetensors(path)

    def permuted(rows: int) -> dict:
        out = dict(state)
        for k in state:
            if k.endswith(("q_proj.weight", "k_proj.weight", "q_norm.weight", "k_norm.weight")):
                out[k] = _permute(state[k], 16, rows)
        return out

    embed = torch.randn(32, 64, generator=torch.Generator().manual_seed(3))
    want = _hidden(d_inter, embed)
    got = _hidden(drafter_from_state(neox_cfg, permuted(rot), device="cpu"), embed)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if rot < 16:
        # permuting whole heads pairs rotated dims with pass-through ones: not the same model
        wrong = _hidden(drafter_from_state(neox_cfg, permuted(16), device="cpu"), embed)
        assert (wrong - want).abs().max() > 1e-2
    # and the unpermuted weights rotated as NeoX are not the same model either
    assert (_hidden(drafter_from_state(neox_cfg, state, device="cpu"), embed) - want).abs().max() > 1e-2

