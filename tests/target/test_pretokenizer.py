"""tokenizer.ggml.pre for BPE targets: llama.cpp's hash table first, then the pre_tokenizer
definition's family."""
from __future__ import annotations

import hashlib
import json

import pytest

from dflash_gguf.errors import TargetError
from dflash_gguf.target import chkhsh
from dflash_gguf.target.chkhsh import CHKTXT
from dflash_gguf.target.info import target_from_hf_dir
from tests.target.conftest import QWEN_TOK, llama_config, make_target, needs_libs, qwen_config, to_llama3_style, write_json


@needs_libs
def test_bpe_known_hash_wins_over_structure(tmp_path, monkeypatch):
    d = make_target(tmp_path / "qwen", QWEN_TOK, qwen_config())
    from tokenizers import Tokenizer
    ids = Tokenizer.from_file(str(d / "tokenizer.json")).encode(CHKTXT).ids
    h = hashlib.sha256(str(list(ids)).encode()).hexdigest()
    monkeypatch.setitem(chkhsh.CHKHSH, h, "deepseek-r1-qwen")
    info = target_from_hf_dir(d)
    assert (info.tokenizer_pre, info.pre_source) == ("deepseek-r1-qwen", "chkhsh")
    # A truncation setting in tokenizer.json must not cut the check text (transformers ignores it).
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tj["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
    write_json(d / "tokenizer.json", tj)
    assert target_from_hf_dir(d).pre_source == "chkhsh"


@needs_libs
def test_bpe_structural_families(tmp_path):
    # Same vocab, other pre-tokenizer definitions: llama-bpe needs its regex + ignore_merges +
    # clean-up; a changed regex or byte-level flag is no family -> refuse.
    d = make_target(tmp_path / "l3", QWEN_TOK, llama_config(bos_token_id=400))
    to_llama3_style(d)
    assert target_from_hf_dir(d).tokenizer_pre == "llama-bpe"

    d2 = make_target(tmp_path / "odd", QWEN_TOK, qwen_config())
    tj = json.loads((d2 / "tokenizer.json").read_text(encoding="utf-8"))
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{N}{1,2}|\s+"
    write_json(d2 / "tokenizer.json", tj)
    with pytest.raises(TargetError, match="not recognised.*--target-gguf"):
        target_from_hf_dir(d2)

    d3 = make_target(tmp_path / "cleanup", QWEN_TOK, qwen_config())
    tc = json.loads((d3 / "tokenizer_config.json").read_text(encoding="utf-8"))
    tc["clean_up_tokenization_spaces"] = True  # qwen2's llama.cpp runtime does not clean spaces
    write_json(d3 / "tokenizer_config.json", tc)
    with pytest.raises(TargetError, match="--target-gguf"):
        target_from_hf_dir(d3)
