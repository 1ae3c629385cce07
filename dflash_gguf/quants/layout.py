"""llama-quantize's output layout for a GGUF: per-tensor types, tensor order, KV order (pure).

Shared by ``quantize`` and ``convert --outtype q8_0|q4_k_m``, which is defined as "convert with
--outtype auto, then quantize": bf16 → f32 is exact, so both routes give the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType

from ..errors import QuantizationError
from ..fileio.gguf_kv import bad_kv, get_int
from ..fileio.gguf_writer import tensor_nbytes
from ..fileio.types import KV
from .policy import ftype_id, ggml_n_dims, layer_of, plan_types, resolve_ftype, tensor_allows_quantization

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
) -> tuple[list[KV], list[QuantEntry]]:
    """llama-quantize's output layout for these input KVs and tensors.

    KVs keep their order (split keys dropped); ``general.quantization_version`` and
    ``general.file_type`` are removed and re-appended last, as gguf_set_val does in llama.cpp.
    Tensors come back in llama-quantize's processing order with their new types.

    Raises:
        QuantizationError: an input tensor is already quantized (without allow_requantize),
            or a type rule cannot be applied.
        GGUFFormatError: ``<arch>.block_count`` is not an unsigned 32-bit integer.
    """
    mix = resolve_ftype(ftype)
    if not allow_requantize:
        for name, shape, t in tensors:
            # only a tensor llama-quantize would quantize: an I64 d2t or an F32 norm is copied as is
            if t not in FLOAT_TYPES and tensor_allows_quantization(name, shape):
                raise QuantizationError(
                    f"{where}: tensor {name} is already {t.name}; quantizing it again loses precision twice "
                    "(pass --allow-requantize to do it anyway, or start from the F32/F16/BF16 GGUF)")
    kv_by = {kv.key: kv for kv in kvs}
    arch = kv_by.get("general.architecture")
    n_layer = None
    if arch is not None and isinstance(arch.value, str):
        # llama-quantize reads n_layer as a uint32 (llama_model_loader's get_key checks the type and
        # throws "wrong type"): any other integer type is a file it refuses, so we refuse it too
        key = f"{arch.value}.block_count"
        n_layer = get_int(kv_by, key, None, required=False, path=where)
        if n_layer is not None and kv_by[key].type != GGUFValueType.UINT32:
            raise bad_kv(where, kv_by[key], "a UINT32 (llama-quantize refuses any other type)")
    if n_layer is None:  # as llama.cpp parses names: sscanf("blk.%d."), -1 when it does not match
        n_layer = 1 + max((layer_of(n) for n, *_ in tensors), default=-1)
    src_types = {n: t for n, _s, t in tensors}
    choices = plan_types([(n, s, t) for n, s, t in tensors], mix, n_layer)
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
    out = [kv for kv in kvs if kv.key not in _SPLIT_KEYS + ("general.quantization_version", "general.file_type",
                                                          "general.architecture")]
    out.append(KV("general.quantization_version", 2, GGUFValueType.UINT32))
    out.append(KV("general.file_type", ftype_id(mix), GGUFValueType.UINT32))
    return out, entries
