"""llama-quantize's output layout for a GGUF: per-tensor types, tensor order, KV order (pure).

Shared by ``quantize`` and ``convert --outtype q8_0|q4_k_m``, which is defined as "convert with
--outtype auto, then quantize": bf16 → f32 is exact, so both routes give the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import QuantizationError
from ..fileio.gguf_constants import GGMLQuantizationType as Q, GGUFValueType
from ..fileio.gguf_kv import bad_kv, get_int
from ..fileio.gguf_writer import tensor_nbytes
from ..fileio.types import KV
from .ftypes import Overrides, copy_file_type, ftype_id, plan_hparams, resolve_ftype
from .policy import ggml_n_dims, layer_of, plan_types

FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


@dataclass(frozen=True)
class QuantEntry:
    name: str
    shape: tuple[int, ...]  # numpy order
    src_type: Q
    ggml_type: Q
    nbytes: int
    reason: str
    quantized: bool  # False: bytes copied untouched



def requantize_layout(
    kvs: Sequence[KV],
    tensors: Sequence[tuple[str, tuple[int, ...], Q]],
    ftype: str,
    *,
    allow_requantize: bool = False,
    where: str = "",
    overrides: Overrides | None = None,
) -> tuple[list[KV], list[QuantEntry]]:
    """llama-quantize's output layout for these input KVs and tensors.

    KVs keep their order (split keys dropped); ``general.quantization_version`` and
    ``general.file_type`` are removed and re-appended last, as gguf_set_val does in llama.cpp.
    Tensors come back in llama-quantize's processing order with their new types.

    Raises:
        QuantizationError: a tensor to be re-encoded is already quantized (without
            allow_requantize), or a type rule cannot be applied (policy.plan_types).
        GGUFFormatError: ``<arch>.block_count`` is not an unsigned 32-bit integer.
    """
    mix = resolve_ftype(ftype)
    kv_by = {kv.key: kv for kv in kvs}
    arch = kv_by.get("general.architecture")
    if arch is not None and isinstance(arch.value, str):
        # llama-quantize reads n_layer as a uint32 (llama_model_loader's get_key checks the type and
        # throws "wrong type"): any other integer type is a file it refuses, so we refuse it too
        key = f"{arch.value}.block_count"
        n_layer = get_int(kv_by, key, None, required=False, path=where)
        if n_layer is not None and kv_by[key].type != GGUFValueType.UINT32:
            raise bad_kv(where, kv_by[key], "a UINT32 (llama-quantize refuses any other type)")
    hparams = _hparams(kv_by, tensors)
    src_types = {n: t for n, _s, t in tensors}
    choices = plan_types([(n, s, t) for n, s, t in tensors], mix, **hparams, overrides=overrides)
    if not allow_requantize:
        for c in choices:
            # only a tensor llama-quantize re-encodes: an I64 d2t, an F32 norm or a COPY is copied as is
            t = src_types[c.name]
            if t not in FLOAT_TYPES and c.ggml_type != t:
                raise QuantizationError(
                    f"{where}: tensor {c.name} is already {t.name}; quantizing it again loses precision twice "
                    "(pass --allow-requantize to do it anyway, or start from the F32/F16/BF16 GGUF)")
    entries = []
    for c in choices:
        src = src_types[c.name]
        quantized = c.ggml_type != src
        # llama.cpp's writer records ggml_n_dims dimensions: outer ne of 1 are dropped (a [1, n]
        # conf_proj.weight is stored 1-D), so the header bytes only match with the same shape.
        # A zero-element tensor keeps every dimension: ggml_n_dims drops an outer 0 like a 1,
        # which would turn ne [2^40, 0] into a 2^40-element tensor with no data.
        keep = len(c.shape) if 0 in c.shape else ggml_n_dims(c.shape)
        shape = c.shape[len(c.shape) - keep:] if c.shape else c.shape
        entries.append(QuantEntry(c.name, shape, src, c.ggml_type, tensor_nbytes(shape, c.ggml_type),
                                  c.reason if quantized else f"{c.reason} (copied)", quantized))
    if mix == "COPY":  # the loader's ftype: the input's general.file_type, or its guess from the types
        given = kv_by.get("general.file_type")
        file_type = copy_file_type(None if given is None else given.value, [src_types[c.name] for c in choices])
    else:
        file_type = ftype_id(mix)
    out = [kv for kv in kvs if kv.key not in _SPLIT_KEYS + ("general.quantization_version", "general.file_type",
                                                          "general.architecture")]
    out.append(KV("general.quantization_version", 2, GGUFValueType.UINT32))
    out.append(KV("general.file_type", file_type, GGUFValueType.UINT32))
    return out, entries


def _hparams(kv_by: dict[str, KV], tensors) -> dict:
    """plan_hparams of the KVs. A file without ``general.architecture`` or ``<arch>.block_count``
    (llama-quantize cannot load it) still gets a plan: the layer count as llama.cpp parses names
    (sscanf "blk.%d.", -1 when it does not match), no experts, no GQA."""
    kv = {k: _plain(v.value) for k, v in kv_by.items()}
    arch = kv.get("general.architecture")
    if isinstance(arch, str) and f"{arch}.block_count" in kv:
        return plan_hparams(kv)
    n_layer = 1 + max((layer_of(n) for n, *_ in tensors), default=-1)
    if isinstance(arch, str):
        return plan_hparams({**kv, f"{arch}.block_count": n_layer})
    return {"n_layer": n_layer, "n_expert": 0, "n_gqa": 0, "arch": "", "is_70b": False}


def _plain(v):
    """A KV value as plan_hparams reads it: arrays as lists."""
    return v.tolist() if hasattr(v, "tolist") else list(v) if isinstance(v, tuple) else v
