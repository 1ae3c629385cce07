"""llama-quantize's file types and option parsing: names, ``llama_ftype`` ids, aliases, default
tensor types, which types need an importance matrix, and the ``--tensor-type`` /
``--output-tensor-type`` / ``--token-embedding-type`` argument syntax.

A restatement of ``tools/quantize/quantize.cpp`` (``QUANT_OPTIONS``, ``try_parse_ftype``,
``parse_ggml_type``, ``parse_tensor_type``, ``parse_tensor_type_file``) and of
``llama_ftype_get_default_type`` / ``tensor_requires_imatrix`` in ``src/llama-quant.cpp``, as
vendored in llama-cpp-python 0.3.36. The per-tensor plan itself is :mod:`.policy`.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from ..errors import QuantizationError
from ..fileio.gguf_constants import GGMLQuantizationType as T  # gguf-py's values, without importing it
from .regex import ecmascript_regex

#: quantize.cpp's QUANT_OPTIONS, in its order: (name, llama_ftype). ``Q3_K``/``Q4_K``/``Q5_K`` are
#: its aliases of the ``_M`` mixes; ``COPY`` shares ftype 0 with ``F32`` but sets ``only_copy``.
QUANT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("Q1_0", 40), ("Q2_0", 41), ("Q4_0", 2), ("Q4_1", 3), ("MXFP4_MOE", 38), ("Q5_0", 8), ("Q5_1", 9),
    ("IQ2_XXS", 19), ("IQ2_XS", 20), ("IQ2_S", 28), ("IQ2_M", 29), ("IQ1_S", 24), ("IQ1_M", 31),
    ("TQ1_0", 36), ("TQ2_0", 37), ("Q2_K", 10), ("Q2_K_S", 21), ("IQ3_XXS", 23), ("IQ3_S", 26),
    ("IQ3_M", 27), ("Q3_K", 12), ("IQ3_XS", 22), ("Q3_K_S", 11), ("Q3_K_M", 12), ("Q3_K_L", 13),
    ("IQ4_NL", 25), ("IQ4_XS", 30), ("Q4_K", 15), ("Q4_K_S", 14), ("Q4_K_M", 15), ("Q5_K", 17),
    ("Q5_K_S", 16), ("Q5_K_M", 17), ("Q6_K", 18), ("Q8_0", 7), ("F16", 1), ("BF16", 32), ("F32", 0),
    ("COPY", 0),
)
#: quantize.cpp's "alias for Q3_K_M" etc.
ALIASES: dict[str, str] = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
#: every name llama-quantize accepts (aliases included), upper case, with its llama_ftype
ALL_FTYPE_IDS: dict[str, int] = dict(QUANT_OPTIONS)

#: The file types dflash_gguf plans and writes (no importance matrix needed), best first, with
#: their ``general.file_type`` (llama_ftype). COPY writes the input's file type instead (see
#: :func:`copy_file_type`); 0 is the id quantize.cpp lists for it.
FTYPE_IDS: dict[str, int] = {n: ALL_FTYPE_IDS[n] for n in (
    "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1", "Q4_0",
    "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K", "IQ4_XS", "IQ4_NL", "F16", "BF16", "F32", "COPY")}

#: llama_ftype_get_default_type, by canonical name (None: gguf-py has no such ggml type).
LLAMA_DEFAULT_TYPE: dict[str, T | None] = {
    "Q4_0": T.Q4_0, "Q4_1": T.Q4_1, "Q5_0": T.Q5_0, "Q5_1": T.Q5_1, "Q8_0": T.Q8_0, "F16": T.F16,
    "BF16": T.BF16, "F32": T.F32, "COPY": T.F32, "Q1_0": T.Q1_0, "Q2_0": None, "MXFP4_MOE": T.MXFP4,
    "Q2_K_S": T.Q2_K, "Q2_K": T.Q2_K, "IQ3_XS": T.IQ3_S, "Q3_K_S": T.Q3_K, "Q3_K_M": T.Q3_K,
    "Q3_K_L": T.Q3_K, "Q4_K_S": T.Q4_K, "Q4_K_M": T.Q4_K, "Q5_K_S": T.Q5_K, "Q5_K_M": T.Q5_K,
    "Q6_K": T.Q6_K, "TQ1_0": T.TQ1_0, "TQ2_0": T.TQ2_0, "IQ2_XXS": T.IQ2_XXS, "IQ2_XS": T.IQ2_XS,
    "IQ2_S": T.IQ2_XS, "IQ2_M": T.IQ2_S, "IQ3_XXS": T.IQ3_XXS, "IQ1_S": T.IQ1_S, "IQ1_M": T.IQ1_M,
    "IQ4_NL": T.IQ4_NL, "IQ4_XS": T.IQ4_XS, "IQ3_S": T.IQ3_S, "IQ3_M": T.IQ3_S,
}
#: llama_ftype_get_default_type for the file types of :data:`FTYPE_IDS`.
DEFAULT_TYPE: dict[str, T] = {n: LLAMA_DEFAULT_TYPE[n] for n in FTYPE_IDS}  # type: ignore[misc]

#: tensor_requires_imatrix: these targets need an importance matrix (token_embd/output excepted),
#: and Q2_K does too inside a Q2_K_S file.
IMATRIX_TYPES = frozenset({T.IQ3_XXS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_M, T.IQ1_S})
#: File types whose mix gives tensors those targets: llama-quantize refuses them without --imatrix
#: unless every such tensor falls back (tensor_type_fallback) to a type that needs none.
IMATRIX_FTYPES: dict[str, str] = {
    "IQ1_S": "IQ1_S", "IQ1_M": "IQ1_M", "IQ2_XXS": "IQ2_XXS", "IQ2_XS": "IQ2_XS", "IQ2_S": "IQ2_XS",
    "IQ2_M": "IQ2_S", "IQ3_XXS": "IQ3_XXS", "IQ3_XS": "IQ3_XXS (attn_q, attn_k, middle ffn_gate/ffn_up)",
    "Q2_K_S": "Q2_K (in a Q2_K_S file)",
}
#: Needs no importance matrix, but dflash_gguf does not write it (no kernel for its types).
NOT_OFFERED: dict[str, str] = {
    "Q1_0": "Q1_0", "Q2_0": "Q2_0", "MXFP4_MOE": "MXFP4", "TQ1_0": "TQ1_0", "TQ2_0": "TQ2_0",
    "IQ3_S": "IQ3_S", "IQ3_M": "IQ3_S",
}

_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")  # std::stoi: leading space, sign, digits; rest ignored


def _supported_list() -> str:
    return ", ".join(FTYPE_IDS)


def resolve_ftype(ftype: str | int) -> str:
    """Canonical name of one of llama-quantize's file types (``try_parse_ftype``): a name,
    case-insensitive (aliases ``Q3_K``/``Q4_K``/``Q5_K`` → the ``_M`` mix), or a llama_ftype id
    as an int or a string ``std::stoi`` reads (the first QUANT_OPTIONS entry with that id: 0 is
    F32, never COPY). Surrounding whitespace is ignored. Any llama-quantize type resolves,
    also those :func:`~dflash_gguf.quants.policy.plan_types` refuses (importance-matrix types).

    Raises:
        QuantizationError: not a file type llama-quantize knows.
    """
    name = None
    if isinstance(ftype, int) and not isinstance(ftype, bool):
        name = next((n for n, i in QUANT_OPTIONS if i == ftype), None)
    elif isinstance(ftype, str):
        key = ftype.strip().translate(_ASCII_UPPER)
        if key in ALL_FTYPE_IDS:
            name = key
        elif (m := _STOI.match(key)) is not None:
            name = next((n for n, i in QUANT_OPTIONS if i == int(m.group(1))), None)
    if name is None:
        raise QuantizationError(f"unsupported file type {ftype!r}; supported: {_supported_list()} "
                                "(llama-quantize's names, case-insensitive)")
    return ALIASES.get(name, name)


def ftype_id(ftype: str | int) -> int:
    """The ``general.file_type`` id (llama_ftype) of a file type (Q8_0 -> 7, Q4_K_M -> 15)."""
    return ALL_FTYPE_IDS[resolve_ftype(ftype)]


def ftype_refusal(name: str) -> str | None:
    """Why dflash_gguf does not write file type ``name`` (canonical), or None if it does."""
    if name in IMATRIX_FTYPES:
        return (f"{name} needs an importance matrix in llama-quantize (tensor_requires_imatrix: its "
                f"{IMATRIX_FTYPES[name]} tensors); dflash_gguf quantizes without one and does not offer "
                f"it; supported: {_supported_list()}")
    if name in NOT_OFFERED:
        return (f"{name} is not supported by dflash_gguf (no {NOT_OFFERED[name]} quantizer); "
                f"supported: {_supported_list()}")
    return None


def tensor_requires_imatrix(name: str, t: T, ftype: str) -> bool:
    """llama-quant.cpp's tensor_requires_imatrix (``ftype``: canonical file type name)."""
    if name in ("token_embd.weight", "per_layer_token_embd.weight", "output.weight"):
        return False
    return t in IMATRIX_TYPES or (t == T.Q2_K and ftype == "Q2_K_S")


def ggml_type_name(t: T) -> str:
    """ggml_type_name: lower case but for the K of the k-quants (``q4_K``, ``q8_K``)."""
    return t.name.lower().replace("_k", "_K")


def parse_ggml_type(arg: str | T) -> T:
    """quantize.cpp's parse_ggml_type: a ggml type name, case-insensitive (``q8_0``, ``Q4_K``,
    ``bf16``). A ggml type enum (this package's or gguf-py's, which have the same values) passes
    through.

    Raises:
        QuantizationError: not a ggml type name (llama-quantize prints its usage and exits).
    """
    if isinstance(arg, IntEnum):
        return T(int(arg))
    key = str(arg).translate(_ASCII_UPPER)
    if key in T.__members__:
        return T[key]
    raise QuantizationError(f"invalid ggml_type {str(arg)!r}")


def parse_tensor_type(arg: str) -> tuple[str, T]:
    """quantize.cpp's parse_tensor_type for one ``--tensor-type NAME=TYPE``: split at the first
    ``=``; NAME (a regular expression) is lower-cased (ASCII, the whole pattern: ``\\D`` becomes
    ``\\d``, as in llama-quantize), TYPE is a ggml type name.

    Raises:
        QuantizationError: no ``=``, an empty NAME or TYPE, or an unknown TYPE.
    """
    name, sep, qtype = arg.partition("=")
    if not sep:
        raise QuantizationError(f"malformed tensor type {arg!r}")
    if not name:
        raise QuantizationError("missing tensor name")
    if not qtype:
        raise QuantizationError("missing quantization type")
    try:
        t = parse_ggml_type(qtype)
    except QuantizationError:
        raise QuantizationError(f"invalid quantization type {qtype!r}") from None
    return name.translate(_ASCII_LOWER), t


def parse_tensor_type_file(text: str) -> list[tuple[str, T]]:
    """quantize.cpp's parse_tensor_type_file: ``NAME=TYPE`` entries separated by whitespace."""
    return [parse_tensor_type(a) for a in text.split()]


@dataclass(frozen=True)
class Overrides:
    """llama-quantize's user overrides (llama_model_quantize_params). ``tensor_types``:
    ``--tensor-type`` (pattern, type) pairs in order (patterns as llama-quantize passes them on:
    :func:`parse_tensor_type` lower-cases them); each is a std::regex (ECMAScript) searched in the
    tensor name (:func:`ecmascript_regex`), the first that matches wins. Types may be ggml type names.
    ``leave_output_tensor``: ``--leave-output-tensor`` (output.weight copied as is)."""

    tensor_types: tuple[tuple[str, T], ...] = ()
    output_tensor_type: T | None = None
    token_embedding_type: T | None = None
    pure: bool = False
    leave_output_tensor: bool = False

    def __post_init__(self) -> None:
        tt = tuple((str(p), parse_ggml_type(t)) for p, t in self.tensor_types)
        for p, _t in tt:
            ecmascript_regex(p)  # refuse what std::regex refuses, up front
        object.__setattr__(self, "tensor_types", tt)
        for f in ("output_tensor_type", "token_embedding_type"):
            if getattr(self, f) is not None:
                object.__setattr__(self, f, parse_ggml_type(getattr(self, f)))


def copy_file_type(file_type_kv: int | None, tensor_types: Iterable[T]) -> int:
    """``general.file_type`` of a COPY (``only_copy``: ftype = the loader's ``ml.ftype``): the
    input's ``general.file_type`` when it has one, else llama_model_loader's guess: the type most
    tensors have (the first to reach the count, in processing order) mapped to a file type, with
    the LLAMA_FTYPE_GUESSED bit (1024) set. ``tensor_types``: the input types in llama-quantize's
    processing order (:func:`~dflash_gguf.quants.policy.processing_order`)."""
    if file_type_kv is not None:
        return int(file_type_kv)
    counts: dict[T, int] = {}
    best, best_n = T.F32, 0
    for t in tensor_types:
        counts[t] = counts.get(t, 0) + 1
        if counts[t] > best_n:
            best, best_n = t, counts[t]
    guess = {T.F32: 0, T.F16: 1, T.BF16: 32, T.Q4_0: 2, T.Q4_1: 3, T.Q5_0: 8, T.Q5_1: 9, T.Q8_0: 7,
             T.Q2_K: 10, T.Q3_K: 12, T.Q4_K: 15, T.Q5_K: 17, T.Q6_K: 18, T.TQ1_0: 36, T.TQ2_0: 37,
             T.IQ2_XXS: 19, T.IQ2_XS: 20, T.IQ2_S: 28, T.IQ3_XXS: 23, T.IQ1_S: 24, T.IQ1_M: 31,
             T.IQ4_NL: 25, T.IQ4_XS: 30, T.IQ3_S: 26, T.NVFP4: 39, T.Q1_0: 40}
    return guess.get(best, 0) | 1024


# --- the hparams the plan reads (llama_model_base::load_hparams and the archs' load_arch_hparams) ---
_70B_LAYERS = {"deci": 80, "olmo": 80, "qwen2": 80, "jais2": 68}


def _first(v: object, default: int) -> int:
    if isinstance(v, (list, tuple)):
        return int(v[0]) if v else default
    return default if v is None else int(v)  # type: ignore[call-overload]


def plan_hparams(kv: Mapping[str, object]) -> dict[str, object]:
    """The model facts llama-quantize's plan reads, from GGUF KVs ``{key: value}`` (arrays as
    lists): keyword arguments for :func:`~dflash_gguf.quants.policy.plan_types` —
    ``n_layer`` (``<arch>.block_count``, hparams.n_layer_all), ``n_expert``
    (``<arch>.expert_count``), ``n_gqa`` (hparams.n_gqa(0): head_count / head_count_kv of layer
    0, head_count_kv defaulting to head_count, 0 when head_count_kv is 0), ``arch``
    (``general.architecture``) and ``is_70b`` (model.type == LLM_TYPE_70B: llama with 80 layers,
    not 8 experts and n_head != n_head_kv; deci, olmo, qwen2 with 80; jais2 with 68 — layers net of
    ``<arch>.nextn_predict_layers``).

    Raises:
        QuantizationError: no ``general.architecture`` or ``<arch>.block_count`` (llama-quantize
            refuses such a file too).
    """
    arch = kv.get("general.architecture")
    if not isinstance(arch, str):
        raise QuantizationError("no general.architecture: llama-quantize cannot load the model")
    n_layer = kv.get(f"{arch}.block_count")
    if n_layer is None:
        raise QuantizationError(f"no {arch}.block_count: llama-quantize cannot load the model")
    n_layer = int(n_layer)  # type: ignore[call-overload]
    n_expert = _first(kv.get(f"{arch}.expert_count"), 0)
    n_head = _first(kv.get(f"{arch}.attention.head_count"), 0)
    n_head_kv = _first(kv.get(f"{arch}.attention.head_count_kv"), n_head)
    n_gqa = n_head // n_head_kv if n_head_kv else 0
    layers = n_layer - _first(kv.get(f"{arch}.nextn_predict_layers"), 0)
    if arch == "llama":
        is_70b = n_expert != 8 and layers == 80 and n_head != n_head_kv
    else:
        is_70b = layers == _70B_LAYERS.get(arch, -1)
    return {"n_layer": n_layer, "n_expert": n_expert, "n_gqa": n_gqa, "arch": arch, "is_70b": is_70b}
