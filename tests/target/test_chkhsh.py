"""llama.cpp's check text and hash table, copied verbatim, and the ids behind the hash."""
from __future__ import annotations

import ast

import pytest

from dflash_gguf.target.chkhsh import CHKHSH, CHKTXT
from tests.conftest import llama_cpp_src


@pytest.mark.slow
def test_chkhsh_inputs_match_llama_cpp(golden):
    # Our check text is llama.cpp's, and the tokenizers package gives the ids transformers
    # gives llama.cpp — so a real target's hash matches llama.cpp's table the same way.
    from tokenizers import Tokenizer

    src = llama_cpp_src()
    tree = ast.parse((src / "conversion" / "base.py").read_text(encoding="utf-8"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_vocab_base_pre")
    assign = next(n for n in ast.walk(fn) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "chktxt")
    assert ast.literal_eval(assign.value) == CHKTXT
    table = {}
    for node in fn.body:  # source order
        if isinstance(node, ast.If) and getattr(node.test, "left", None) and getattr(node.test.left, "id", "") == "chkhsh":
            h = node.test.comparators[0].value
            table[h] = node.body[0].value.value  # later entries overwrite, like the ifs
    assert table == CHKHSH

    for name in ("bpe-qwen3", "bpe-llama3"):
        tdir = golden[name][3]
        ours = Tokenizer.from_file(str(tdir / "tokenizer.json")).encode(CHKTXT).ids
        assert golden[name][2] == list(ours), name
