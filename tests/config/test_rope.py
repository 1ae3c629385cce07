import pytest

from dflash_gguf.config import load_config
from dflash_gguf.errors import ConfigError

from tests.conftest import BROKEN
from tests.config.helpers import flat, write_cfg


@pytest.mark.parametrize("name,needle", [
    ("no-theta", "no RoPE theta"),
    ("nan-theta", "not a positive finite number"),
])
def test_broken_theta_fails_loudly(name, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(BROKEN / name)


@pytest.mark.parametrize("theta", [0, -1.0, float("inf"), "1e6", True])
def test_bad_theta_values(tmp_path, theta):
    cfg = flat(rope_theta=theta)
    with pytest.raises(ConfigError, match="rope_theta"):
        load_config(write_cfg(tmp_path, cfg))


def test_nested_theta_wins_over_top_level(tmp_path):
    cfg = flat(rope_theta=1e6, rope_parameters={"rope_theta": 5e6, "rope_type": "default"})
    assert load_config(write_cfg(tmp_path, cfg)).rope_theta == 5e6


def test_yarn_scaling_needs_original_context(tmp_path):
    cfg = flat(rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ConfigError, match="original_max_position_embeddings"):
        load_config(write_cfg(tmp_path, cfg))
    cfg["rope_scaling"]["original_max_position_embeddings"] = 4096
    c = load_config(write_cfg(tmp_path, cfg))
    assert c.rope_scaling.type == "yarn" and c.rope_scaling.factor == 4.0


# --- wrong types and ranges: each must be one ConfigError, not a Python exception -----------------------
@pytest.mark.parametrize("over,needle", [
    ({"rope_scaling": {"rope_type": "linear", "factor": [2]}}, r"rope_scaling.factor = \[2\] is not a positive finite"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, "rope_scaling.factor = 0 is not a positive finite"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": "4k"}},
     "rope_scaling.original_max_position_embeddings must be an integer, got '4k'"),  # ValueError
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": float("inf")}},
     "rope_scaling.original_max_position_embeddings must be an integer, got inf"),  # OverflowError
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                       "beta_fast": 10**400}}, "rope_scaling.beta_fast is an integer too large for a float"),
    ({"rope_scaling": {"rope_type": ["yarn"], "factor": 4.0}}, r"rope_scaling.rope_type must be a string .*\['yarn'\]"),
    ({"rope_parameters": {"rope_theta": 1e6, "rope_type": 7}}, "rope_parameters.rope_type must be a string"),
    ({"partial_rotary_factor": [0.5]}, r"partial_rotary_factor must be a number, got \[0.5\]"),  # TypeError
    ({"rope_theta": 10**400}, "config.rope_theta = 1000.* is not a positive finite number"),  # OverflowError
    ({"rope_theta": 1e39}, "config.rope_theta = 1e\\+39 is not a positive finite number"),  # float32 overflow on write
])
def test_wrong_rope_values_name_the_key(tmp_path, over, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(write_cfg(tmp_path, flat(**over)))


@pytest.mark.parametrize("low,high", [(2.0, 2.0), (4.0, 1.0), (0, 4.0)])
def test_llama3_frequency_factors_must_be_ordered(tmp_path, low, high):  # ZeroDivisionError in the plan
    cfg = flat(rope_scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 1024,
                             "low_freq_factor": low, "high_freq_factor": high})
    with pytest.raises(ConfigError, match="llama3 needs 0 < low_freq_factor < high_freq_factor"):
        load_config(write_cfg(tmp_path, cfg))


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}


@pytest.mark.parametrize("over,want", [
    ({"rope_scaling": YARN}, True),  # transformers' default
    ({"rope_scaling": {**YARN, "truncate": False}}, False),
    ({"rope_scaling": {**YARN, "truncate": None}}, False),  # transformers' ``if truncate:``
    ({"rope_parameters": {**YARN, "rope_theta": 1e6, "truncate": False}}, False),
    # rope_scaling is looked at first, whichever object the scaling itself came from
    ({"rope_parameters": {**YARN, "rope_theta": 1e6, "truncate": True}, "rope_scaling": {"truncate": False}}, False),
])
def test_yarn_truncate(tmp_path, over, want):
    assert load_config(write_cfg(tmp_path, flat(**over))).rope_scaling.truncate is want


def test_yarn_truncate_must_be_a_boolean(tmp_path):
    with pytest.raises(ConfigError, match="rope_scaling.truncate must be true or false, got 'no'"):
        load_config(write_cfg(tmp_path, flat(rope_scaling={**YARN, "truncate": "no"})))
