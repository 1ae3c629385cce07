"""target/gemma4_vocab.py: Gemma 4's vocabulary through gguf-py's LlamaHfVocab (transformers'
AutoTokenizer), on a tiny byte-fallback BPE tokenizer written here: the tokens in id order,
their types (bytes, specials, the chat markers shown as text), and where add_bos_token lands."""
from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from dflash_gguf.errors import TargetError
from dflash_gguf.target.gemma4_vocab import gemma4_vocab
from dflash_gguf.target.info import target_from_hf_dir
from dflash_gguf.target.keys import BYTE, CONTROL, NORMAL, USER_DEFINED
from tests.target.conftest import QWEN_TOK, make_target, needs_libs, qwen_config
from tests.target.real_vocab_files import gemma_tokenizer_json

SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<|channel>", "<channel|>")
NAMED = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>")
WORDS = ["\u2581", "a", "b", "ab", "\u2581a", "\u2581ab", "<|channel>", "<channel|>", '<|"|>', "<start_of_turn>",
         "<end_of_turn>"]


def _vocab() -> dict[str, int]:
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    vocab.update({f"<0x{b:02X}>": 4 + b for b in range(256)})
    for w in WORDS:
        vocab[w] = len(vocab)
    return vocab


def _gemma_dir(d: Path, tokenizer_config: dict | None = None) -> Path:
    """tokenizer.json (BPE, byte fallback, a Sequence decoder: what LlamaHfVocab reads) and
    tokenizer_config.json; the markers are added tokens, some flagged special, and only NAMED named
    as special tokens (an added token flagged special but not named stays NORMAL in gguf-py)."""
    d.mkdir()
    vocab = _vocab()
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": t in SPECIAL} for t, i in vocab.items() if t.startswith("<") and not t.startswith("<0x")]
    tj = gemma_tokenizer_json(vocab, [["a", "b"], ["\u2581", "a"], ["\u2581a", "b"]], added, "<unk>")
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
          "pad_token": "<pad>", "unk_token": "<unk>", "extra_special_tokens": ["<start_of_turn>"],
          "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
          **(tokenizer_config or {})}
    (d / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    (d / "tokenizer_config.json").write_text(json.dumps(tc), encoding="utf-8")
    return d


needs_transformers = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("transformers") is None,
    reason="transformers is not installed (the [test] extra): gguf-py's LlamaHfVocab reads a Gemma 4 tokenizer through it")


@needs_libs
def test_gemma4_needs_a_byte_fallback_bpe_tokenizer(tmp_path):
    # Gemma 4 goes through gguf-py's LlamaHfVocab (transformers' AutoTokenizer), which wants a
    # byte-fallback BPE tokenizer.json
    pytest.importorskip("transformers", reason="transformers is not installed (the [test] extra): gguf-py's "
                                               "LlamaHfVocab reads a Gemma 4 tokenizer through it")
    d = make_target(tmp_path / "g", QWEN_TOK, qwen_config(architectures=["Gemma4ForConditionalGeneration"]))
    with pytest.raises(TargetError, match="not a tokenizer gguf-py's LlamaHfVocab reads.*--target-gguf"):
        target_from_hf_dir(d)


@needs_transformers
def test_tokens_types_and_keys(tmp_path):
    kvs, notes = gemma4_vocab(_gemma_dir(tmp_path / "g"))
    by = {kv.key: kv.value for kv in kvs}
    vocab = _vocab()
    tokens = list(by["tokenizer.ggml.tokens"])
    assert tokens == sorted(vocab, key=vocab.get)  # id order
    want_types = []
    for t in tokens:
        if t.startswith("<0x"):
            want_types.append(BYTE)
        elif t in ("<|channel>", "<channel|>", '<|"|>'):  # Gemma4Model shows these as text, special or not
            want_types.append(USER_DEFINED)
        elif t in NAMED:  # the tokens tokenizer_config.json names special (transformers' all_special_ids)
            want_types.append(CONTROL)
        else:
            want_types.append(NORMAL)
    assert list(by["tokenizer.ggml.token_type"]) == want_types
    assert by["tokenizer.ggml.model"] == "gemma4" and len(by["tokenizer.ggml.scores"]) == len(tokens)
    assert list(by["tokenizer.ggml.merges"]) == ["a b", "\u2581 a", "\u2581a b"]
    assert (by["tokenizer.ggml.bos_token_id"], by["tokenizer.ggml.eos_token_id"]) == (2, 1)
    assert by["tokenizer.ggml.add_space_prefix"] is False and by["tokenizer.ggml.add_bos_token"] is True
    assert [kv.key for kv in kvs][:4] == ["tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                          "tokenizer.ggml.token_type"]
    assert notes == []


@needs_transformers
@pytest.mark.parametrize("config,where", [({"add_bos_token": False}, "in place"), ({}, "last")])
def test_add_bos_token_is_true_in_place_or_last(tmp_path, config, where):
    # Gemma4Model calls add_add_bos_token(True) after SpecialVocab: a value SpecialVocab wrote is
    # overwritten where it stands, otherwise the key comes after add_space_prefix
    kvs, _ = gemma4_vocab(_gemma_dir(tmp_path / "g", config))
    keys = [kv.key for kv in kvs]
    bos = [kv for kv in kvs if kv.key == "tokenizer.ggml.add_bos_token"]
    assert len(bos) == 1 and bos[0].value is True
    i, j = keys.index("tokenizer.ggml.add_bos_token"), keys.index("tokenizer.ggml.add_space_prefix")
    assert (i < j) if where == "in place" else (i == len(keys) - 1 and j == len(keys) - 2)


def test_without_transformers_it_says_which_package(tmp_path, monkeypatch):
    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__",
                        lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name)) if name == "transformers"
                        else real(name, *a, **k))
    with pytest.raises(TargetError, match="needs the 'transformers' package.*--target-gguf") as e:
        gemma4_vocab(tmp_path)
    assert "\n" not in str(e.value)


@needs_transformers
def test_a_tokenizer_that_is_not_byte_fallback_bpe_is_refused(tmp_path):
    d = _gemma_dir(tmp_path / "g")
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tj["model"]["byte_fallback"] = False
    (d / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    with pytest.raises(TargetError, match="tokenizer.json: not a tokenizer gguf-py's LlamaHfVocab reads"):
        gemma4_vocab(d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(TargetError, match="LlamaHfVocab reads"):
        gemma4_vocab(d)
