"""Real target tokenizers at real size (tests/target/real_vocab*.py, real_targets.py).

Ground truth is llama.cpp's own converter (the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp):
it must accept each rebuilt target dir and write the tokenizer KVs of the vocabulary it was
rebuilt from; then ``dflash-gguf convert --target-dir`` / ``--target-gguf`` must write what its
DFlash conversion writes for the same drafter and target. Slow (150k-262k tokens; the converter
runs are cached on disk, see real_vocab); skipped without DFLASH_LLAMA_CPP_SRC or transformers.
"""
from __future__ import annotations

import hashlib

import pytest

from dflash_gguf.target.chkhsh import CHKHSH, CHKTXT
from dflash_gguf.target.keys import CONTROL, USER_DEFINED
from tests.target.real_targets import TARGETS, real_drafter
from tests.target.real_vocab import (
    VOCABS,
    diff_kvs,
    drafter_job,
    real_target_dir,
    target_job,
    tokenizer_kvs,
    vendored_convert,
    vocab_source,
)
from tests.target.real_vocab_files import (
    QWEN35_FIRST_ADDED,
    _special_split,
    byte_encoder,
    merges_from_ranks,
    read_tiktoken,
    read_vocab_gguf,
)

slow = pytest.mark.slow

# What today's converter adds to a vocab GGUF written before it parsed tokenizer.json's
# post-processor: Meta's Llama 3 file prepends the bos with a TemplateProcessing (which the
# pre-tokenizer hash is taken with), so add_bos/add_eos/add_sep are now written.
NEWER_KEYS = {
    "llama-bpe": ["tokenizer.ggml.add_bos_token: only in the first (True)",
                  "tokenizer.ggml.add_eos_token: only in the first (False)",
                  "tokenizer.ggml.add_sep_token: only in the first (False)"],
}


# --- the rebuild's pieces -------------------------------------------------------------------

def test_byte_encoder_is_gpt2s_table():
    enc = byte_encoder()
    assert len(set(enc.values())) == 256
    assert (enc[ord("a")], enc[ord(" ")], enc[ord("\n")], enc[0], enc[0xFF]) == ("a", "\u0120", "\u010a", "\u0100", "\u00ff")


def test_special_split_follows_special_vocab_order():
    # eos and pad in SpecialVocab's type order came from tokenizer_config.json; a bos written
    # after them can only have come from config.json.
    kv = {"_order": ["tokenizer.ggml.tokens", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                     "tokenizer.ggml.bos_token_id"],
          "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.padding_token_id": 0, "tokenizer.ggml.bos_token_id": 1}
    assert _special_split(kv, ["<pad>", "<s>", "</s>"]) == ({"eos": "</s>", "pad": "<pad>"}, {"bos": 1})


def test_merges_from_ranks_on_a_toy_vocabulary():
    # "ab" then "abc" merge in rank order; "xyz" has no path from its bytes (an orphan).
    toks = [b"a", b"b", b"c", b"x", b"y", b"z", b"ab", b"abc", b"xyz"]
    assert merges_from_ranks(toks) == ([(b"a", b"b"), (b"ab", b"c")], [8])


def test_diff_kvs_names_key_index_and_order():
    from gguf import GGUFValueType as T

    a = [("tokenizer.ggml.model", T.STRING, None, b"gpt2"), ("tokenizer.ggml.tokens", T.ARRAY, T.STRING, [b"a", b"b"]),
         ("tokenizer.ggml.bos_token_id", T.UINT32, None, 1)]
    assert diff_kvs(a, list(a)) == []
    b = [a[0], ("tokenizer.ggml.tokens", T.ARRAY, T.STRING, [b"a", b"c"]), ("tokenizer.ggml.eos_token_id", T.UINT32, None, 2)]
    assert diff_kvs(a, b) == ["tokenizer.ggml.bos_token_id: only in the first (1)",
                              "tokenizer.ggml.eos_token_id: only in the second (2)",
                              "tokenizer.ggml.tokens: 1 entries differ, first [1] b'b' != b'c'"]
    assert diff_kvs(a, [a[2], a[0], a[1]]) == [f"key order differs: {[k[0] for k in a]} != {[a[2][0], a[0][0], a[1][0]]}"]
    assert diff_kvs(a, [a[2], a[0], a[1]], order=False) == []


@slow
def test_qwen_ranks_rebuild_the_published_qwen2_merges():
    # The merge rule used for Qwen3.5 reproduces Qwen2's merges from its tiktoken ranks exactly
    # (151,387, same order) and its tokens, as llama.cpp's Qwen2 vocab file stores them.
    ranks_file = vocab_source("qwen35").with_name("qwen.tiktoken")
    ranks = read_tiktoken(ranks_file)
    merges, orphans = merges_from_ranks(ranks)
    enc = byte_encoder()

    def spell(b):
        return "".join(enc[x] for x in b)

    kv = read_vocab_gguf(vocab_source("qwen2"))
    assert orphans == []
    assert [f"{spell(a)} {spell(b)}" for a, b in merges] == kv["tokenizer.ggml.merges"]
    assert [spell(t) for t in ranks] == kv["tokenizer.ggml.tokens"][:len(ranks)]


# --- llama.cpp's converter on the rebuilt targets -------------------------------------------

@pytest.fixture(scope="session")
def real_runs(tmp_path_factory):
    """{target: (target dir, drafter dir, target GGUF, llama.cpp's drafter GGUF)}, or the reason
    a target's vocabulary is missing here; every converter run in one batch (cached on disk)."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    pytest.importorskip("torch")  # convert_hf_to_gguf.py imports it
    tmp = tmp_path_factory.mktemp("real")
    runs, jobs = {}, []
    for name, t in TARGETS.items():
        try:
            tdir = real_target_dir(t.vocab, t.config, tmp / name)
        except pytest.skip.Exception as exc:  # e.g. no Qwen3.5 vocabulary: the others still run
            runs[name] = str(exc)
            continue
        ddir = real_drafter(t.config, t.mask_token_id, tmp / f"{name}-drafter")
        runs[name] = (tdir, ddir, tmp / f"{name}.gguf", tmp / f"{name}-llama.cpp.gguf")
        jobs += [target_job(tdir, runs[name][2]), drafter_job(ddir, tdir, runs[name][3])]
    vendored_convert(jobs)
    return runs


def _run(real_runs, name):
    if isinstance(real_runs[name], str):
        pytest.skip(real_runs[name])
    return real_runs[name]


def _chkhsh(target_dir) -> str:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(target_dir / "tokenizer.json")).encode(CHKTXT).ids
    return hashlib.sha256(str(ids).encode()).hexdigest()


@slow
@pytest.mark.parametrize("name", [n for n, t in TARGETS.items() if t.vocab != "qwen35"])
def test_llama_cpp_writes_the_vocab_files_kvs(real_runs, name):
    vocab = TARGETS[name].vocab
    tdir, _, gguf, _ = _run(real_runs, name)
    assert diff_kvs(tokenizer_kvs(gguf), tokenizer_kvs(vocab_source(vocab))) == NEWER_KEYS.get(vocab, [])
    if VOCABS[vocab].profile != "gemma4":
        # The pre-tokenizer hash is llama.cpp's own entry for the family, not a fallback.
        assert CHKHSH.get(_chkhsh(tdir)) == vocab


@slow
def test_llama_cpp_reads_the_qwen35_vocabulary(real_runs):
    tdir, _, gguf, _ = _run(real_runs, "Qwen3.5-27B")
    # tokenizers gives llama.cpp's hash for Qwen/Qwen3.5-9B-Instruct: vocabulary, merges and
    # split regex agree with the published tokenizer on the whole check text.
    assert _chkhsh(tdir) == "d30d75d9059f1aa2c19359de71047b3ae408c70875e8a3ccf8c5fba56c9d8af4"
    kv = {k: v for k, _, _, v in tokenizer_kvs(gguf)}
    assert (kv["tokenizer.ggml.model"], kv["tokenizer.ggml.pre"]) == (b"gpt2", b"qwen35")
    tokens, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    assert len(tokens) == TARGETS["Qwen3.5-27B"].config["text_config"]["vocab_size"] == 248320
    enc = byte_encoder()
    ranks = read_tiktoken(vocab_source("qwen35"))
    assert tokens[:len(ranks)] == ["".join(enc[x] for x in t).encode() for t in ranks]
    assert tokens[QWEN35_FIRST_ADDED:QWEN35_FIRST_ADDED + 3] == [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"]
    assert (types[248046], types[248068], tokens[VOCABS["qwen35"].n_tokens]) == (CONTROL, USER_DEFINED, b"[PAD248077]")
    assert kv["tokenizer.ggml.eos_token_id"] == 248046 and kv["tokenizer.ggml.padding_token_id"] == 248044
    assert len(kv["tokenizer.ggml.merges"]) == 248044 - 256 - 201  # one per multi-byte token but the orphans
    assert kv["tokenizer.chat_template"].startswith(b"{%- set image_count = namespace(value=0) %}")


@slow
@pytest.mark.parametrize("name", list(TARGETS))
def test_target_gguf_gives_the_targets_sizes(real_runs, name):
    from dflash_gguf.target.info import target_from_gguf

    cfg = TARGETS[name].config
    text = {**cfg, **(cfg.get("text_config") or {})}
    info = target_from_gguf(_run(real_runs, name)[2])
    # vocab-only: no token_embd, so the vocab size is the padded token count.
    assert (info.hidden_size, info.num_hidden_layers, info.vocab_size) == (
        text["hidden_size"], text["num_hidden_layers"], text["vocab_size"])
    if name == "Qwen3.5-27B":
        assert info.notes and "MTP" in info.notes[0]


@slow
@pytest.mark.parametrize("flag", ["--target-dir", "--target-gguf"])
@pytest.mark.parametrize("name", list(TARGETS))
def test_ours_writes_llama_cpps_tokenizer_kvs(real_runs, cli, tmp_path, name, flag):
    tdir, ddir, gguf, golden = _run(real_runs, name)
    out = tmp_path / "drafter.gguf"
    code, _, err = cli("convert", ddir, flag, tdir if flag == "--target-dir" else gguf, "-o", out)
    assert code == 0, err
    got, want = tokenizer_kvs(out), tokenizer_kvs(golden)
    assert diff_kvs(got, want, order=False) == []  # same keys, types and values
    # and in the same order: the drafter's mask id overwrites the target's where it stands (Gemma 4)
    assert diff_kvs(got, want) == []


@slow
def test_real_target_dir_refuses_a_config_that_moves_a_special_id(tmp_path):
    # The Qwen2 vocab's bos is read from config.json: another id there would change the KVs.
    cfg = {**TARGETS["Qwen3-8B"].config, "bos_token_id": 151644}
    with pytest.raises(ValueError, match="bos id is 151643"):
        real_target_dir("qwen2", cfg, tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_targets_are_the_published_sizes():
    sizes = {n: (t.config.get("text_config") or t.config)["vocab_size"] for n, t in TARGETS.items()}
    assert sizes == {"Qwen3-8B": 151936, "Qwen3.5-27B": 248320, "gemma-4-31B-it": 262144,
                     "Llama-3.1-8B-Instruct": 128256}
    assert all(t.mask_token_id < sizes[n] for n, t in TARGETS.items())
    assert TARGETS["Qwen3.5-27B"].config["text_config"]["rope_parameters"]["mrope_section"] == [11, 11, 10]
