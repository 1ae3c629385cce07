"""config/values.py: every config.json value checked for type and range before use, each refusal
a ConfigError naming the key and the file; reading config.json itself."""
from __future__ import annotations

from pathlib import Path

import pytest

from dflash_gguf.errors import ConfigError
from dflash_gguf.config.values import FLOAT32_MAX, INT32_MAX, coerce, flag, read_config_json

P = Path("m/config.json")


def test_integers_in_range():
    assert coerce(5, int, "num_hidden_layers", P) == 5
    assert coerce(4.0, int, "block_size", P) == 4 and type(coerce(4.0, int, "block_size", P)) is int
    assert coerce(INT32_MAX, int, "vocab_size", P) == INT32_MAX
    assert coerce(0, int, "x", P, lo=0) == 0
    assert coerce(-INT32_MAX, int, "x", P, lo=None) == -INT32_MAX  # no lower bound: symmetric range
    assert coerce(7, int, "x", P, hi=7) == 7


@pytest.mark.parametrize("value,kw,says", [
    (True, {}, "must be a number, got True"),
    (4.5, {}, "must be an integer, got 4.5"),
    ("4", {}, "must be an integer, got '4'"),
    (0, {}, "= 0 is out of range (1..2,147,483,647)"),
    (INT32_MAX + 1, {}, "out of range"),
    (-INT32_MAX - 1, {"lo": None}, "out of range (-2,147,483,647..2,147,483,647)"),
    (8, {"hi": 7}, "out of range (1..7)"),
    (10 ** 60, {}, "= 10000000000000000000…(61 digits) is out of range"),
])
def test_bad_integers_name_key_and_file(value, kw, says):
    with pytest.raises(ConfigError) as e:
        coerce(value, int, "block_size", P, **kw)
    msg = str(e.value)
    assert msg.startswith(f"{P}: block_size") and says in msg


def test_floats():
    assert coerce(1e6, float, "rope_theta", P) == 1e6
    assert coerce(10000, float, "rope_theta", P) == 10000.0 and type(coerce(10000, float, "t", P)) is float
    assert coerce(-FLOAT32_MAX, float, "x", P) == -FLOAT32_MAX


@pytest.mark.parametrize("value,says", [
    (False, "must be a number, got False"),
    ("1e6", "must be a number, got '1e6'"),
    (float("nan"), "is nan; fix config.json"),
    (float("-inf"), "is -inf"),
    (1e39, "does not fit the GGUF's float32"),
    (10 ** 400, "an integer too large for a float"),
    ([1.0], "must be a number, got [1.0]"),
])
def test_bad_floats(value, says):
    with pytest.raises(ConfigError, match="rope_theta") as e:
        coerce(value, float, "rope_theta", P)
    assert says in str(e.value)


def test_flags_are_json_booleans_only():
    assert flag(True, "tie", P) is True and flag(False, "tie", P) is False and flag(None, "tie", P) is None
    for bad in ("false", 0, 1):
        with pytest.raises(ConfigError, match=r"tie must be true or false"):
            flag(bad, "tie", P)


def test_read_config_json(tmp_path):
    (tmp_path / "config.json").write_text('{"a": 1}', encoding="utf-8")
    assert read_config_json(tmp_path, "missing") == ({"a": 1}, tmp_path / "config.json")
    assert read_config_json(tmp_path / "config.json", "missing")[0] == {"a": 1}  # the file itself
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty/config.json: no config here$"):  # a dir: its config.json
        read_config_json(tmp_path / "empty", "no config here")
    with pytest.raises(ConfigError, match=r"nope: no config here$"):  # not a dir: the path is the file
        read_config_json(tmp_path / "nope", "no config here")
    (tmp_path / "config.json").write_text("{bad", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"not valid JSON \(.*\); try again$"):
        read_config_json(tmp_path, "missing", "; try again")
    (tmp_path / "config.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_config_json(tmp_path, "missing")
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="not valid JSON"):  # RecursionError, caught
        read_config_json(tmp_path, "missing")
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="top level must be a JSON object"):
        read_config_json(tmp_path, "missing")
