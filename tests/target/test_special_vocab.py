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
