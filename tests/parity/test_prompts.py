"""Text prompts go through the target's tokenizer."""
import json

import pytest

pytest.importorskip("torch")

from tests.conftest import DRAFTERS  # noqa: E402
from tests.parity.conftest import QWEN  # noqa: E402


def test_text_prompt_uses_target_tokenizer(cli, tmp_path):
    rep = tmp_path / "r.json"
    code, _, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--prompt", "hello world",
                      "--max-new-tokens", "4", "--device", "cpu", "--report", rep)
    assert code == 0, se
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(QWEN / "tokenizer.json")).encode("hello world", add_special_tokens=False).ids
    assert json.loads(rep.read_text())["payload"]["prompt_ids"] == ids


def test_prompts_file_ids_as_given_and_text_through_the_tokenizer(tmp_path):
    from tokenizers import Tokenizer

    from dflash_gguf.parity.prompts import read_prompts_file

    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt_ids": [5, 6]}\n{"prompt": "hello world", "raw": true}\n')
    ids = Tokenizer.from_file(str(QWEN / "tokenizer.json")).encode("hello world", add_special_tokens=False).ids
    assert read_prompts_file(f, QWEN) == [[5, 6], ids]
