"""The target's vocabulary rebuilt from its Hugging Face dir, as llama.cpp's converter does.

``convert_hf_to_gguf.py``'s DFlashModel.set_vocab delegates to the target architecture's
set_vocab: SentencePiece (``tokenizer.model``) or GPT-2-style byte-level BPE
(``tokenizer.json``), added/special tokens and their types, ``[PAD{i}]`` padding up to
``vocab_size``, merges, special ids, add_bos/add_eos, chat template — the facts of
``_create_vocab_sentencepiece``, ``get_vocab_base`` and gguf-py's ``SpecialVocab``
(llama-cpp-python 0.3.36's vendored copy), rewritten here. Whatever cannot be reproduced
faithfully raises TargetError recommending ``--target-gguf``: a guessed vocabulary would
load and then silently mis-tokenize.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from ..errors import TargetError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.types import KV, kv_array, kv_bool, kv_str
from .gemma4_vocab import GEMMA4_ARCHS, gemma4_vocab
from .hf_files import HINT, read_json, tokenizer_config
from .keys import (
    BYTE, CONTROL, K_ADD_PREFIX, K_MERGES, K_MODEL, K_PRE, K_SCORES, K_TOKEN_TYPE, K_TOKENS, NORMAL, UNKNOWN,
    UNUSED, USER_DEFINED,
)
from .pretokenizer import decide_pre
from .special_vocab import SPECIAL_TYPES, special_vocab_kvs

INSTALL = "pip install 'dflash-gguf[tokenizers]'"
#: ``[PAD{i}]`` tokens a rebuilt vocabulary may gain past the tokenizer's last id, or the tokenizer's
#: own size if larger (real targets pad a few hundred rows: Qwen3 151,936 for 151,669 tokens).
#: config.json's vocab_size sizes the token list; checked against the tokenizer before it is built
#: (2**31 - 1 would otherwise be ~100 GB of "[PAD…]" strings).
MAX_PADDING = 1 << 16

# --- which vocab recipe llama.cpp's converter uses per target architecture ------------------
# (DFlashModel.set_vocab resolves the target's class from text_config.architectures or
# architectures and calls its set_vocab.) Anything not listed is refused.
_SPM_ELSE_BPE = frozenset({"Qwen2ForCausalLM", "Qwen2Model", "Qwen3ForCausalLM", "Qwen3Model"})
_BPE_ONLY = frozenset({
    "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "GptOssForCausalLM",
    "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM",  # MimoV2Model: TextModel.set_vocab -> _set_vocab_gpt2
    "DeepseekV4ForCausalLM",  # DeepseekV4Model: TextModel.set_vocab -> _set_vocab_gpt2
})
_LLAMA = frozenset({"LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "LlamaModel"})


class HFVocab(NamedTuple):
    """The ``tokenizer.*`` KVs llama.cpp's converter writes, in its order, and how ``pre`` was decided."""

    kvs: list[KV]
    model: str  # tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (BPE)
    pre: str  # tokenizer.ggml.pre ("" when none is written)
    pre_source: str  # "default" (SentencePiece) | "chkhsh" | "pre_tokenizer" | "none"
    notes: list[str]  # things the CLI should tell the user (never fatal)


def vocab_from_hf_dir(d: Path, vocab_size: int) -> tuple[str, HFVocab]:
    """The architecture llama.cpp dispatches on (from ``d/config.json``) and the vocabulary
    its converter builds for it, ``vocab_size`` tokens long.

    Raises:
        TargetError: unsupported architecture, missing or unreadable tokenizer files, a
            tokenizer that cannot be reproduced faithfully, or the optional
            ``tokenizers``/``sentencepiece`` packages are missing.
    """
    arch = _dispatch_arch(read_json(d / "config.json"))
    if arch in _LLAMA:
        return arch, _llama_vocab(d, vocab_size)
    if arch in _SPM_ELSE_BPE and (d / "tokenizer.model").is_file():
        return arch, _spm_vocab(d, vocab_size)
    if arch in _SPM_ELSE_BPE or arch in _BPE_ONLY:
        return arch, _bpe_vocab(d, vocab_size)
    if arch in GEMMA4_ARCHS:
        kvs, notes = gemma4_vocab(d)
        return arch, HFVocab(kvs, "gemma4", "", "none", notes)  # Gemma4Model writes no tokenizer.ggml.pre
    raise TargetError(
        f"{d}: target architecture {arch or '(none)'}: rebuilding its tokenizer the way llama.cpp does is not "
        f"implemented here (supported: Llama, Qwen2/3, Qwen3-MoE/Next, Qwen3.5, gpt-oss, MiMo-V2, DeepSeek-V4, Gemma 4); {HINT}"
    )


def _dispatch_arch(top: dict) -> str:
    """The architecture llama.cpp's ``get_model_architecture(..., TEXT)`` picks."""
    arch = None
    archs = top.get("architectures")
    if isinstance(archs, list) and archs:
        arch = archs[0]
    text = top.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("architectures"), list) and text["architectures"]:
        arch = text["architectures"][0]
    return str(arch or "")


def _looks_special(text: str) -> bool:
    """llama.cpp's ``does_token_look_special``: added tokens some models forget to mark."""
    return (
        text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (text.startswith("<|") and text.endswith("|>"))
        or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
        or (text.startswith("<unused") and text.endswith(">"))
    )


def _added_entry(d: Path, sid: Any, data: Any, *, strict: bool = False) -> tuple[int, Any]:
    """(id, content) of a tokenizer_config.json ``added_tokens_decoder`` entry; ``strict``
    also wants a string content and a non-negative id (the BPE path leaves those to its
    comparison with tokenizer.json)."""
    try:
        tid, text = int(sid), data["content"]
    except (ValueError, TypeError, KeyError):
        tid = text = None
    if tid is None or (strict and (not isinstance(text, str) or tid < 0)):
        raise TargetError(f"{d}/tokenizer_config.json: added_tokens_decoder entry {sid!r} is malformed; {HINT}")
    return tid, text


def _import_tokenizers(d: Path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TargetError(f"{d}/tokenizer.json: reading it needs the 'tokenizers' package: {INSTALL}, or {HINT}") from None
    return Tokenizer


# --- Llama: LlamaModel.set_vocab ------------------------------------------------------------

def _llama_vocab(d: Path, vocab_size: int) -> HFVocab:
    if (d / "tekken.json").is_file() and not (d / "tokenizer.json").is_file():
        raise TargetError(
            f"{d}: Mistral tekken tokenizer (tekken.json) is converted by llama.cpp's mistral path, not reproduced here; {HINT}"
        )
    tc = tokenizer_config(d)
    if tc and tc.get("tokenizer_class") == "HybridDNATokenizer":
        raise TargetError(f"{d}: HybridDNATokenizer is not reproduced here; {HINT}")
    if vocab_size in (32016, 49152):
        # llama.cpp adds CodeLlama FIM ids (32016) or forces add_bos off (49152) by vocab size.
        raise TargetError(
            f"{d}: vocab_size {vocab_size} takes a llama.cpp special case (CodeLlama/Granite) not reproduced here; {HINT}"
        )
    head: list[KV] = []
    if tc and isinstance(tc.get("add_prefix_space"), bool):
        head.append(kv_bool(K_ADD_PREFIX, tc["add_prefix_space"]))
    elif tc and tc.get("add_prefix_space") is not None:
        raise TargetError(f"{d}/tokenizer_config.json: add_prefix_space={tc['add_prefix_space']!r} is not true/false; {HINT}")
    if (d / "tokenizer.model").is_file():
        vocab = _spm_vocab(d, vocab_size)
    else:
        tj_path, tj = d / "tokenizer.json", None
        if tj_path.is_file():
            tj = read_json(tj_path)
            m = tj.get("model") if isinstance(tj, dict) else None
            if not isinstance(m, dict):
                raise TargetError(f"{tj_path}: has no model section; re-download it, or {HINT}")
            is_llama3 = m.get("type") == "BPE" and m.get("ignore_merges", False) and not m.get("byte_fallback", True)
            dec = tj.get("decoder") or {}
            spm_like = m.get("type") == "BPE" and m.get("byte_fallback", False) and dec.get("type") == "Sequence"
            if not is_llama3 and spm_like:
                raise TargetError(
                    f"{d}: SentencePiece-style tokenizer.json without tokenizer.model (llama.cpp's LlamaHfVocab path) "
                    f"is not reproduced here; add the target's tokenizer.model, or {HINT}"
                )
        vocab = _bpe_vocab(d, vocab_size, tj)  # parsed once: a Llama 3 tokenizer.json is ~9 MB
    return vocab._replace(kvs=head + vocab.kvs)


# --- SentencePiece: _set_vocab_sentencepiece -------------------------------------------------

def _spm_vocab(d: Path, vocab_size: int) -> HFVocab:
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError:
        raise TargetError(f"{d}/tokenizer.model: reading it needs the 'sentencepiece' package: {INSTALL}, or {HINT}") from None
    path = d / "tokenizer.model"
    sp = SentencePieceProcessor()
    try:
        sp.LoadFromFile(str(path))
    except (OSError, RuntimeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TargetError(f"{path}: sentencepiece cannot load it ({why}); re-download it, or {HINT}") from None
    n_sp = sp.vocab_size()
    if n_sp > vocab_size:
        # llama.cpp truncates with a warning; a vocab cut short is not one to embed.
        raise TargetError(f"{path}: {n_sp} pieces but config.json vocab_size is {vocab_size}; fix the config, or {HINT}")
    check_padding(path, n_sp, vocab_size)
    notes: list[str] = []
    tokens: list[str] = [f"[PAD{i}]" for i in range(vocab_size)]
    scores: list[float] = [-10000.0] * vocab_size
    types: list[int] = [UNUSED] * vocab_size
    for i in range(n_sp):
        if sp.IsUnknown(i):
            t = UNKNOWN
        elif sp.IsControl(i):
            t = CONTROL
        elif sp.IsUnused(i):
            t = UNUSED
        elif sp.IsByte(i):
            t = BYTE
        else:
            t = NORMAL
        tokens[i], scores[i], types[i] = sp.IdToPiece(i), float(sp.GetScore(i)), t

    added_path = d / "added_tokens.json"
    if added_path.is_file():
        added = read_json(added_path)
        if not isinstance(added, dict):
            raise TargetError(f"{added_path}: not a {{token: id}} object; {HINT}")
        for text, tid in added.items():
            if not isinstance(tid, int) or tid < 0:
                raise TargetError(f"{added_path}: id {tid!r} of {text!r} is not a token id; {HINT}")
            if tid >= vocab_size:
                notes.append(f"added token {text!r} id {tid} is past vocab_size {vocab_size}; skipped (as llama.cpp does)")
                continue
            tokens[tid], scores[tid], types[tid] = text, -1000.0, USER_DEFINED

    tc = tokenizer_config(d)
    if tc is not None:
        decoder = tc.get("added_tokens_decoder", {})
        if not isinstance(decoder, dict):
            raise TargetError(f"{d}/tokenizer_config.json: added_tokens_decoder is not an object; {HINT}")
        for sid, data in decoder.items():
            tid, text = _added_entry(d, sid, data, strict=True)
            if tid >= vocab_size:
                notes.append(f"added token {text!r} id {tid} is past vocab_size {vocab_size}; skipped (as llama.cpp does)")
                continue
            if data.get("special") or _looks_special(text):
                types[tid] = CONTROL
            else:
                text = text.replace("\u2581", " ")  # llama.cpp pre-normalizes user-defined spaces
                types[tid] = USER_DEFINED
            tokens[tid], scores[tid] = text, -1000.0

    kvs = [
        kv_str(K_MODEL, "llama"),
        kv_str(K_PRE, "default"),
        kv_array(K_TOKENS, tokens, T.STRING),
        kv_array(K_SCORES, scores, T.FLOAT32),
        kv_array(K_TOKEN_TYPE, types, T.INT32),
    ]
    kvs += special_vocab_kvs(d, load_merges=False, n_vocab=len(tokens), notes=notes)
    return HFVocab(kvs, "llama", "default", "default", notes)


# --- GPT-2-style BPE: _set_vocab_gpt2 / get_vocab_base ---------------------------------------

def _bpe_vocab(d: Path, vocab_size: int, tj: Any = None) -> HFVocab:
    """``tj``: tokenizer.json when the caller has parsed it already."""
    tj_path = d / "tokenizer.json"
    if not tj_path.is_file():
        have = [n for n in ("vocab.json", "merges.txt", "tokenizer.model", "tiktoken.model") if (d / n).is_file()]
        extra = f" (found only {', '.join(have)})" if have else ""
        raise TargetError(
            f"{d}: no tokenizer.json{extra}; the target's tokenizer files are needed to build its vocab — "
            f"download them with the model, or {HINT}"
        )
    Tokenizer = _import_tokenizers(d)
    if tj is None:
        tj = read_json(tj_path)
    try:
        tok = Tokenizer.from_file(str(tj_path))
    except Exception as exc:  # tokenizers raises bare Exception subclasses for bad files
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TargetError(f"{tj_path}: the tokenizers package cannot load it ({why}); {HINT}") from None
    # transformers encodes without the file's truncation/padding settings; so must the hash.
    tok.no_truncation()
    tok.no_padding()
    tc = tokenizer_config(d)
    notes: list[str] = []

    decoder = tok.get_added_tokens_decoder()  # id -> AddedToken
    vocab = _full_vocab(tok, tj, decoder)
    if not vocab:
        raise TargetError(f"{tj_path}: empty vocabulary; {HINT}")
    if max(vocab.values()) >= vocab_size:
        raise TargetError(
            f"{tj_path}: token id {max(vocab.values())} is past config.json vocab_size {vocab_size}; fix the config, or {HINT}"
        )
    check_padding(tj_path, max(vocab.values()) + 1, vocab_size)
    _check_added_tokens_agree(d, tc, decoder, vocab)
    added_by_text = {at.content: i for i, at in decoder.items()}
    reverse = {i: t for t, i in vocab.items()}
    if len(reverse) != len(vocab):
        raise TargetError(f"{tj_path}: two tokens share an id; {HINT}")

    pre, pre_src, pre_note = decide_pre(tok, tj, tc, tj_path)
    if pre_note:
        notes.append(pre_note)

    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        text = reverse.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        if text in added_by_text:
            at = decoder.get(i)
            if at is None:
                raise TargetError(f"{tj_path}: {text!r} is both vocab id {i} and added token id {added_by_text[text]}; {HINT}")
            if not at.normalized:
                # llama.cpp stores non-normalized added tokens as the tokenizer round-trips
                # them (transformers decode(encode(t))); a change there involves transformers'
                # own clean-up rules, so refuse rather than guess.
                back = tok.decode(tok.encode(text, add_special_tokens=False).ids, skip_special_tokens=False)
                if back != text:
                    raise TargetError(
                        f"{tj_path}: added token {text!r} (id {i}) round-trips to {back!r}; how llama.cpp "
                        f"stores it depends on transformers, so {HINT}"
                    )
            if at.special or _looks_special(text):
                types.append(CONTROL)
            else:
                text = text.replace("\u2581", " ")
                types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(text)

    kvs = [
        kv_str(K_MODEL, "gpt2"),
        kv_str(K_PRE, pre),
        kv_array(K_TOKENS, tokens, T.STRING),
        kv_array(K_TOKEN_TYPE, types, T.INT32),
    ]
    kvs += special_vocab_kvs(d, load_merges=True, n_vocab=None, notes=notes, tj=tj)
    if not any(kv.key == K_MERGES for kv in kvs):
        raise TargetError(f"{d}: BPE tokenizer without merges (tokenizer.json model.merges / merges.txt); {HINT}")
    return HFVocab(kvs, "gpt2", pre, pre_src, notes)


def check_padding(where: Path, n_tokens: int, vocab_size: int) -> None:
    """Refuse a config.json vocab_size so far past the tokenizer's ``n_tokens`` ids that padding
    it would be a memory bomb rather than a model (before any token list is built).

    Raises:
        TargetError: more than ``max(MAX_PADDING, n_tokens)`` padding tokens."""
    if vocab_size - n_tokens > max(MAX_PADDING, n_tokens):
        raise TargetError(
            f"{where}: the tokenizer has {n_tokens:,} tokens but config.json vocab_size is {vocab_size:,}; "
            f"no target pads its vocabulary by {vocab_size - n_tokens:,} tokens: fix vocab_size, or {HINT}")


def _full_vocab(tok, tj: Any, decoder: dict) -> dict[str, int]:
    """``tok.get_vocab(with_added_tokens=True)`` (what transformers hands llama.cpp), without the
    ~0.3 s it takes to rebuild a 150k-entry dict in Rust: a BPE model's vocabulary is
    ``tokenizer.json``'s ``model.vocab`` as parsed (the tokenizers library keeps that map), and
    the added tokens are laid over it with the ids the library gave them (``decoder``), as its
    ``get_vocab`` does. Any other model kind asks the library."""
    model = tj.get("model") if isinstance(tj, dict) else None
    base = model.get("vocab") if isinstance(model, dict) and model.get("type") == "BPE" else None
    if not isinstance(base, dict) or not all(type(i) is int for i in base.values()):
        return tok.get_vocab(with_added_tokens=True)
    vocab = dict(base)
    for i, at in decoder.items():
        vocab[at.content] = i
    return vocab


def _check_added_tokens_agree(d: Path, tc: dict | None, decoder: dict, vocab: dict) -> None:
    """transformers merges tokenizer_config.json's added/special tokens into the vocab it
    hands llama.cpp; we read tokenizer.json alone, so refuse when the two files disagree."""
    if not tc:
        return
    tc_added = tc.get("added_tokens_decoder") or {}
    if isinstance(tc_added, dict):
        for sid, data in tc_added.items():
            tid, text = _added_entry(d, sid, data)
            at = decoder.get(tid)
            if at is None or at.content != text or bool(data.get("special", False)) != bool(at.special):
                raise TargetError(
                    f"{d}: tokenizer_config.json's added token {tid} {text!r} disagrees with tokenizer.json's "
                    f"added_tokens; the vocab transformers builds from them is ambiguous, so {HINT}"
                )
    names: list[Any] = [tc.get(f"{t}_token") for t in SPECIAL_TYPES]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = tc.get(key)
        names += list(extra.values()) if isinstance(extra, dict) else list(extra or [])
    for name in names:
        text = name.get("content") if isinstance(name, dict) else name
        if isinstance(text, str) and text not in vocab:
            # transformers would append it as a new token; llama.cpp's vocab would then differ.
            raise TargetError(
                f"{d}: tokenizer_config.json names special token {text!r}, which tokenizer.json does not "
                f"have; transformers would add it to the vocab, so {HINT}"
            )
