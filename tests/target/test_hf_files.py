"""target/hf_files.py: a target's JSON files read with one-line TargetErrors that end with the
--target-gguf hint; tokenizer_config.json optional, a fresh dict per call."""
from __future__ import annotations

import pytest

from dflash_gguf.errors import TargetError
from dflash_gguf.target.hf_files import HINT, read_json, tokenizer_config


def test_read_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"a": [1, 2.5, "é"]}', encoding="utf-8")
    assert read_json(p) == {"a": [1, 2.5, "é"]}
    p.write_text("[]")
    assert read_json(p) == []  # any JSON value: the caller checks its shape


@pytest.mark.parametrize("content,why", [
    (b'{"a": ', "not readable JSON"),
    (b"\xff\xfe{}", "not readable JSON"),  # not UTF-8
    (None, "not readable JSON"),  # missing
])
def test_unreadable_json_is_one_line_with_the_hint(tmp_path, content, why):
    p = tmp_path / "x.json"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(TargetError) as e:
        read_json(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: {why}") and msg.endswith(HINT) and "\n" not in msg
    assert "--target-gguf" in HINT


def test_tokenizer_config(tmp_path):
    assert tokenizer_config(tmp_path) is None  # none: nothing to read
    (tmp_path / "tokenizer_config.json").write_text('{"add_bos_token": true}')
    first = tokenizer_config(tmp_path)
    first["add_bos_token"] = False
    assert tokenizer_config(tmp_path) == {"add_bos_token": True}  # a fresh copy per call
    (tmp_path / "tokenizer_config.json").write_text('["not", "an", "object"]')
    with pytest.raises(TargetError, match=r"tokenizer_config.json: top level is not a JSON object; re-download it"):
        tokenizer_config(tmp_path)
