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
