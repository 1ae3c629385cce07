"""``tokenizer.ggml.pre`` for a BPE target, decided like llama.cpp first.

The sha256 of the ids the tokenizer gives for llama.cpp's fixed check text is looked up in
llama.cpp's table (``get_vocab_base_pre``; see ``chkhsh``). When the hash is unknown (a
fine-tune with edited vocab, or a tiny test tokenizer, which llama.cpp's converter refuses)
the ``tokenizer.json`` pre-tokenizer definition is compared with the families whose
llama.cpp runtime behaviour it fully determines (``_FAMILIES``: split regex, byte-level
flags, ignore_merges, clean-up of spaces); no match -> TargetError.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TargetError
from .chkhsh import CHKHSH, CHKTXT
from .hf_files import HINT


@dataclass(frozen=True)
class _Family:
    """A BPE pre-tokenizer family whose llama.cpp runtime behaviour a tokenizer.json fully
    pins down: the split regex as the family's tokenizer.json spells it (quoted in
    llama.cpp's src/llama-vocab.cpp as "original regex from tokenizer.json"), ByteLevel
    without/with its own regex, and the two flags llama.cpp sets per family name
    (``ignore_merges``; ``clean_spaces``, which transformers calls clean_up_tokenization_spaces)."""

    name: str
    split_regex: str | None  # None: a lone ByteLevel(use_regex=true) pre-tokenizer (GPT-2)
    ignore_merges: bool
    clean_spaces: bool
    normalizers: tuple[str | None, ...]  # normalizer types the family's files use


_FAMILIES = (
    # Qwen2 / Qwen2.5 / Qwen3 (llama.cpp also names this behaviour deepseek-r1-qwen, kormo, f2llmv2).
    _Family("qwen2",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+",
            ignore_merges=False, clean_spaces=False, normalizers=("NFC", None)),
    # Qwen3.5 / Qwen3.6: letters include marks (\p{M}).
    _Family("qwen35",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+",
            ignore_merges=False, clean_spaces=False, normalizers=("NFC", None)),
    # Llama 3.x: digits in runs of 1-3, merges ignored for whole-word vocab hits.
    _Family("llama-bpe",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+",
            ignore_merges=True, clean_spaces=True, normalizers=(None,)),
    # GPT-2: ByteLevel does the splitting with its built-in regex.
    _Family("gpt-2", None, ignore_merges=False, clean_spaces=True, normalizers=(None,)),
)
FAMILY_NAMES = tuple(f.name for f in _FAMILIES)


def decide_pre(tok, tj: dict, tc: dict | None, where: Path) -> tuple[str, str, str | None]:
    """(tokenizer.ggml.pre, how it was decided, a note for the user or None): llama.cpp's hash
    table first, then the pre_tokenizer definition. ``tok`` is the loaded ``tokenizers.Tokenizer``."""
    ids = tok.encode(CHKTXT).ids  # add_special_tokens defaults to True, as in transformers
    chkhsh = hashlib.sha256(str(list(ids)).encode()).hexdigest()
    if chkhsh in CHKHSH:
        return CHKHSH[chkhsh], "chkhsh", None
    family = _match_family(tj, tc)
    if family is None:
        raise TargetError(
            f"{where}: BPE pre-tokenizer not recognised (chkhsh {chkhsh[:12]}... is not in llama.cpp's table and the "
            f"pre_tokenizer is none of {', '.join(FAMILY_NAMES)}); {HINT}"
        )
    note = (
        f"tokenizer.ggml.pre = {family.name!r} from tokenizer.json's pre_tokenizer (chkhsh {chkhsh[:12]}... is not in "
        f"llama.cpp's table, whose converter would refuse this tokenizer)"
    )
    return family.name, "pre_tokenizer", note


def _match_family(tj: dict, tc: dict | None) -> _Family | None:
    model = tj.get("model") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback", False):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    if (tj.get("decoder") or {}).get("type") != "ByteLevel":
        return None
    norm = tj.get("normalizer")
    norm_type = None if norm is None else norm.get("type")
    clean = bool((tc or {}).get("clean_up_tokenization_spaces", False))
    ignore_merges = bool(model.get("ignore_merges", False))
    split = _split_regex(tj.get("pre_tokenizer"))
    for fam in _FAMILIES:
        if (split == fam.split_regex and ignore_merges == fam.ignore_merges and clean == fam.clean_spaces
                and norm_type in fam.normalizers):
            return fam
    return None


_NO_MATCH = object()


def _split_regex(pre: Any) -> Any:
    """The Split regex of a [Split(regex, Isolated), ByteLevel(no prefix, no regex)] sequence;
    None for a lone ByteLevel(no prefix, regex); a sentinel for anything else."""
    def bytelevel(p: Any, use_regex: bool) -> bool:
        return (isinstance(p, dict) and p.get("type") == "ByteLevel" and not p.get("add_prefix_space", False)
                and bool(p.get("use_regex", True)) == use_regex)

    if bytelevel(pre, True):
        return None
    if not isinstance(pre, dict) or pre.get("type") != "Sequence":
        return _NO_MATCH
    seq = pre.get("pretokenizers") or []
    if len(seq) != 2 or not bytelevel(seq[1], False):
        return _NO_MATCH
    split = seq[0]
    if not (isinstance(split, dict) and split.get("type") == "Split" and split.get("behavior") == "Isolated"
            and not split.get("invert", False)):
        return _NO_MATCH
    pattern = split.get("pattern") or {}
    return pattern.get("Regex", _NO_MATCH)
