"""TargetInfo: the exact copy of a target GGUF's tokenizer, the drafter's mask id, and the
drafter-vs-target pairing checks."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType as T, GGUFWriter

from dflash_gguf.config import parse_config
from dflash_gguf.errors import GGUFFormatError, TargetError, UsageError
from dflash_gguf.fileio.gguf_writer import write_gguf
from dflash_gguf.fileio.types import KV
from dflash_gguf.target.info import (
    check_drafter_fits,
    drafter_tokenizer_kvs,
    load_target,
    target_from_gguf,
    target_from_hf_dir,
)
from tests.target.conftest import (
    QWEN_TOK,
    as_file_values,
    drafter_raw,
    llama_cpp_vocab_file,
    make_target,
    needs_libs,
    qwen_config,
    read_tokenizer_kvs,
    tiny_tensor,
)


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


# --- real vocabularies: llama.cpp's own ggml-vocab-*.gguf test files --------------------------

def header_tokenizer_fields(path: Path) -> list[tuple]:
    """tokenizer.* fields via the bounds-checked header reader (string arrays compare by raw
    bytes); GGUFReader takes ~10 s on a 150k-token vocabulary."""
    from dflash_gguf.fileio.gguf_header import read_header

    h = read_header(path)
    return [(k, h.kv[k].type, h.kv[k].sub_type, h.kv[k].value) for k in h.kv_order if k.startswith("tokenizer.")]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2", "llama-bpe", "llama-spm"])
def test_real_vocab_gguf_copied_exactly(tmp_path, name):
    src = llama_cpp_vocab_file(name)
    info = target_from_gguf(src)
    assert info.n_vocab_tokens == info.vocab_size and info.hidden_size == 4096 and info.num_hidden_layers == 32
    out = tmp_path / "drafter.gguf"
    write_gguf(out, "dflash", info.kvs, tiny_tensor())
    assert header_tokenizer_fields(out) == header_tokenizer_fields(src)
    if name == "llama-spm":  # small enough for gguf-py's reader as an independent check
        assert read_tokenizer_kvs(out) == read_tokenizer_kvs(src)


def test_from_gguf_keeps_string_arrays_as_their_stored_bytes(tmp_path):
    """A 150k-token vocabulary is not decoded into a list: the copy is a view of the bytes the
    header reader holds, which the writer copies as they are."""
    from dflash_gguf.fileio.gguf_header import read_header
    from dflash_gguf.fileio.string_array import StringArray

    src = tmp_path / "target.gguf"
    _write_target_gguf(src)
    info = target_from_gguf(src)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        value = info.get(key)
        assert isinstance(value, StringArray), key
        assert value.same_as(read_header(src).kv[key].value), key
