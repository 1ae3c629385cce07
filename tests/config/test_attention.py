"""config/attention.py: transformers' Qwen3Config reading of attention (top-level keys only), kept
apart from the converter's reading that folds in the vLLM-only dflash_config spellings."""
from __future__ import annotations

import pytest

from dflash_gguf.config import HFAttention, load_config, load_target_config
from dflash_gguf.errors import ConfigError

from tests.config.helpers import flat, write_cfg

S, F = "sliding_attention", "full_attention"


def _hf(tmp_path, **over):
    return load_config(write_cfg(tmp_path, flat(**over))).hf_attention


def test_defaults_without_any_attention_key(tmp_path):
    assert _hf(tmp_path) == HFAttention(is_causal=None, sliding_window=None, max_window_layers=28)


def test_top_level_keys_are_read(tmp_path):
    hf = _hf(tmp_path, use_sliding_window=True, sliding_window=8, max_window_layers=1, is_causal=True)
    assert hf == HFAttention(is_causal=True, sliding_window=8, max_window_layers=1)


def test_window_counts_only_with_use_sliding_window(tmp_path):
    # Qwen3Config drops the window when use_sliding_window is off (Qwen2.5-style configs ship one)
    assert _hf(tmp_path, sliding_window=4096).sliding_window is None
    assert _hf(tmp_path, use_sliding_window=False, sliding_window=4096).sliding_window is None


def test_dflash_config_spellings_are_not_read(tmp_path):
    # the converter honours vLLM's use_swa / swa_window_size / causal; transformers does not see them
    cfg = flat(layer_types=[S, F])
    cfg["dflash_config"].update(use_swa=True, swa_window_size=8, causal=True)
    c = load_config(write_cfg(tmp_path, cfg))
    assert c.sliding_window == 8 and c.is_causal is True and c.swa_every_layer
    assert c.hf_attention == HFAttention()


@pytest.mark.parametrize("over,needle", [
    ({"max_window_layers": "2"}, "max_window_layers must be an integer, got '2'"),
    ({"max_window_layers": -1}, r"max_window_layers = -1 is out of range \(0\.\."),
    ({"use_sliding_window": True, "sliding_window": "8"}, "sliding_window must be an integer"),
    ({"is_causal": "false"}, "is_causal must be true or false, got 'false'"),
])
def test_wrong_types_name_the_key(tmp_path, over, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(write_cfg(tmp_path, flat(**over)))


def test_target_reads_the_same_keys_and_its_layer_types(tmp_path):
    base = {"hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 512}
    t = load_target_config(write_cfg(tmp_path, {**base, "use_sliding_window": True, "sliding_window": 6,
                                                "max_window_layers": 2, "layer_types": [F, F, "linear_attention"]}))
    assert t.hf_attention == HFAttention(sliding_window=6, max_window_layers=2)
    assert t.layer_types == (F, F, "linear_attention")  # hybrid targets name other layer kinds
    assert load_target_config(write_cfg(tmp_path, base)).layer_types is None
    with pytest.raises(ConfigError, match="layer_types must be a list of layer type names"):
        load_target_config(write_cfg(tmp_path, {**base, "layer_types": [F, 1, F]}))
