"""What gguf-py's SpecialVocab adds after the tokens (merges, special ids, flags, chat
templates); the full key set is golden-compared in test_hf_vocab.py."""
from __future__ import annotations

import json

from dflash_gguf.target.info import target_from_hf_dir
from tests.target.conftest import QWEN_TOK, make_target, needs_libs, qwen_config, write_json


@needs_libs
def test_bpe_string_merges_and_merges_txt(tmp_path):
    d = make_target(tmp_path / "q", QWEN_TOK, qwen_config())
    ref = target_from_hf_dir(d).get("tokenizer.ggml.merges")
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tj["model"]["merges"] = [" ".join(p) for p in tj["model"]["merges"]]  # pre-4.45 spelling
    write_json(d / "tokenizer.json", tj)
    assert target_from_hf_dir(d).get("tokenizer.ggml.merges") == ref


def test_pair_merges_spell_a_space_as_u0120():
    """transformers >= 4.45 writes merges as pairs; llama.cpp joins them with a space and spells a
    space inside a part as U+0120 (chr(ord(" ") + 256)), character by character."""
    from pathlib import Path

    from dflash_gguf.target.special_vocab import _merges_from_json

    def llama_cpp(merges):  # convert_hf_to_gguf's own per-character rewrite
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair)
                for pair in merges]

    pairs = [["a", "b"], [" ", "t"], ["Ġ  x", " y "], ["", "é中"]]
    assert _merges_from_json({"model": {"merges": pairs}}, Path("t.json")) == llama_cpp(pairs) == \
        ["a b", "Ġ t", "ĠĠĠx ĠyĠ", " é中"]
    odd = pairs + [["a", "b", "c d"]]  # not a pair: the same spelling as llama.cpp's, all parts joined
    assert _merges_from_json({"model": {"merges": odd}}, Path("t.json")) == llama_cpp(odd)
