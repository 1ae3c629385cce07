"""bench's suites as diagnose's prompt sets (diagnose/suites.py): the same prompts bench reads, as
token ids through the target's tokenizer, the first --limit of each, names kept apart."""
import pytest

from dflash_gguf.diagnose import suite_prompts
from dflash_gguf.errors import UsageError
from tests.conftest import RUNTIME


def test_a_shipped_suite_and_a_file_become_token_ids_through_the_targets_tokenizer():
    pytest.importorskip("tokenizers", reason="tokenizers is not installed (the [tokenizers] extra)")
    from dflash_gguf.bench.suites import load_suite
    from dflash_gguf.parity import read_prompts_file
    from dflash_gguf.parity.prompts import tokenize

    sets = suite_prompts(["maths", str(RUNTIME / "prompts.jsonl")], RUNTIME / "target", None, limit=2)
    assert [n for n, _ in sets] == ["maths", "prompts"]
    texts = [p.text for p in load_suite("maths", 2).prompts]
    assert sets[0][1] == [tokenize(t, RUNTIME / "target") for t in texts]
    assert sets[1][1] == read_prompts_file(RUNTIME / "prompts.jsonl", RUNTIME / "target")[:2]


def test_suites_named_alike_keep_their_spec(tmp_path):
    a, b = tmp_path / "a" / "s.jsonl", tmp_path / "b" / "s.jsonl"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text('{"prompt_ids": [1, 2, 3]}\n')
    assert [n for n, _ in suite_prompts([str(a), str(b)], RUNTIME / "target", None)] == [str(a), str(b)]


@pytest.mark.parametrize("spec,tok,says", [
    ("nope", None, "not a suite name"),
    ("chat", RUNTIME / "target.gguf", "pass --tokenizer-dir"),  # text prompts, and no tokenizer directory
])
def test_bad_suites_are_usage_errors(spec, tok, says):
    with pytest.raises(UsageError, match=says):
        suite_prompts([spec], RUNTIME / "target.gguf", tok)
