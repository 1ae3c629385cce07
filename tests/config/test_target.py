import pytest

from dflash_gguf.config import load_target_config
from dflash_gguf.errors import ConfigError

from tests.conftest import TARGETS
from tests.config.helpers import write_cfg


def test_target_config_flattens_text_config(tmp_path):
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": {"hidden_size": 128, "num_hidden_layers": 7, "vocab_size": 1000, "rope_theta": 1e6}}
    t = load_target_config(write_cfg(tmp_path, cfg))
    assert (t.hidden_size, t.num_hidden_layers, t.vocab_size) == (128, 7, 1000)
    q = load_target_config(TARGETS / "qwen3-tiny")
    assert q.num_hidden_layers == 5 and q.hidden_size == 64


@pytest.mark.parametrize("over,needle", [
    ({"architectures": {"a": 1}}, "architectures must be a list of class names"),  # was KeyError
    ({"rope_scaling": {"rope_type": "linear", "factor": [2]}}, r"rope_scaling.factor = \[2\]"),  # TypeError
    ({"rope_theta": "1e6"}, "config.rope_theta = '1e6' is not a positive finite number"),
])
def test_target_wrong_types_are_config_errors(tmp_path, over, needle):
    cfg = {"hidden_size": 64, "num_hidden_layers": 5, "vocab_size": 512, **over}
    with pytest.raises(ConfigError, match=needle):
        load_target_config(write_cfg(tmp_path, cfg))


def test_target_deep_json_is_a_config_error(tmp_path):  # was RecursionError
    (tmp_path / "config.json").write_bytes(b"[" * 100_000)
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_target_config(tmp_path)


BASE = {"hidden_size": 64, "num_hidden_layers": 5, "vocab_size": 512}


def test_target_activation_mlp_bias_and_partial_rotary(tmp_path):
    t = load_target_config(write_cfg(tmp_path, BASE))
    assert (t.hidden_act, t.mlp_bias, t.partial_rotary_factor) == ("silu", False, None)  # transformers' defaults
    t = load_target_config(write_cfg(tmp_path, {**BASE, "hidden_act": "gelu", "mlp_bias": True,
                                                "partial_rotary_factor": 0.5}))
    assert (t.hidden_act, t.mlp_bias, t.partial_rotary_factor) == ("gelu", True, 0.5)
    assert load_target_config(write_cfg(tmp_path, {**BASE, "hidden_act": None})).hidden_act is None


@pytest.mark.parametrize("over,needle", [
    ({"hidden_act": ["silu"]}, r"hidden_act must be an activation name, got \['silu'\]"),
    ({"mlp_bias": "false"}, "mlp_bias must be true or false, got 'false'"),
])
def test_target_wrong_types_of_the_reference_fields(tmp_path, over, needle):
    with pytest.raises(ConfigError, match=needle):
        load_target_config(write_cfg(tmp_path, {**BASE, **over}))
