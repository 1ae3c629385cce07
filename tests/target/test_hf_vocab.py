"""The target's vocabulary rebuilt from a Hugging Face dir: BPE (Qwen3-style) and
SentencePiece (Llama-style) fixtures, refusals, and golden comparisons with llama.cpp's
converter and its real vocabulary files (see tests/target/conftest.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dflash_gguf.errors import TargetError
from dflash_gguf.target.info import target_from_hf_dir
from dflash_gguf.target.keys import CONTROL, NORMAL, UNUSED, USER_DEFINED
from dflash_gguf.target.pretokenizer import _FAMILIES
from tests.conftest import FIXTURES
from tests.target.conftest import (
    LLAMA_TOK,
    QWEN_TOK,
    TOKENIZER_FILES,
    VOCAB,
    as_file_values,
    llama_config,
    llama_cpp_vocab_file,
    make_target,
    needs_libs,
    qwen_config,
    write_json,
)

sys.path.insert(0, str(FIXTURES))
import make_tokenizers  # noqa: E402


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
    d = make_target(tmp_path / "m", QWEN_TOK, qwen_config(architectures=["MambaForCausalLM"]))
    with pytest.raises(TargetError, match="MambaForCausalLM.*not implemented here.*--target-gguf"):
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


# --- golden: llama.cpp's converter -----------------------------------------------------------

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


# --- real vocabularies: llama.cpp's own ggml-vocab-*.gguf test files --------------------------

def _hf_dir_from_vocab_gguf(src: Path, dst: Path, family: str, config: dict, tc: dict) -> dict:
    """A Hugging Face tokenizer dir rebuilt from a llama.cpp vocab GGUF: NORMAL tokens form the
    BPE vocab, CONTROL tokens become special added tokens, merges copied, the family's
    pre-tokenizer; a TemplateProcessing bos when ``tc`` names a bos_token."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    from dflash_gguf.fileio.gguf_header import read_header

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
    src = llama_cpp_vocab_file(name)
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


@needs_libs
def test_full_vocab_is_the_libraries_get_vocab(tmp_path):
    """The vocabulary built from tokenizer.json's model.vocab plus the added tokens equals what
    the tokenizers library returns (what transformers hands llama.cpp), ids of added tokens
    included; a non-BPE model asks the library."""
    from tokenizers import Tokenizer

    from dflash_gguf.target.hf_vocab import _full_vocab

    path = QWEN_TOK / "tokenizer.json"
    tok, tj = Tokenizer.from_file(str(path)), json.loads(path.read_text(encoding="utf-8"))
    want = tok.get_vocab(with_added_tokens=True)
    assert _full_vocab(tok, tj, tok.get_added_tokens_decoder()) == want
    assert len(want) > len(tj["model"]["vocab"])  # added tokens are in it
    wordlevel = {"model": {"type": "WordLevel", "vocab": {"x": 0}}}
    assert _full_vocab(tok, wordlevel, tok.get_added_tokens_decoder()) == want  # asked, not rebuilt
