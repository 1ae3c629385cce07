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
