"""Integrity checks that apply to any GGUF, drafter or not: what llama.cpp's loader would
refuse or misread even though the header parsed.

File checks see one physical file (offsets are per shard); model checks see the logical
model (shard 1's keys with every shard's tensors).
"""
from __future__ import annotations

import re
from typing import Iterator

from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_header import GGUFHeader, show
from ..fileio.string_array import StringArray
from ..fileio.types import type_name
from .findings import Finding, Severity, finding


# --- file checks ---------------------------------------------------------------------------

def check_layout(h: GGUFHeader) -> Iterator[Finding]:
    # llama.cpp's gguf loader requires tensor i at offset sum(pad(nbytes_j)) for j < i:
    # stored back to back in header order. gguf-py always writes that; a hand-edited or
    # spliced file may not, and then fails with "tensor has offset X, expected Y".
    expected = 0
    for t in h.tensors:
        rel = t.offset_abs - h.data_offset
        if rel != expected:
            yield finding(h, Severity.ERROR, "layout-not-contiguous",
                          f"tensor {show(t.name)} is at data offset {rel:,}, llama.cpp expects {expected:,} (tensors "
                          f"must be stored back to back in header order): re-convert the file", f"tensor {show(t.name)}")
            return
        expected += t.nbytes + (-t.nbytes % h.alignment)


def check_trailing(h: GGUFHeader) -> Iterator[Finding]:
    end = h.data_end + (-h.data_end % h.alignment) if h.tensors else h.header_end + (-h.header_end % h.alignment)
    if h.file_size > end:
        yield finding(h, Severity.WARNING, "trailing-bytes",
                      f"{h.file_size - end:,} bytes after the last tensor (file ends at {h.file_size:,}, data at "
                      f"{end:,}): two files concatenated, or an overwritten larger file? re-download",
                      f"byte {end:,}")


def check_names(h: GGUFHeader) -> Iterator[Finding]:
    for t in h.tensors:
        if len(t.name.encode()) >= 64:  # GGML_MAX_NAME
            yield finding(h, Severity.ERROR, "tensor-name-too-long",
                          f"tensor name is {len(t.name.encode())} bytes; llama.cpp allows at most 63", f"tensor {show(t.name)}")
        if t.n_elements == 0:
            kept = _ggml_rewrite(t.shape_ne)
            if kept:
                yield finding(h, Severity.ERROR, "empty-tensor-shape",
                              f"tensor {show(t.name)} has shape {list(t.shape_ne)} (no elements), which ggml's "
                              f"writers (llama-quantize, gguf-split) re-write as {kept:,} elements with no data: "
                              f"remove the tensor or re-convert", f"tensor {show(t.name)}")
            else:
                yield finding(h, Severity.WARNING, "empty-tensor",
                              f"tensor {show(t.name)} has shape {list(t.shape_ne)} (no elements)", f"tensor {show(t.name)}")
    for where in h.non_utf8:
        yield finding(h, Severity.WARNING, "non-utf8", f"{where} is not valid UTF-8 (shown with U+FFFD)", where)
    for f in h.kv.values():
        if f.type == T.ARRAY and f.sub_type == T.ARRAY:
            yield finding(h, Severity.ERROR, "nested-array",
                          f"key {show(f.key)} is an array of arrays; llama.cpp's loader refuses nested arrays",
                          f"key {show(f.key)}")


def _ggml_rewrite(ne: tuple[int, ...]) -> int:
    """The element count of ``ne`` once re-written by ggml: gguf_write keeps ggml_n_dims dims, up
    to the last one above 1, so a trailing 0 is dropped like a 1 ([2^40, 0] becomes [2^40])."""
    n = 1
    for d in ne[:max((i + 1 for i, d in enumerate(ne) if d > 1), default=1)]:
        n *= d
    return n


# --- model checks --------------------------------------------------------------------------

_ID_KEYS = tuple(f"tokenizer.ggml.{k}_token_id" for k in
                 ("bos", "eos", "eot", "eom", "unknown", "padding", "seperator", "cls", "mask"))
# Keys whose type llama.cpp's loader checks strictly ("key has wrong type"); {a} = arch.
KEY_TYPES: dict[str, tuple[tuple[T, T | None], ...]] = {
    **{k: ((T.STRING, None),) for k in ("general.architecture", "general.name", "general.basename",
                                        "general.finetune", "general.size_label", "tokenizer.ggml.model",
                                        "tokenizer.ggml.pre", "tokenizer.chat_template")},
    "general.file_type": ((T.UINT32, None),),
    "general.quantization_version": ((T.UINT32, None),),
    "tokenizer.ggml.tokens": ((T.ARRAY, T.STRING),),
    "tokenizer.ggml.merges": ((T.ARRAY, T.STRING),),
    "tokenizer.ggml.token_type": ((T.ARRAY, T.INT32),),
    "tokenizer.ggml.scores": ((T.ARRAY, T.FLOAT32),),
    **{k: ((T.UINT32, None),) for k in _ID_KEYS},
    "{a}.block_count": ((T.UINT32, None),),
    "{a}.context_length": ((T.UINT32, None),),
    "{a}.embedding_length": ((T.UINT32, None),),
    # per-layer arrays are legal for these (OpenELM, Gemma 3n, hybrid models)
    "{a}.feed_forward_length": ((T.UINT32, None), (T.ARRAY, T.UINT32), (T.ARRAY, T.INT32)),
    "{a}.attention.head_count": ((T.UINT32, None), (T.ARRAY, T.UINT32), (T.ARRAY, T.INT32)),
    "{a}.attention.head_count_kv": ((T.UINT32, None), (T.ARRAY, T.UINT32), (T.ARRAY, T.INT32)),
    "{a}.attention.layer_norm_rms_epsilon": ((T.FLOAT32, None),),
    "{a}.rope.freq_base": ((T.FLOAT32, None),),
}


def check_keys(h: GGUFHeader) -> Iterator[Finding]:
    arch = h.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        yield finding(h, Severity.ERROR, "arch-missing",
                      "general.architecture is missing or not a string; no loader can pick a model class",
                      "key general.architecture")
        arch = None
    for pattern, allowed in KEY_TYPES.items():
        if "{a}" in pattern and arch is None:
            continue
        key = pattern.format(a=arch)
        f = h.kv.get(key)
        if f is not None and (f.type, f.sub_type) not in allowed:
            want = " or ".join(type_name(*a) for a in allowed)
            yield finding(h, Severity.ERROR, "key-type",
                          f"{show(key)} is {type_name(f.type, f.sub_type)}, loaders require {want}: re-convert",
                          f"key {show(key)}")


def check_tokenizer(h: GGUFHeader) -> Iterator[Finding]:
    tokens = h.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, StringArray):
        return
    n = len(tokens)
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
        v = h.get(key)
        if isinstance(v, tuple) and len(v) != n:
            yield finding(h, Severity.ERROR, "tokenizer-length",
                          f"{key} has {len(v):,} entries for {n:,} tokens: the vocabulary is inconsistent "
                          f"(re-convert)", f"key {key}")
    for key in _ID_KEYS:
        v = h.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v < n:
            yield finding(h, Severity.WARNING, "token-id-range",
                          f"{key} = {v:,} is outside the {n:,}-token vocabulary (llama.cpp ignores it)", f"key {key}")


_BLK = re.compile(r"^blk\.(\d+)\.")


def check_tensors(h: GGUFHeader) -> Iterator[Finding]:
    if not h.tensors:
        yield finding(h, Severity.WARNING, "no-tensors",
                      "the file has no tensors: a vocab-only file, or a conversion that found no weights "
                      "(wrong model path?)")
        return
    n = h.get(f"{h.arch}.block_count") if h.arch else None
    if isinstance(n, int) and not isinstance(n, bool):
        over = sorted({int(m[1]) for t in h.tensors if (m := _BLK.match(t.name)) and int(m[1]) >= n})
        if over:
            yield finding(h, Severity.WARNING, "block-index",
                          f"tensors for block {over[0]}{'+' if len(over) > 1 else ''} but {show(h.arch)}.block_count = "
                          f"{n} (llama.cpp reports 'wrong number of tensors' unless the arch expects extra blocks)",
                          f"key {show(h.arch)}.block_count")
