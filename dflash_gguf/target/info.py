"""The target as the converter sees it (``TargetInfo``): its sizes, to check the drafter
against (``check_drafter_fits``), and its ``tokenizer.*`` KVs, to embed in the drafter GGUF.

z-lab drafters ship no tokenizer, but mainline llama.cpp (``dflash``) and the
``dflash-draft`` forks load the drafter as a model with a vocabulary, and speculative
decoding checks it against the target's. So the drafter GGUF carries the **target's**
tokenizer, taken from one of:

* ``target_from_gguf``: the target already converted to GGUF (the common case). Every
  ``tokenizer.*`` key is copied unchanged: same order, types and values.
* ``target_from_hf_dir``: the target's Hugging Face dir, its vocabulary rebuilt the way
  llama.cpp's ``convert_hf_to_gguf.py`` does (``hf_vocab``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..config import DrafterConfig
from ..errors import ConfigError, TargetError, UsageError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_header import GGUFHeader, raw_string, read_header
from ..fileio.gguf_kv import bad_kv
from ..fileio.string_array import StringArray
from ..fileio.types import KV, kv_u32
from ..formats.meta import ROPE_SECTIONS
from .keys import K_MASK_ID, K_MODEL, K_PRE, K_TOKENS

# GGUF architectures of drafters: a drafter is never the target.
_DRAFTER_ARCHS = ("dflash", "dflash-draft", "eagle3")


@dataclass(frozen=True)
class TargetInfo:
    """What the converter needs from the target: sizes to check the drafter against, and the
    ``tokenizer.*`` KVs to embed, in the order llama.cpp writes them."""

    source: Path
    source_kind: str  # "gguf" | "hf"
    arch: str  # GGUF general.architecture, or the HF architecture llama.cpp dispatches on
    model_type: str
    hidden_size: int
    num_hidden_layers: int  # depth that taps index (GGUF: block_count minus MTP/nextn layers)
    vocab_size: int  # rows of the target's embedding/lm_head, which the drafter borrows
    n_vocab_tokens: int  # entries in tokenizer.ggml.tokens (llama.cpp pads to vocab_size)
    tokenizer_model: str | None  # tokenizer.ggml.model: "gpt2", "llama", ...
    tokenizer_pre: str | None
    pre_source: str  # "copied" | "default" (SentencePiece) | "chkhsh" | "pre_tokenizer" | "none" (Gemma 4)
    kvs: tuple[KV, ...]
    notes: tuple[str, ...] = ()  # things the CLI should tell the user (never fatal)
    # M-RoPE target: the drafter must carry rope.dimension_sections or mainline ropes it as plain NeoX
    uses_mrope: bool = False

    def get(self, key: str, default: Any = None) -> Any:
        for kv in self.kvs:
            if kv.key == key:
                return kv.value
        return default


def load_target(target_gguf: str | Path | None = None, target_dir: str | Path | None = None, *,
                drafter: DrafterConfig | None = None) -> TargetInfo | None:
    """The CLI's ``--target-gguf`` / ``--target-dir`` pair: at most one; None when neither.
    ``drafter``: checked against the target's config.json before its vocabulary is built.

    Raises:
        UsageError: both were given.
        TargetError, GGUFFormatError: see ``target_from_gguf`` / ``target_from_hf_dir``.
    """
    if target_gguf is not None and target_dir is not None:
        raise UsageError("pass either --target-gguf or --target-dir, not both (the GGUF is the exact copy; prefer it)")
    if target_gguf is not None:
        return target_from_gguf(target_gguf)
    if target_dir is not None:
        return target_from_hf_dir(target_dir, drafter=drafter)
    return None


def drafter_tokenizer_kvs(target: TargetInfo, mask_token_id: int | None) -> list[KV]:
    """The target's tokenizer KVs with the drafter's ``tokenizer.ggml.mask_token_id``.

    llama.cpp's DFlashModel writes the mask id after the vocab; GGUFWriter overwrites an
    existing key in place, so a mask id the target already had keeps its position.
    """
    out = list(target.kvs)
    if mask_token_id is None:
        return out
    mask = kv_u32(K_MASK_ID, mask_token_id)
    for i, kv in enumerate(out):
        if kv.key == K_MASK_ID:
            out[i] = mask
            return out
    out.append(mask)
    return out


def target_from_gguf(path: str | Path) -> TargetInfo:
    """Copy every ``tokenizer.*`` key of a target GGUF and read its sizes.

    Raises:
        TargetError: missing file, a drafter instead of a target, no tokenizer, or no
            embedding_length/block_count.
        GGUFFormatError: the file is truncated or corrupt.
    """
    p = Path(path)
    if not p.is_file():
        raise TargetError(f"--target-gguf {p}: no such file; pass the target model's .gguf (for split models, the first part)")
    header = read_header(p)
    arch = header.arch
    if not arch:
        raise TargetError(f"{p}: no general.architecture key; not a llama.cpp model GGUF (re-convert the target)")
    if arch in _DRAFTER_ARCHS or arch.endswith("-dflash-draft"):
        raise TargetError(f"{p}: is a drafter GGUF (architecture {arch}); --target-gguf takes the target model's GGUF")

    kvs: list[KV] = []
    raw_needed: list[str] = []
    for key in header.kv_order:
        if not key.startswith("tokenizer."):
            continue
        f = header.kv[key]
        if f.type == T.ARRAY:
            if f.sub_type == T.ARRAY:
                raise TargetError(f"{p}: {key} is a nested array, which no llama.cpp tokenizer key uses; re-convert the target")
            # A string array stays the stored bytes (a 150k-token vocabulary is not decoded
            # here; the writer copies the bytes); its items read as str, or bytes where invalid.
            # A numeric one stays a NumberArray (its stored bytes are copied too).
            values = f.value.exact() if isinstance(f.value, StringArray) else f.value
            kvs.append(KV(key, values, T.ARRAY, f.sub_type))
        else:
            if f.type == T.STRING and "\ufffd" in f.value:
                raw_needed.append(key)
            kvs.append(KV(key, f.value, f.type))
    if raw_needed:
        # The header reader decodes scalar strings with replacement characters; U+FFFD may be
        # genuine or a stand-in for invalid UTF-8, so re-read those keys' raw bytes.
        raw = _raw_strings(header, raw_needed)
        kvs = [KV(kv.key, raw[kv.key], kv.type, kv.sub_type) if kv.key in raw else kv for kv in kvs]

    tokens = header.get(K_TOKENS)
    if tokens is None or header.get(K_MODEL) is None:
        raise TargetError(
            f"{p}: has no tokenizer ({K_TOKENS} / {K_MODEL} missing); pass the full target model GGUF, or --target-dir"
        )
    for key, want, ok in ((K_TOKENS, "an array of strings", header.kv[K_TOKENS].sub_type == T.STRING),
                          (K_MODEL, "a string", isinstance(header.get(K_MODEL), str))):
        if not ok:
            raise bad_kv(str(p), header.kv[key], want)

    def need_u(key: str) -> int:
        v = header.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise TargetError(f"{p}: {key} is missing or not a positive integer; re-convert the target with a current llama.cpp")
        return v

    hidden = need_u(f"{arch}.embedding_length")
    depth = need_u(f"{arch}.block_count")
    notes = []
    nextn = header.get(f"{arch}.nextn_predict_layers")
    if isinstance(nextn, int) and not isinstance(nextn, bool) and 0 < nextn < depth:
        # MTP exports append the nextn layers to block_count; taps index the main stack.
        depth -= nextn
        notes.append(f"{p.name}: block_count includes {nextn} MTP layer(s); target depth taken as {depth}")
    vocab = header.get(f"{arch}.vocab_size")
    embd = header.tensors_by_name.get("token_embd.weight")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 0:
        vocab = embd.shape_ne[1] if embd is not None and len(embd.shape_ne) == 2 else len(tokens)
    return TargetInfo(
        source=p, source_kind="gguf", arch=arch, model_type=arch,
        hidden_size=hidden, num_hidden_layers=depth, vocab_size=int(vocab), n_vocab_tokens=len(tokens),
        tokenizer_model=header.get(K_MODEL), tokenizer_pre=header.get(K_PRE), pre_source="copied",
        kvs=tuple(kvs), notes=tuple(notes), uses_mrope=f"{arch}.{ROPE_SECTIONS}" in header.kv,
    )


def _raw_strings(header: GGUFHeader, keys: Iterable[str]) -> dict[str, Any]:
    """Values of scalar string keys, kept as ``bytes`` where they are not valid UTF-8."""
    out: dict[str, Any] = {}
    for key in keys:
        b = raw_string(header.path, header.kv[key])
        try:
            out[key] = b.decode("utf-8")
        except UnicodeDecodeError:
            out[key] = b
    return out


def target_from_hf_dir(path: str | Path, *, drafter: DrafterConfig | None = None) -> TargetInfo:
    """Build the target's tokenizer KVs from its Hugging Face dir, as llama.cpp would.

    config.json's vocab_size sizes the token list (``[PAD…]`` up to it): it is checked against
    ``drafter``'s (when given) and, by ``hf_vocab``, against the tokenizer's size before any list
    is built.

    Raises:
        TargetError: missing/unsupported tokenizer files or architecture, a tokenizer that
            cannot be reproduced faithfully, or the optional ``tokenizers``/``sentencepiece``
            packages are missing. Every message recommends ``--target-gguf``.
    """
    d = Path(path)
    if not d.is_dir():
        raise TargetError(f"--target-dir {d}: not a directory; pass the target's Hugging Face model dir, or --target-gguf")
    from ..config import load_target_config

    try:
        cfg = load_target_config(d)
    except ConfigError as exc:
        raise TargetError(f"target: {exc}") from None
    if drafter is not None and drafter.vocab_size != cfg.vocab_size:
        raise TargetError(f"drafter {drafter.path} does not fit the target: "
                          + _vocab_mismatch(drafter.vocab_size, cfg.vocab_size, f"target {d}"))
    from .hf_vocab import vocab_from_hf_dir  # ~7 ms (hashlib, the pre-tokenizer table): --target-dir only

    arch, vocab = vocab_from_hf_dir(d, cfg.vocab_size)
    n_tokens = len(next(kv.value for kv in vocab.kvs if kv.key == K_TOKENS))
    return TargetInfo(
        source=d, source_kind="hf", arch=arch, model_type=cfg.model_type,
        hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers, vocab_size=cfg.vocab_size,
        n_vocab_tokens=n_tokens, tokenizer_model=vocab.model, tokenizer_pre=vocab.pre or None, pre_source=vocab.pre_source,
        kvs=tuple(vocab.kvs), notes=tuple(vocab.notes), uses_mrope=cfg.uses_mrope,
    )


def _vocab_mismatch(drafter_vocab: int, target_vocab: int, where: str) -> str:
    return (f"vocab_size {drafter_vocab} (drafter) != {target_vocab} ({where}); the drafter borrows the "
            "target's embeddings and lm_head, so it must be the target it was trained for")


def check_drafter_fits(target: TargetInfo, drafter: DrafterConfig, fc_in_features: int | None = None) -> list[str]:
    """Check the drafter against the target it will borrow embeddings and hidden states from.

    ``fc_in_features`` is the fusion layer's input width from the weights (n_taps x target
    hidden) when the caller has it; otherwise the config's ``target_hidden_size`` (or the
    drafter's own hidden size, as the reference assumes) stands in.

    Returns:
        Warnings (non-fatal) for the CLI to show.
    Raises:
        TargetError: one line listing every mismatch (vocab, hidden size, taps, mask id).
    """
    problems: list[str] = []
    warnings: list[str] = []
    where = f"target {target.source}"
    if drafter.vocab_size != target.vocab_size:
        problems.append(_vocab_mismatch(drafter.vocab_size, target.vocab_size, where))
    if fc_in_features is not None:
        n = drafter.n_taps
        if n == 0 or fc_in_features % n:
            problems.append(f"fc input width {fc_in_features} is not a multiple of the {n} target layers tapped")
        elif fc_in_features // n != target.hidden_size:
            problems.append(
                f"fc input width {fc_in_features} / {n} taps = {fc_in_features // n}, but {where} has hidden size "
                f"{target.hidden_size}"
            )
    else:
        expected = drafter.target_hidden_size or drafter.hidden_size
        if expected != target.hidden_size:
            src = "target_hidden_size" if drafter.target_hidden_size else "hidden_size (no target_hidden_size in config)"
            problems.append(f"drafter {src} = {expected}, but {where} has hidden size {target.hidden_size}")
    depth = target.num_hidden_layers
    bad = [t for t in drafter.target_layer_ids if not 0 <= t < depth]
    if bad:
        problems.append(f"target_layer_ids {list(bad)} are outside the target's {depth} layers (0..{depth - 1})")
    if drafter.num_target_layers is not None and drafter.num_target_layers != target.num_hidden_layers:
        # Not fatal by itself (taps are checked above), but it usually means the wrong target.
        warnings.append(
            f"drafter was trained on a {drafter.num_target_layers}-layer target (num_target_layers), but {where} has "
            f"{target.num_hidden_layers} layers; is this the target it was trained for?"
        )
    n_vocab = min(target.vocab_size, target.n_vocab_tokens)
    if drafter.mask_token_id is not None and not 0 <= drafter.mask_token_id < n_vocab:  # None: a DSpark export
        problems.append(f"mask_token_id {drafter.mask_token_id} is outside the target vocabulary ({n_vocab} tokens)")
    if problems:
        raise TargetError(f"drafter {drafter.path} does not fit the target: " + "; ".join(problems))
    return warnings
