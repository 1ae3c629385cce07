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
