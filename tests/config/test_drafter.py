import json
import math

import pytest

from dflash_gguf.config import build_target_layer_ids, load_config
from dflash_gguf.errors import ConfigError

from tests.conftest import BROKEN, DRAFTERS
from tests.config.helpers import flat, write_cfg


def test_flat_schema_resolves_top_level_knobs():
    cfg = load_config(DRAFTERS / "qwen3-flat")
    assert cfg.rope_theta == 1e6 and cfg.sources["rope_theta"] == "config.rope_theta"
    assert cfg.block_size == 16 and cfg.sources["block_size"] == "config.block_size"
    assert cfg.mask_token_id == 500 and cfg.sources["mask_token_id"] == "dflash_config.mask_token_id"
    assert cfg.target_layer_ids == (0, 1, 2, 3)
    assert cfg.sliding_window is None and cfg.swa_pattern is None
    assert not cfg.is_dflash2 and cfg.is_causal is None


def test_nested_schema_theta_1e7_and_swa_pattern():
    cfg = load_config(DRAFTERS / "qwen3-nested")
    assert cfg.rope_theta == 1e7 and cfg.sources["rope_theta"] == "rope_parameters.rope_theta"
    assert cfg.block_size == 8 and cfg.sources["block_size"] == "dflash_config.block_size"
    assert cfg.sliding_window == 8 and cfg.swa_pattern == (True, False)


def test_dflash2_knobs_and_gemma_extras():
    cfg = load_config(DRAFTERS / "qwen3-dflash2")
    assert cfg.is_dflash2 and cfg.conv_kernel_size == 2 and cfg.selector_top_k == 4
    assert cfg.is_causal is False and cfg.output_multiplier == 0.5 and cfg.final_logit_softcapping == 20.0
    g = load_config(DRAFTERS / "gemma-style")
    assert g.mask_token_id == 4 and g.final_logit_softcapping == 30.0
    assert math.isclose(g.input_embedding_scale, 8.0)


@pytest.mark.parametrize("name,needle", [
    ("no-mask", "mask_token_id"),
    ("taps-beyond-target", "contains 7 but the target has only num_target_layers=5"),
])
def test_broken_configs_fail_loudly(name, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(BROKEN / name)


def test_block_size_default_is_warned(tmp_path):
    cfg = flat()
    del cfg["block_size"]
    c = load_config(write_cfg(tmp_path, cfg))
    assert c.block_size == 16 and c.sources["block_size"] == "default"
    assert any("block_size" in w for w in c.warnings)


def test_missing_taps_use_reference_fallback_with_warning(tmp_path):
    cfg = flat(num_target_layers=36, num_hidden_layers=5)
    cfg["dflash_config"] = {"mask_token_id": 500}
    c = load_config(write_cfg(tmp_path, cfg))
    # z-lab's build_target_layer_ids(36, 5): evenly spread over [1, 33]
    assert c.target_layer_ids == (1, 9, 17, 25, 33)
    assert any("fallback" in w for w in c.warnings)
    assert build_target_layer_ids(64, 1) == (32,)


@pytest.mark.parametrize("over,needle", [
    ({"layer_types": ["sliding_attention"]}, "one entry per layer"),
    ({"layer_types": ["sliding_attention", "moe"]}, "unknown entries"),
    ({"architectures": ["Qwen3ForCausalLM"]}, "not a DFlash drafter"),
    ({"num_key_value_heads": 3}, "multiple"),
    ({"vocab_size": 100}, "outside the vocabulary"),
])
def test_inconsistent_configs(tmp_path, over, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(write_cfg(tmp_path, flat(**over)))


def test_not_json_and_missing(tmp_path):
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent")


# --- wrong types and ranges: each must be one ConfigError, not a Python exception or a hang -----------------
def dflash2(**over):
    cfg = json.loads((DRAFTERS / "qwen3-dflash2" / "config.json").read_text())
    cfg.update(over)
    return cfg


@pytest.mark.parametrize("over,needle", [
    ({"architectures": 5}, "architectures must be a list of class names, got 5"),  # was TypeError
    ({"num_key_value_heads": 0}, r"config.num_key_value_heads = 0 is out of range \(1\.\.2,147,483,647\)"),  # ZeroDivision
    ({"hidden_size": -64}, "config.hidden_size = -64 is out of range"),
    ({"max_position_embeddings": 2**40}, "config.max_position_embeddings = 1099511627776 is out of range"),  # struct.error
    ({"num_hidden_layers": 10**9}, r"config.num_hidden_layers = 1000000000 is out of range \(1\.\.65,536\)"),  # hang
    ({"rms_norm_eps": 1e39}, "config.rms_norm_eps = 1e\\+39 does not fit the GGUF's float32"),  # OverflowError on write
    ({"rms_norm_eps": 10**400}, "config.rms_norm_eps is an integer too large for a float"),  # OverflowError
    ({"vocab_size": 10**400}, r"config.vocab_size = 10000000000000000000…\(401 digits\) is out of range"),
    ({"attention_bias": "false"}, "attention_bias must be true or false, got 'false'"),  # silently true
    ({"tie_word_embeddings": 1}, "tie_word_embeddings must be true or false, got 1"),
    ({"use_sliding_window": "yes"}, "use_sliding_window must be true or false"),
    ({"model_type": ["qwen3"]}, r"model_type must be a string, got \['qwen3'\]"),
])
def test_wrong_types_and_ranges_name_the_key(tmp_path, over, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(write_cfg(tmp_path, flat(**over)))


@pytest.mark.parametrize("dflash,needle", [
    ({"attention_value_scale": [1]}, r"dflash_config.attention_value_scale must be a number, got \[1\]"),  # TypeError
    ({"output_multiplier": 10**400}, "dflash_config.output_multiplier is an integer too large for a float"),
    ({"target_layer_ids": [0, 1, 2, 10**12]}, "contains 1000000000000; no real target has 65,536 layers"),
    ({"use_swa": "true"}, "dflash_config.use_swa must be true or false"),
])
def test_wrong_dflash_config_values(tmp_path, dflash, needle):
    cfg = flat(num_target_layers=None)
    cfg["dflash_config"].update(dflash)
    with pytest.raises(ConfigError, match=needle):
        load_config(write_cfg(tmp_path, cfg))


def test_dflash2_conv_group_size_zero(tmp_path):  # was ZeroDivisionError
    cfg = dflash2()
    cfg["dflash_config"]["conv_group_size"] = 0
    with pytest.raises(ConfigError, match="dflash_config.conv_group_size = 0 is out of range"):
        load_config(write_cfg(tmp_path, cfg))


def test_fallback_taps_outside_the_target_are_refused(tmp_path):
    cfg = flat(num_target_layers=2)  # the reference's formula gives [1, -1]
    cfg["dflash_config"] = {"mask_token_id": 500}
    with pytest.raises(ConfigError, match=r"would be \[1, -1\] \(repeated or outside the target\); add dflash_config"):
        load_config(write_cfg(tmp_path, cfg))


@pytest.mark.parametrize("blob", [b"[" * 100_000, b'{"hidden_size": ' + b"9" * 5000 + b"}"],
                         ids=["deep-nesting", "5000-digit-int"])
def test_unparseable_json_is_a_config_error(tmp_path, blob):  # RecursionError / ValueError before
    (tmp_path / "config.json").write_bytes(blob)
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)


def test_head_dim_in_config(tmp_path):
    assert load_config(write_cfg(tmp_path, flat())).head_dim_in_config
    derived = load_config(write_cfg(tmp_path, flat(head_dim=None)))  # hidden_size // num_attention_heads
    assert derived.head_dim == 16 and not derived.head_dim_in_config


def test_swa_every_layer_is_dflash_config_use_swa_only(tmp_path):
    assert not load_config(write_cfg(tmp_path, flat())).swa_every_layer
    # the top-level spelling turns SWA on, but not vLLM's "every layer slides"
    top = load_config(write_cfg(tmp_path, flat(use_sliding_window=True, sliding_window=8)))
    assert top.use_sliding_window and not top.swa_every_layer
    cfg = flat()
    cfg["dflash_config"].update(use_swa=True, swa_window_size=8)
    nested = load_config(write_cfg(tmp_path, cfg))
    assert nested.swa_every_layer and nested.use_sliding_window and nested.sliding_window == 8
