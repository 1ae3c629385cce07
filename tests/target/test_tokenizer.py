"""Target tokenizer metadata: exact copy from a GGUF, and llama.cpp-identical rebuild from a
Hugging Face dir (golden-compared against llama.cpp's own converter when its source is here).

The golden tests run llama.cpp's ``convert_hf_to_gguf.py`` in DFlash mode (a drafter config
+ ``--target-model-dir``, ``--vocab-only``: no weights needed) — the exact code path whose
output the drafter GGUF must reproduce. Point ``DFLASH_LLAMA_CPP_SRC`` at a llama.cpp source
tree (CI: ``vendor/llama.cpp`` of the llama-cpp-python 0.3.36 sdist); they skip without it.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType as T, GGUFWriter

from dflash_gguf.config import parse_config
from dflash_gguf.errors import GGUFFormatError, TargetError, UsageError
from dflash_gguf.fileio.gguf_writer import TensorOut, write_gguf
from dflash_gguf.fileio.types import KV
from dflash_gguf.target.tokenizer import (
    CHKHSH,
    CHKTXT,
    CONTROL,
    NORMAL,
    UNUSED,
    USER_DEFINED,
    check_drafter_fits,
    drafter_tokenizer_kvs,
    load_target,
    target_from_gguf,
    target_from_hf_dir,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
QWEN_TOK = FIXTURES / "targets" / "qwen3-tiny"
LLAMA_TOK = FIXTURES / "targets" / "llama-tiny"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
VOCAB = 512

sys.path.insert(0, str(FIXTURES))
import make_tokenizers  # noqa: E402


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# The GGUF-copy tests need only gguf; rebuilding from a HF dir needs the [tokenizers] extra.
needs_libs = pytest.mark.skipif(not (_have("tokenizers") and _have("sentencepiece")),
                                reason="needs the [tokenizers] extra (tokenizers, sentencepiece)")


# --- helpers ---------------------------------------------------------------------------------

def qwen_config(**over) -> dict:
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": VOCAB, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "bos_token_id": 400, "eos_token_id": 402,
        "tie_word_embeddings": False,
    }
    cfg.update(over)
    return cfg


def llama_config(**over) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": VOCAB, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False,
    }
    cfg.update(over)
    return cfg


def drafter_raw(mask: int, **over) -> dict:
    raw = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": VOCAB, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "block_size": 16, "num_target_layers": 4,
        "dflash_config": {"mask_token_id": mask, "target_layer_ids": [1, 2]},
        "tie_word_embeddings": False,
    }
    raw.update(over)
    return raw


def make_target(dst: Path, src: Path, config: dict) -> Path:
    dst.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")


def read_tokenizer_kvs(path: Path) -> list[tuple]:
    """Every tokenizer.* field of a GGUF as (key, type, sub_type, value), in file order."""
    out = []
    for name, f in GGUFReader(path).fields.items():
        if not name.startswith("tokenizer."):
            continue
        if f.types[0] == T.ARRAY:
            sub = f.types[-1]
            if sub == T.STRING:
                value = [bytes(f.parts[i].tobytes()) for i in f.data]
            else:
                value = [f.parts[i].tolist()[0] for i in f.data]
            out.append((name, T.ARRAY, sub, value))
        elif f.types[0] == T.STRING:
            out.append((name, T.STRING, None, bytes(f.parts[-1].tobytes())))
        else:
            out.append((name, f.types[0], None, f.parts[-1].tolist()[0]))
    return out


def as_file_values(kvs: list[KV]) -> list[tuple]:
    """Our KVs the way they land in a GGUF (strings as UTF-8 bytes, floats as float32)."""
    def b(x):
        return x if isinstance(x, bytes) else str(x).encode("utf-8")

    out = []
    for kv in kvs:
        v = kv.value
        if kv.type == T.ARRAY and kv.sub_type == T.STRING:
            v = [b(x) for x in v]
        elif kv.type == T.ARRAY and kv.sub_type == T.FLOAT32:
            v = [float(np.float32(x)) for x in v]
        elif kv.type == T.ARRAY and kv.sub_type == T.BOOL:
            v = [bool(x) for x in v]
        elif kv.type == T.STRING:
            v = b(v)
        elif kv.type == T.FLOAT32:
            v = float(np.float32(v))
        elif kv.type == T.BOOL:
            v = bool(v)
        out.append((kv.key, kv.type, kv.sub_type, v))
    return out


def tiny_tensor() -> list[TensorOut]:
    return [TensorOut("output_norm.weight", (4,), GGMLQuantizationType.F32, 16, lambda: np.ones(4, np.float32))]


# --- fixtures are what the script makes --------------------------------------------------------

@needs_libs
def test_fixture_tokenizers_are_reproducible(tmp_path):
    # The committed files must be exactly what make_tokenizers.py writes (deterministic).
    bpe = make_tokenizers.write_bpe_tokenizer(tmp_path / "q", VOCAB)
    spm = make_tokenizers.write_spm_tokenizer(tmp_path / "l", VOCAB)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "q" / name).read_bytes() == (QWEN_TOK / name).read_bytes(), name
    for name in ("tokenizer.model", "tokenizer_config.json"):
        assert (tmp_path / "l" / name).read_bytes() == (LLAMA_TOK / name).read_bytes(), name
    assert bpe["n_base"] + len(make_tokenizers.BPE_ADDED) < VOCAB  # room for [PAD] slots
    assert spm["n_base"] + len(make_tokenizers.SPM_ADDED) < VOCAB
    tokenizer_files = [d / n for d in (QWEN_TOK, LLAMA_TOK) for n in TOKENIZER_FILES if (d / n).is_file()]
    assert len(tokenizer_files) == 4 and all(p.stat().st_size < 64_000 for p in tokenizer_files)


# --- from a target GGUF: exact copy ------------------------------------------------------------

def _write_target_gguf(path: Path, arch: str = "qwen3", tokenizer: bool = True, extra=None) -> list[KV]:
    tokens = ["<unk>", "a", "b\ufffdc", "é", "[PAD4]"]
    tok_kvs = [
        KV("tokenizer.ggml.model", "gpt2", T.STRING),
        KV("tokenizer.ggml.pre", "qwen2", T.STRING),
        KV("tokenizer.ggml.tokens", tokens + [b"\xff\xfe-raw"], T.ARRAY, T.STRING),
        KV("tokenizer.ggml.scores", [0.0, -1.5, 3.25, -1e-8, -10000.0, 1.0 / 3.0], T.ARRAY, T.FLOAT32),
        KV("tokenizer.ggml.token_type", [2, 1, 1, 1, 5, 4], T.ARRAY, T.INT32),
        KV("tokenizer.ggml.merges", ["a b", "Ġ t"], T.ARRAY, T.STRING),
        KV("tokenizer.ggml.bos_token_id", 1, T.UINT32),
        KV("tokenizer.ggml.add_bos_token", False, T.BOOL),
        KV("tokenizer.chat_template", "{{ messages }} \u00e9\u4e2d", T.STRING),
        KV("tokenizer.test.u8", 7, T.UINT8), KV("tokenizer.test.i8", -7, T.INT8),
        KV("tokenizer.test.u16", 700, T.UINT16), KV("tokenizer.test.i16", -700, T.INT16),
        KV("tokenizer.test.i32", -70000, T.INT32), KV("tokenizer.test.f32", 0.1, T.FLOAT32),
        KV("tokenizer.test.u64", 2**40, T.UINT64), KV("tokenizer.test.i64", -(2**40), T.INT64),
        KV("tokenizer.test.f64", 0.1, T.FLOAT64),
        KV("tokenizer.test.bools", [True, False, True], T.ARRAY, T.BOOL),
        KV("tokenizer.test.u64s", [1, 2**63], T.ARRAY, T.UINT64),
    ]
    w = GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.embedding_length", 64)
    w.add_uint32(f"{arch}.block_count", 4)
    for kv in (extra or []):
        w.add_key_value(kv.key, kv.value, kv.type, sub_type=kv.sub_type)
    if tokenizer:
        # Interleave a non-tokenizer key: the copy keeps tokenizer.* keys only, in file order.
        for kv in tok_kvs[:3]:
            w.add_key_value(kv.key, kv.value, kv.type, sub_type=kv.sub_type)
        w.add_string("general.name", "target")
        for kv in tok_kvs[3:]:
            w.add_key_value(kv.key, kv.value, kv.type, sub_type=kv.sub_type)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), np.float32))  # more rows than tokens
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tok_kvs


def test_from_gguf_copies_every_tokenizer_key_exactly(tmp_path):
    src = tmp_path / "target.gguf"
    written = _write_target_gguf(src)
    info = target_from_gguf(src)
    assert (info.hidden_size, info.num_hidden_layers, info.vocab_size, info.n_vocab_tokens) == (64, 4, 8, 6)
    assert (info.arch, info.tokenizer_model, info.tokenizer_pre, info.pre_source) == ("qwen3", "gpt2", "qwen2", "copied")
    assert [kv.key for kv in info.kvs] == [kv.key for kv in written]
    # Genuine U+FFFD stays a str, invalid UTF-8 stays bytes.
    toks = info.get("tokenizer.ggml.tokens")
    assert toks[2] == "b\ufffdc" and toks[5] == b"\xff\xfe-raw"

    # Round trip: write our copy into a new GGUF; the tokenizer fields must be byte-identical.
    out = tmp_path / "drafter.gguf"
    write_gguf(out, "dflash", info.kvs, tiny_tensor())
    assert read_tokenizer_kvs(out) == read_tokenizer_kvs(src)
    assert read_tokenizer_kvs(src) == as_file_values(written)


def test_from_gguf_vocab_size_prefers_embedding_rows_and_drops_mtp_layers(tmp_path):
    src = tmp_path / "t.gguf"
    _write_target_gguf(src, extra=[KV("qwen3.nextn_predict_layers", 1, T.UINT32)])
    info = target_from_gguf(src)
    assert info.num_hidden_layers == 3 and any("MTP" in n for n in info.notes)


def test_from_gguf_errors(tmp_path):
    with pytest.raises(TargetError, match="no such file"):
        target_from_gguf(tmp_path / "missing.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b'{"not": "gguf"}' + b"\0" * 64)
    with pytest.raises(GGUFFormatError):
        target_from_gguf(bad)
    notok = tmp_path / "notok.gguf"
    _write_target_gguf(notok, tokenizer=False)
    with pytest.raises(TargetError, match="has no tokenizer"):
        target_from_gguf(notok)
    draft = tmp_path / "draft.gguf"
    _write_target_gguf(draft, arch="dflash")
    with pytest.raises(TargetError, match="drafter GGUF"):
        target_from_gguf(draft)
    with pytest.raises(UsageError):
        load_target(notok, tmp_path)
    assert load_target() is None


def test_drafter_kvs_put_the_mask_last_or_in_place(tmp_path):
    src = tmp_path / "t.gguf"
    _write_target_gguf(src)
    info = target_from_gguf(src)
    kvs = drafter_tokenizer_kvs(info, 3)
    assert kvs[-1] == KV("tokenizer.ggml.mask_token_id", 3, T.UINT32) and len(kvs) == len(info.kvs) + 1
    src2 = tmp_path / "t2.gguf"
    _write_target_gguf(src2, extra=[])
    with_mask = KV("tokenizer.ggml.mask_token_id", 9, T.UINT32)
    info2 = dataclasses.replace(target_from_gguf(src2), kvs=(with_mask,) + info.kvs)
    kvs2 = drafter_tokenizer_kvs(info2, 3)
    assert kvs2[0].value == 3 and len(kvs2) == len(info2.kvs)


# --- from a HF dir: BPE (Qwen3-style) ---------------------------------------------------------

@needs_libs
def test_bpe_target_vocab(tmp_path):
    d = make_target(tmp_path / "qwen", QWEN_TOK, qwen_config())
    info = target_from_hf_dir(d)
    tj = json.loads((QWEN_TOK / "tokenizer.json").read_text(encoding="utf-8"))
    n_base = len(tj["model"]["vocab"])
    assert (info.tokenizer_model, info.tokenizer_pre, info.pre_source) == ("gpt2", "qwen2", "pre_tokenizer")
    assert any("qwen2" in n for n in info.notes)  # the CLI must be able to say how pre was decided
    assert (info.vocab_size, info.n_vocab_tokens, info.hidden_size, info.num_hidden_layers) == (VOCAB, VOCAB, 64, 4)
    toks, types = info.get("tokenizer.ggml.tokens"), info.get("tokenizer.ggml.token_type")
    assert toks[:n_base] == sorted(tj["model"]["vocab"], key=tj["model"]["vocab"].get)
    assert set(types[:n_base]) == {NORMAL}
    expected_types = {"<|endoftext|>": CONTROL, "<|im_start|>": CONTROL, "<|im_end|>": CONTROL, "<|mask|>": CONTROL,
                      "<tool_call>": USER_DEFINED, "</tool_call>": USER_DEFINED, "<think>": USER_DEFINED,
                      "</think>": USER_DEFINED}
    for i, (content, _) in enumerate(make_tokenizers.BPE_ADDED):
        assert toks[n_base + i] == content and types[n_base + i] == expected_types[content]
    first_pad = n_base + len(make_tokenizers.BPE_ADDED)
    assert toks[first_pad:] == [f"[PAD{i}]" for i in range(first_pad, VOCAB)]
    assert set(types[first_pad:]) == {UNUSED}
    merges = info.get("tokenizer.ggml.merges")
    assert merges == [" ".join(p) for p in tj["model"]["merges"]] and merges[0] == "Ġ t"
    # eos/pad from tokenizer_config by content, bos from config.json; ByteLevel post-processor
    # means no automatic bos/eos.
    assert [kv.key for kv in info.kvs][5:] == [
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.chat_template"]
    assert (info.get("tokenizer.ggml.eos_token_id"), info.get("tokenizer.ggml.padding_token_id"),
            info.get("tokenizer.ggml.bos_token_id")) == (402, 400, 400)
    assert info.get("tokenizer.ggml.add_bos_token") is False and info.get("tokenizer.ggml.add_eos_token") is False
    assert info.get("tokenizer.chat_template") == make_tokenizers.CHATML_TEMPLATE


@needs_libs
def test_bpe_known_hash_wins_over_structure(tmp_path, monkeypatch):
    d = make_target(tmp_path / "qwen", QWEN_TOK, qwen_config())
    from dflash_gguf.target import tokenizer as tk
    import hashlib
    from tokenizers import Tokenizer
    ids = Tokenizer.from_file(str(d / "tokenizer.json")).encode(CHKTXT).ids
    h = hashlib.sha256(str(list(ids)).encode()).hexdigest()
    monkeypatch.setitem(tk.CHKHSH, h, "deepseek-r1-qwen")
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
    _to_llama3_style(d)
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


def _to_llama3_style(d: Path) -> None:
    """Turn the Qwen fixture into a Llama-3-shaped tokenizer: Llama-3 regex, ignore_merges,
    no normalizer, TemplateProcessing that prepends the bos, PreTrainedTokenizerFast config."""
    from dflash_gguf.target.tokenizer import _FAMILIES

    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    regex = next(f.split_regex for f in _FAMILIES if f.name == "llama-bpe")
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex
    tj["model"]["ignore_merges"] = True
    tj["normalizer"] = None
    bos = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [400], "tokens": ["<|endoftext|>"]}},
    }
    write_json(d / "tokenizer.json", tj)
    tc = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    for k in ("add_bos_token", "add_prefix_space", "pad_token", "errors", "split_special_tokens"):
        tc.pop(k, None)
    tc.update(bos_token="<|endoftext|>", clean_up_tokenization_spaces=True, tokenizer_class="PreTrainedTokenizerFast")
    write_json(d / "tokenizer_config.json", tc)


@needs_libs
def test_bpe_string_merges_and_merges_txt(tmp_path):
    d = make_target(tmp_path / "q", QWEN_TOK, qwen_config())
    ref = target_from_hf_dir(d).get("tokenizer.ggml.merges")
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tj["model"]["merges"] = [" ".join(p) for p in tj["model"]["merges"]]  # pre-4.45 spelling
    write_json(d / "tokenizer.json", tj)
    assert target_from_hf_dir(d).get("tokenizer.ggml.merges") == ref


# --- from a HF dir: SentencePiece (Llama-style) ----------------------------------------------

@needs_libs
def test_spm_target_vocab(tmp_path):
    import sentencepiece as spm

    d = make_target(tmp_path / "llama", LLAMA_TOK, llama_config())
    info = target_from_hf_dir(d)
    sp = spm.SentencePieceProcessor(model_file=str(LLAMA_TOK / "tokenizer.model"))
    n = sp.vocab_size()
    assert (info.tokenizer_model, info.tokenizer_pre, info.pre_source) == ("llama", "default", "default")
    toks, scores, types = (info.get(k) for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"))
    assert len(toks) == len(scores) == len(types) == VOCAB
    assert toks[:n] == [sp.IdToPiece(i) for i in range(n)]
    # <unk> is UNKNOWN in the model but special in tokenizer_config.json's added_tokens_decoder,
    # which llama.cpp applies last (CONTROL); then the 256 byte-fallback pieces.
    assert types[:3] == [CONTROL] * 3 and types[3:259] == [6] * 256
    # tokenizer_config.json's added tokens past the SentencePiece vocab, then [PAD] to vocab_size.
    assert toks[n:n + 2] == ["<|im_start|>", "<tool>"] and types[n:n + 2] == [CONTROL, USER_DEFINED]
    assert scores[n:n + 2] == [-1000.0, -1000.0]
    assert toks[n + 2:] == [f"[PAD{i}]" for i in range(n + 2, VOCAB)] and set(scores[n + 2:]) == {-10000.0}
    assert (info.get("tokenizer.ggml.bos_token_id"), info.get("tokenizer.ggml.eos_token_id")) == (1, 2)
    assert info.get("tokenizer.ggml.add_bos_token") is True and info.get("tokenizer.ggml.add_eos_token") is False
    assert info.get("tokenizer.ggml.merges") is None


# --- errors -----------------------------------------------------------------------------------

@needs_libs
def test_missing_tokenizer_files(tmp_path):
    d = tmp_path / "bare"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(qwen_config()))
    with pytest.raises(TargetError, match="no tokenizer.json.*--target-gguf"):
        target_from_hf_dir(d)
    (d / "vocab.json").write_text("{}")
    with pytest.raises(TargetError, match="found only vocab.json"):
        target_from_hf_dir(d)
    with pytest.raises(TargetError, match="not a directory"):
        target_from_hf_dir(tmp_path / "nope")
    e = tmp_path / "noconfig"
    e.mkdir()
    with pytest.raises(TargetError, match="config.json"):
        target_from_hf_dir(e)
    # Corrupt tokenizer files: a one-line TargetError, not a library traceback.
    bad_spm = make_target(tmp_path / "badspm", LLAMA_TOK, llama_config())
    (bad_spm / "tokenizer.model").write_bytes(b"garbage")
    bad_bpe = make_target(tmp_path / "badbpe", QWEN_TOK, qwen_config())
    (bad_bpe / "tokenizer.json").write_text('{"model": {}}')
    for d, what in ((bad_spm, "sentencepiece cannot load"), (bad_bpe, "tokenizers package cannot load")):
        with pytest.raises(TargetError, match=what) as err:
            target_from_hf_dir(d)
        assert "\n" not in str(err.value) and "--target-gguf" in str(err.value)


@needs_libs
def test_unsupported_architecture_and_vocab_overflow(tmp_path):
    d = make_target(tmp_path / "g", QWEN_TOK, qwen_config(architectures=["Gemma4ForConditionalGeneration"]))
    with pytest.raises(TargetError, match="Gemma4ForConditionalGeneration.*--target-gguf"):
        target_from_hf_dir(d)
    d2 = make_target(tmp_path / "small", QWEN_TOK, qwen_config(vocab_size=300))
    with pytest.raises(TargetError, match="past config.json vocab_size 300"):
        target_from_hf_dir(d2)
    d3 = make_target(tmp_path / "smallspm", LLAMA_TOK, llama_config(vocab_size=300))
    with pytest.raises(TargetError, match="vocab_size is 300"):
        target_from_hf_dir(d3)


@needs_libs
def test_text_config_nesting(tmp_path):
    # Multimodal targets nest the text model; llama.cpp dispatches on text_config.architectures.
    inner = qwen_config()
    top = {"architectures": ["SomethingForConditionalGeneration"], "text_config": inner}
    d = make_target(tmp_path / "mm", QWEN_TOK, top)
    info = target_from_hf_dir(d)
    assert info.arch == "Qwen3ForCausalLM" and info.hidden_size == 64 and info.vocab_size == VOCAB


@needs_libs
def test_disagreeing_added_tokens_refused(tmp_path):
    d = make_target(tmp_path / "q", QWEN_TOK, qwen_config())
    tc = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    tc["added_tokens_decoder"]["405"]["special"] = True  # tokenizer.json says <think> is not special
    write_json(d / "tokenizer_config.json", tc)
    with pytest.raises(TargetError, match="disagrees"):
        target_from_hf_dir(d)
    d2 = make_target(tmp_path / "q2", QWEN_TOK, qwen_config())
    tc = json.loads((d2 / "tokenizer_config.json").read_text(encoding="utf-8"))
    tc["unk_token"] = "<|not-in-vocab|>"
    write_json(d2 / "tokenizer_config.json", tc)
    with pytest.raises(TargetError, match="not-in-vocab"):
        target_from_hf_dir(d2)


@needs_libs
def test_missing_optional_packages(tmp_path, monkeypatch):
    d = make_target(tmp_path / "q", QWEN_TOK, qwen_config())
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(TargetError, match=r"dflash-gguf\[tokenizers\].*--target-gguf"):
        target_from_hf_dir(d)
    d2 = make_target(tmp_path / "l", LLAMA_TOK, llama_config())
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(TargetError, match=r"sentencepiece.*dflash-gguf\[tokenizers\]"):
        target_from_hf_dir(d2)


# --- drafter fit --------------------------------------------------------------------------------

def _drafter(tmp_path, **over):
    return parse_config(drafter_raw(407, **over), tmp_path / "config.json")


@needs_libs
def test_check_drafter_fits(tmp_path):
    d = make_target(tmp_path / "q", QWEN_TOK, qwen_config())
    target = target_from_hf_dir(d)
    assert check_drafter_fits(target, _drafter(tmp_path)) == []  # hidden 64 = drafter hidden (no target_hidden_size)
    assert check_drafter_fits(target, _drafter(tmp_path), fc_in_features=2 * 64) == []
    with pytest.raises(TargetError, match=r"hidden_size \(no target_hidden_size in config\) = 128"):
        check_drafter_fits(target, _drafter(tmp_path, hidden_size=128, intermediate_size=256))

    with pytest.raises(TargetError, match="vocab_size 1024 .drafter. != 512"):
        check_drafter_fits(target, _drafter(tmp_path, vocab_size=1024))
    with pytest.raises(TargetError, match="hidden size 64"):
        check_drafter_fits(target, _drafter(tmp_path, target_hidden_size=128))
    with pytest.raises(TargetError, match="fc input width 256 / 2 taps = 128"):
        check_drafter_fits(target, _drafter(tmp_path), fc_in_features=256)
    with pytest.raises(TargetError, match=r"target_layer_ids \[5\] are outside"):
        check_drafter_fits(target, _drafter(tmp_path, num_target_layers=None,
                                            dflash_config={"mask_token_id": 407, "target_layer_ids": [1, 5]}))
    assert any("6-layer target" in w for w in check_drafter_fits(target, _drafter(tmp_path, num_target_layers=6)))
    big = _drafter(tmp_path, vocab_size=1024, dflash_config={"mask_token_id": 700, "target_layer_ids": [1, 2]})
    with pytest.raises(TargetError, match="mask_token_id 700 is outside") as e:
        check_drafter_fits(target, big)
    assert "\n" not in str(e.value)  # several problems, still one line


# --- golden: llama.cpp's converter -----------------------------------------------------------

_CONVERT_DRIVER = r'''
"""Run llama.cpp's convert_hf_to_gguf.py once per job in one process (torch imports once).
A BPE pre-tokenizer hash llama.cpp does not know gets the job's "pre" instead of an error;
the ids transformers gives for the check text are saved to the job's "ids" file."""
import json, os, runpy, sys
src = os.environ["DFLASH_LLAMA_CPP_SRC"]
sys.path.insert(0, os.path.join(src, "gguf-py"))
sys.path.insert(0, src)
import conversion.base as base
orig = base.TextModel.get_vocab_base_pre
job = {}
def patched(self, tokenizer):
    chktxt = json.load(open(os.environ["DFLASH_TEST_CHKTXT"], encoding="utf-8"))
    with open(job["ids"], "w") as f:
        json.dump(list(tokenizer.encode(chktxt)), f)
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        if not job.get("pre"):
            raise
        return job["pre"]
base.TextModel.get_vocab_base_pre = patched
for j in json.load(open(sys.argv[1])):
    job.clear(); job.update(j)
    sys.argv = [os.path.join(src, "convert_hf_to_gguf.py")] + j["argv"]
    runpy.run_path(sys.argv[0], run_name="__main__")
'''


def _llama_cpp_src() -> Path | None:
    def ok(c: Path) -> bool:
        return (c / "convert_hf_to_gguf.py").is_file() and (c / "gguf-py" / "gguf").is_dir()

    env = os.environ.get("DFLASH_LLAMA_CPP_SRC")
    if env:
        # Set but wrong is a CI misconfiguration: fail rather than silently skip the golden tests.
        if not ok(Path(env)):
            pytest.fail(f"DFLASH_LLAMA_CPP_SRC={env} has no convert_hf_to_gguf.py and gguf-py/ (want vendor/llama.cpp)")
        return Path(env)
    local = Path("/tmp/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp")  # a developer's unpacked sdist
    return local if ok(local) else None


def _spm_json_variant(d: Path) -> None:
    """Llama-2-like extras llama.cpp reads next to tokenizer.model: a tokenizer.json with
    added_tokens and a TemplateProcessing post-processor (add_bos/add_sep come from it),
    add_prefix_space in tokenizer_config.json, an added_tokens.json entry."""
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in ((0, "<unk>"), (1, "<s>"), (2, "</s>"))]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    write_json(d / "tokenizer.json", {
        "version": "1.0", "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                          {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "model": {"type": "BPE", "byte_fallback": True, "vocab": {}, "merges": []},
    })
    tc = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    tc["add_prefix_space"] = True
    # A user-defined token spelled with U+2581: llama.cpp stores it with a plain space.
    tc["added_tokens_decoder"]["387"] = {"content": "<user\u2581tok>", "lstrip": False, "normalized": False,
                                         "rstrip": False, "single_word": False, "special": False}
    write_json(d / "tokenizer_config.json", tc)
    write_json(d / "added_tokens.json", {"<extra_\u2581tok>": 386})


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """{case: (our KVs, llama.cpp's tokenizer KVs, ids transformers gave for CHKTXT or None, target dir)}."""
    src = _llama_cpp_src()
    if src is None:
        pytest.skip("llama.cpp source not found: set DFLASH_LLAMA_CPP_SRC to vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    pytest.importorskip("sentencepiece")
    tmp = tmp_path_factory.mktemp("golden")
    mask = 407
    cases = {
        "spm": (make_target(tmp / "spm", LLAMA_TOK, llama_config()), None),
        "spm-json": (make_target(tmp / "spm-json", LLAMA_TOK, llama_config(pad_token_id=0)), None),
        "bpe-qwen3": (make_target(tmp / "bpe-qwen3", QWEN_TOK, qwen_config()), "qwen2"),
        "bpe-llama3": (make_target(tmp / "bpe-llama3", QWEN_TOK, llama_config(bos_token_id=400, eos_token_id=402)), "llama-bpe"),
    }
    _spm_json_variant(cases["spm-json"][0])
    _to_llama3_style(cases["bpe-llama3"][0])
    drafter = tmp / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps(drafter_raw(mask)))
    jobs = []
    for name, (tdir, pre) in cases.items():
        jobs.append({"argv": [str(drafter), "--target-model-dir", str(tdir), "--outfile", str(tmp / f"{name}.gguf"),
                              "--outtype", "f32", "--vocab-only"],
                     "pre": pre, "ids": str(tmp / f"{name}.ids.json")})
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    (tmp / "driver.py").write_text(_CONVERT_DRIVER)
    (tmp / "chktxt.json").write_text(json.dumps(CHKTXT), encoding="utf-8")
    env = {**os.environ, "DFLASH_LLAMA_CPP_SRC": str(src), "DFLASH_TEST_CHKTXT": str(tmp / "chktxt.json")}
    proc = subprocess.run([sys.executable, str(tmp / "driver.py"), str(tmp / "jobs.json")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = {}
    for name, (tdir, _) in cases.items():
        ours = drafter_tokenizer_kvs(target_from_hf_dir(tdir), mask)
        ids_path = tmp / f"{name}.ids.json"
        ids = json.loads(ids_path.read_text()) if ids_path.is_file() else None
        out[name] = (ours, read_tokenizer_kvs(tmp / f"{name}.gguf"), ids, tdir)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", ["spm", "spm-json", "bpe-qwen3", "bpe-llama3"])
def test_golden_against_llama_cpp_converter(golden, case):
    ours, theirs, _, _ = golden[case]
    ours = as_file_values(ours)
    assert [k[0] for k in ours] == [k[0] for k in theirs]  # same keys, same order
    for a, b in zip(ours, theirs):
        assert a[:3] == b[:3], f"{a[0]}: type {a[1:3]} vs llama.cpp {b[1:3]}"
        assert a[3] == b[3], f"{a[0]}: value differs from llama.cpp's"


@pytest.mark.slow
def test_golden_cases_cover_what_they_claim(golden):
    # Guard the golden inputs: each variant exercises the branch it is there for.
    keys = {name: [k[0] for k in g[1]] for name, g in golden.items()}
    assert keys["spm-json"][0] == "tokenizer.ggml.add_space_prefix"
    assert "tokenizer.ggml.unknown_token_id" in keys["spm-json"] and "tokenizer.ggml.add_sep_token" in keys["spm-json"]
    assert "tokenizer.ggml.unknown_token_id" not in keys["spm"]
    spm_json = dict((k[0], k[3]) for k in golden["spm-json"][1])
    assert spm_json["tokenizer.ggml.tokens"][386:388] == ["<extra_\u2581tok>".encode(), b"<user tok>"]
    assert "tokenizer.ggml.merges" in keys["bpe-qwen3"] and "tokenizer.ggml.scores" not in keys["bpe-qwen3"]
    theirs = dict((k[0], k[3]) for k in golden["bpe-llama3"][1])
    assert theirs["tokenizer.ggml.pre"] == b"llama-bpe" and theirs["tokenizer.ggml.add_bos_token"] is True
    assert all(dict((k[0], k[3]) for k in g[1])["tokenizer.ggml.mask_token_id"] == 407 for g in golden.values())


@pytest.mark.slow
def test_chkhsh_inputs_match_llama_cpp(golden):
    # Our check text is llama.cpp's, and the tokenizers package gives the ids transformers
    # gives llama.cpp — so a real target's hash matches llama.cpp's table the same way.
    from tokenizers import Tokenizer

    src = _llama_cpp_src()
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


# --- real vocabularies: llama.cpp's own ggml-vocab-*.gguf test files --------------------------

def _vocab_file(name: str) -> Path:
    src = _llama_cpp_src()
    path = None if src is None else src / "models" / f"ggml-vocab-{name}.gguf"
    if path is None or not path.is_file():
        pytest.skip("llama.cpp's models/ggml-vocab-*.gguf not found (set DFLASH_LLAMA_CPP_SRC)")
    return path


def header_tokenizer_fields(path: Path) -> list[tuple]:
    """tokenizer.* fields via the bounds-checked header reader (string arrays compare by raw
    bytes); GGUFReader takes ~10 s on a 150k-token vocabulary."""
    from dflash_gguf.fileio.gguf_header import read_header

    h = read_header(path)
    return [(k, h.kv[k].type, h.kv[k].sub_type, h.kv[k].value) for k in h.kv_order if k.startswith("tokenizer.")]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2", "llama-bpe", "llama-spm"])
def test_real_vocab_gguf_copied_exactly(tmp_path, name):
    src = _vocab_file(name)
    info = target_from_gguf(src)
    assert info.n_vocab_tokens == info.vocab_size and info.hidden_size == 4096 and info.num_hidden_layers == 32
    out = tmp_path / "drafter.gguf"
    write_gguf(out, "dflash", info.kvs, tiny_tensor())
    assert header_tokenizer_fields(out) == header_tokenizer_fields(src)
    if name == "llama-spm":  # small enough for gguf-py's reader as an independent check
        assert read_tokenizer_kvs(out) == read_tokenizer_kvs(src)


def _hf_dir_from_vocab_gguf(src: Path, dst: Path, family: str, config: dict, tc: dict) -> dict:
    """A Hugging Face tokenizer dir rebuilt from a llama.cpp vocab GGUF: NORMAL tokens form the
    BPE vocab, CONTROL tokens become special added tokens, merges copied, the family's
    pre-tokenizer; a TemplateProcessing bos when ``tc`` names a bos_token."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    from dflash_gguf.fileio.gguf_header import read_header
    from dflash_gguf.target.tokenizer import _FAMILIES

    h = read_header(src)
    toks, types = list(h.get("tokenizer.ggml.tokens")), list(h.get("tokenizer.ggml.token_type"))
    fam = next(f for f in _FAMILIES if f.name == family)
    tok = Tokenizer(models.BPE(vocab={t: i for i, (t, ty) in enumerate(zip(toks, types)) if ty == NORMAL},
                               merges=[tuple(m.split(" ")) for m in h.get("tokenizer.ggml.merges")],
                               ignore_merges=fam.ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(fam.split_regex), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(toks, types) if ty == CONTROL])
    if tc.get("bos_token"):
        b = tc["bos_token"]
        tok.post_processor = processors.TemplateProcessing(single=f"{b} $A", pair=f"{b} $A {b} $B:1",
                                                           special_tokens=[(b, toks.index(b))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    dst.mkdir()
    tok.save(str(dst / "tokenizer.json"))
    write_json(dst / "tokenizer_config.json", tc)
    write_json(dst / "config.json", config)
    return {k: h.get(k) for k in h.kv_order}


@pytest.mark.slow
@pytest.mark.parametrize("name, family, arch, tc", [
    ("qwen2", "qwen2", "Qwen2ForCausalLM",
     {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "clean_up_tokenization_spaces": False}),
    ("llama-bpe", "llama-bpe", "LlamaForCausalLM",
     {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": True}),
])
@needs_libs
def test_real_vocab_hash_and_vocab_match_llama_cpp(tmp_path, name, family, arch, tc):
    # A real vocabulary (rebuilt as a HF dir from llama.cpp's vocab file) must hit llama.cpp's
    # chkhsh table under its real name, and give llama.cpp's tokens, types and merges.
    src = _vocab_file(name)
    hf = _hf_dir_from_vocab_gguf(src, tmp_path / name, family,
                                 {"architectures": [arch], "hidden_size": 4096, "num_hidden_layers": 32,
                                  "vocab_size": len(read_header_tokens(src))}, tc)
    info = target_from_hf_dir(tmp_path / name)
    assert (info.tokenizer_pre, info.pre_source) == (name, "chkhsh")
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                "tokenizer.ggml.eos_token_id"):
        theirs = hf[key] if isinstance(hf[key], (str, int)) else list(hf[key])
        if key == "tokenizer.ggml.token_type":
            # These vocab files predate llama.cpp typing [PAD{i}] fillers UNUSED (it used USER_DEFINED).
            toks = hf["tokenizer.ggml.tokens"]
            theirs = [UNUSED if t == USER_DEFINED and toks[i].startswith("[PAD") else t for i, t in enumerate(theirs)]
        assert info.get(key) == theirs, key


def read_header_tokens(path: Path):
    from dflash_gguf.fileio.gguf_header import read_header

    return read_header(path).get("tokenizer.ggml.tokens")
