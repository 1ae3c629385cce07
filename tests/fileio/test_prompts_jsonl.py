"""The JSONL prompts reader shared by ``bench --suite`` and ``parity --prompts-file``."""
import pytest

from dflash_gguf.errors import UsageError
from dflash_gguf.fileio.prompts_jsonl import Prompt, read_prompts_jsonl


def test_text_ids_raw_and_blank_lines(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text('{"prompt": "a"}\n\n{"prompt": "b", "id": "x", "raw": true}\n{"prompt_ids": [3, 0, 7]}\n')
    assert read_prompts_jsonl(f) == [Prompt("mine-1", "a"), Prompt("x", "b", True),
                                     Prompt("mine-4", "3 0 7", True, (3, 0, 7))]


@pytest.mark.parametrize("text,msg", [
    ('{"prompt_ids": [1, -2]}\n', ":1: expected an object"),
    ('{"prompt_ids": [1, true]}\n', ":1: expected an object"),
    ('{"prompt_ids": []}\n', ":1: expected an object"),
    ('{"prompt": "a"}\n{"prompt": \n', ":2: not valid JSON"),
    ('{"prompt": "a"}\n["a"]\n', ":2: expected an object"),
    ('{"prompt": ""}\n', ":1: expected an object"),
    ('{"prompt": "a", "raw": "yes"}\n', ":1: \"raw\" must be"),
    ("\n\n", "no prompts"),
    ('{"prompt_ids": [' + "7" * 5000 + ']}\n', ":1: not usable JSON (an integer of 5000 digits"),
    ('{"prompt": "a"}\n{"prompt": "b", "x": ' + "[" * 100_000 + "]" * 100_000 + '}\n', ":2: not usable JSON (nested"),
    ('{"prompt": "b", "x": ' + "[" * 100 + "]" * 100 + '}\n', ":1: not usable JSON (nested deeper than 64"),
])
def test_errors_name_the_line(tmp_path, text, msg):
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(UsageError, match=msg.replace("(", r"\(")) as e:
        read_prompts_jsonl(f)
    assert "\n" not in str(e.value) and str(f) in str(e.value)


def test_errors_name_the_option_and_reject_non_utf8(tmp_path):
    with pytest.raises(UsageError, match="^--prompts-file .*missing.jsonl: no such file"):
        read_prompts_jsonl(tmp_path / "missing.jsonl", "--prompts-file")
    f = tmp_path / "latin1.jsonl"
    f.write_bytes('{"prompt": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(UsageError, match="cannot read it as UTF-8"):
        read_prompts_jsonl(f)


def test_lines_end_at_newline_only(tmp_path):
    """U+2028, U+2029, U+0085 are text inside a JSON string; str.splitlines() splits on them."""
    f = tmp_path / "seps.jsonl"
    f.write_text('{"prompt": "a\u2028b\u2029c\x85d"}\r\n{"prompt": "z"}\n', encoding="utf-8")
    assert [p.text for p in read_prompts_jsonl(f)] == ["a\u2028b\u2029c\x85d", "z"]
    assert read_prompts_jsonl(f)[1].id == "seps-2"  # line numbers count newlines only
