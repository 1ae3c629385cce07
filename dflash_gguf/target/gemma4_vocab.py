"""Gemma 4's vocabulary as llama.cpp's converter builds it (``Gemma4Model.set_vocab``).

Unlike the SentencePiece and BPE recipes in ``hf_vocab``, this one is not rewritten: it runs
gguf-py's own ``LlamaHfVocab`` (gguf is pinned to the release whose copy matches the vendored
converter's), which reads the tokenizer through transformers' ``AutoTokenizer``. Rewriting it
would mean re-deriving transformers' added-token and special-token bookkeeping by hand.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import TargetError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.types import KV, kv_array, kv_bool, kv_str
from .hf_files import HINT
from .keys import K_ADD_PREFIX, K_MODEL, K_SCORES, K_TOKEN_TYPE, K_TOKENS, USER_DEFINED
from .special_vocab import ADD_KEYS, special_vocab_kvs

GEMMA4_ARCHS = frozenset({"Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"})
# Rendered as text, so that a chat parser can read them: Gemma4Model marks these USER_DEFINED.
_VISIBLE = frozenset({"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                      "<tool_response|>", "<|\"|>"})


def gemma4_vocab(d: Path) -> tuple[list[KV], list[str]]:
    """The ``tokenizer.*`` KVs (in the converter's order) and notes for a Gemma 4 target dir.

    Raises:
        TargetError: transformers is missing, or the tokenizer files are not the Llama-style
            BPE (byte fallback) tokenizer.json that gguf-py's LlamaHfVocab reads.
    """
    try:
        import transformers  # noqa: F401  (LlamaHfVocab imports it; a clear error first)
    except ImportError:
        raise TargetError(f"{d}: reading a Gemma 4 tokenizer needs the 'transformers' package "
                          f"(pip install transformers), or {HINT}") from None
    from gguf.vocab import LlamaHfVocab

    try:
        vocab = LlamaHfVocab(d)
    except (FileNotFoundError, TypeError, KeyError, ValueError, OSError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TargetError(f"{d}/tokenizer.json: not a tokenizer gguf-py's LlamaHfVocab reads ({why}); {HINT}") from None
    tokens: list[str] = []
    scores: list[float] = []
    types: list[int] = []
    for text, score, toktype in vocab.all_tokens():
        token = text.decode("utf-8")  # LlamaHfVocab encodes str tokens, so this is lossless
        tokens.append(token)
        scores.append(float(score))
        types.append(USER_DEFINED if token in _VISIBLE else int(toktype))
    notes: list[str] = []
    kvs = [kv_str(K_MODEL, "gemma4"), kv_array(K_TOKENS, tokens, T.STRING), kv_array(K_SCORES, scores, T.FLOAT32),
           kv_array(K_TOKEN_TYPE, types, T.INT32)]
    special = special_vocab_kvs(d, load_merges=True, n_vocab=len(tokens), notes=notes)
    # add_add_bos_token(True) after SpecialVocab: gguf-py overwrites the value in place
    bos = kv_bool(ADD_KEYS["bos"], True)
    special = [bos if kv.key == bos.key else kv for kv in special]
    kvs += special + [kv_bool(K_ADD_PREFIX, False)]
    if bos not in special:
        kvs.append(bos)
    return kvs, notes
