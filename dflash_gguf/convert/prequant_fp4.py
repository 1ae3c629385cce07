"""NVFP4 checkpoints (ModelOpt ``NVFP4`` / ``W4A16_NVFP4`` / ``MIXED_PRECISION``, compressed-tensors
``nvfp4-pack-quantized``): each NVFP4 weight is repacked, bits moved and nothing rounded, into
ggml NVFP4 blocks, exactly as llama.cpp's converter does it (``conversion/base.py``:
``ModelBase.prepare_tensors``, ``_generate_nvfp4_tensors``, ``_repack_nvfp4``, ``_nvfp4_pack``,
``_write_scale_tensor``, ``_tag_prec_a4``); ModelOpt's FP8 layers are dequantized as its
``dequant_model`` modelopt branch does (``weight.float() * scale``, ``convert/prequant.py``).

What mainline writes for one NVFP4 weight ``X.weight``, before every other tensor:
``X.weight`` (NVFP4 blocks), then ``X.scale`` (weight_scale_2) and ``X.input_scale`` as F32
vectors, each only where it is not the trivial single 1.0. ``general.file_type`` becomes
MOSTLY_NVFP4; W4A16_NVFP4 weights are listed in ``general.tensor_extra.*`` with prec_a4 false.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from ..config.quantization import QuantizationConfig
from ..errors import UsageError, WeightsError
from ..fileio.gguf_constants import GGMLQuantizationType as Q
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.safetensors import SourceTensor, read_raw, to_f32
from ..fileio.types import KV

if TYPE_CHECKING:
    import numpy as np

MOSTLY_NVFP4 = 39  # llama_ftype of an NVFP4 conversion (mainline's prepare_metadata)
PREC_A4_NAMES, PREC_A4 = "general.tensor_extra.name", "general.tensor_extra.prec_a4"


@dataclass(frozen=True)
class Nvfp4:
    """One NVFP4 weight: E2M1 codes two a byte (even element in the low nibble), one E4M3 scale
    per 16 values, and the per-tensor scales written beside it."""

    weight: SourceTensor  # U8 [rows, cols / 2]: ModelOpt's X.weight, compressed-tensors' X.weight_packed
    scale: SourceTensor  # F8_E4M3 [rows, cols / 16]
    shape: tuple[int, int]  # [rows, cols]
    extras: tuple[tuple[str, "np.ndarray"], ...]  # (".scale" / ".input_scale", float32 values), non-trivial only
    a16: bool  # W4A16_NVFP4: activations stay 16-bit (prec_a4 false)
    nvfp4 = True  # (class attribute) what the plan, convert and compare-weights dispatch on
    fp8 = False  # --fp8-as-q8 leaves it alone
    block = None

    @property
    def stand_in(self) -> SourceTensor:
        """``X.weight`` with its real shape, the packed bytes behind it (compressed-tensors stores it as
        ``X.weight_packed``: mainline renames it, and the plan routes the stand-in)."""
        return replace(self.weight, name=self.weight.name.removesuffix("_packed"), shape=self.shape)


def split_nvfp4(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """The NVFP4 weights, as mainline's ``_generate_nvfp4_tensors`` finds them: every ``*.weight``
    with a ``*.weight_scale`` of 2+ dims (compressed-tensors names renamed first, its global scales
    inverted); k/v cache scales dropped. Returns (weights, consumed, stand-ins)."""
    _check_layers(q, by_name, where)
    ct = q.method == "compressed-tensors"
    view: dict[str, SourceTensor] = dict(by_name)
    inverted: set[str] = set()
    if ct:  # prepare_tensors: weight_packed -> weight, *_global_scale -> 1 / it under ModelOpt's names
        for n in by_name:
            for old, new in ((".weight_packed", ".weight"), (".weight_global_scale", ".weight_scale_2"),
                             (".input_global_scale", ".input_scale")):
                if n.endswith(old) and n.removesuffix(old) + new not in view:
                    view[n.removesuffix(old) + new] = view.pop(n)
                    if old != ".weight_packed":
                        inverted.add(n.removesuffix(old) + new)
    weights: dict[str, Nvfp4] = {}
    consumed: set[str] = set()
    for n in list(view):
        s = view.get(n.replace(".weight", ".weight_scale")) if n.endswith(".weight") else None
        if s is None or len(s.shape) < 2:  # not NVFP4 (ModelOpt FP8 layers have 0-D/1-D scales)
            continue
        parts = [n.replace(".weight", k) for k in (".weight_scale", ".weight_scale_2", ".input_scale")]
        extras = tuple((suffix, v) for suffix, p in zip((".scale", ".input_scale"), parts[1:]) if p in view
                       for v in [_scale_values(view[p], p in inverted)] if not _trivial(v))
        weights[n] = _nvfp4(view[n], s, extras, _algo(q, n) == "W4A16_NVFP4", where)
        consumed.update(view[p].name.removeprefix("model.") for p in parts if p in view)
    consumed.update(n for n in by_name if n.endswith((".k_scale", ".v_scale")))  # unused, mainline drops them
    # the stored codes are not a tensor of their own: the stand-in (same name for ModelOpt) replaces them
    consumed.update(t.weight.name.removeprefix("model.") for t in weights.values())
    return weights, consumed, {n: d.stand_in for n, d in weights.items()}


def _nvfp4(w: SourceTensor, s: SourceTensor, extras, a16: bool, where: str) -> Nvfp4:
    """Checks what ``_nvfp4_pack`` needs (else mainline fails in its reshapes)."""
    bad = None
    if w.dtype != "U8" or s.dtype not in ("F8_E4M3", "U8"):
        bad = (f"{w.name} is {w.dtype} with scale {s.name} {s.dtype}; an NVFP4 weight is U8 (two 4-bit codes a "
               "byte) with F8_E4M3 scales")
    elif len(w.shape) != 2 or len(s.shape) != 2 or s.shape[0] != w.shape[0] or w.shape[1] != 8 * s.shape[1]:
        bad = (f"{w.name} {list(w.shape)} with scale {s.name} {list(s.shape)} is not [rows, cols / 2] codes with "
               "[rows, cols / 16] scales")
    elif s.shape[1] % 4:
        bad = (f"{w.name} has rows of {16 * s.shape[1]} values, not whole 64-value NVFP4 blocks (llama.cpp's "
               "converter fails on it too)")
    if bad:
        raise WeightsError(f"{where}: {bad}; the checkpoint does not match its quantization_config")
    return Nvfp4(w, s, (w.shape[0], 16 * s.shape[1]), extras, a16)


def _scale_values(t: SourceTensor, inverse: bool) -> np.ndarray:
    """``scale.float().numpy().flatten()``; compressed-tensors' global scale is its reciprocal
    (mainline's ``1.0 / scale``, in float32)."""
    import numpy as np

    v = np.asarray(to_f32(t, read_raw(t)), dtype=np.float32).reshape(-1)
    return np.divide(np.float32(1.0), v, dtype=np.float32) if inverse else v


def _trivial(v: np.ndarray) -> bool:
    """``_scale_is_trivial``: one value within 1e-6 of 1 is not written."""
    return v.size <= 1 and abs(float(v.sum()) - 1.0) < 1e-6


def _algo(q: QuantizationConfig, name: str) -> str | None:
    """``_tag_prec_a4``'s lookup: the nearest enclosing module's quant_algo, else the global one."""
    algos = {k.removeprefix("model."): a for k, a in q.layer_algos}
    n = name.removesuffix(".weight").removesuffix(".bias")
    while n:
        if n in algos:
            return algos[n]
        n = n.rpartition(".")[0]
    return q.quant_algo


def _check_layers(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str) -> None:
    """prepare_tensors asserts every quantized_layers entry is a module of the checkpoint."""
    modules = {n.rsplit(".", k)[0] for n in by_name for k in range(1, n.count(".") + 1)}
    for k, _ in q.layer_algos:
        if k.removeprefix("model.") not in modules:
            raise WeightsError(f"{q.where}: quantized_layers entry {k!r} is not a module of the checkpoint in {where}; "
                               "llama.cpp's converter fails on it too (an assertion). Fix or remove the entry")


def repack(d: Nvfp4) -> np.ndarray:
    """``_nvfp4_pack``: per 64 values, the 4 scale bytes (E4M3 less its sign bit, UE4M3) then 32
    bytes whose byte j of sub-block b holds element j (low nibble) and j + 8 (high nibble) of
    those 16. uint8 [rows, cols / 64 * 36]; the codes themselves are not changed."""
    import numpy as np

    rows, cols = d.shape
    nb = cols // 16
    w = read_raw(d.weight).view(np.uint8).reshape(rows, nb, 8)
    vals = np.stack([w & 0x0F, w >> 4], axis=-1).reshape(rows, nb, 16)
    d_ue = read_raw(d.scale).view(np.uint8).reshape(rows, nb) & 0x7F
    qs = (vals[:, :, :8] | (vals[:, :, 8:] << 4)).astype(np.uint8)
    ns = nb // 4
    return np.concatenate([d_ue.reshape(rows, ns, 4), qs.reshape(rows, ns, 32)], axis=-1).reshape(rows, ns * 36)


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_nvfp4(d: Nvfp4) -> np.ndarray:
    """The weight's float32 values as the GGUF and its runtime give them (convert writes none of
    these: it repacks): code value × E4M3 block scale × scale2 (the ``.scale`` tensor; 1 where
    mainline writes none). For the reference model (``reference/load.py``)."""
    import numpy as np

    rows, cols = d.shape
    codes = read_raw(d.weight).view(np.uint8).reshape(rows, cols // 2)
    vals = np.asarray(E2M1, dtype=np.float32)[np.stack([codes & 0x0F, codes >> 4], axis=-1)]
    s = to_f32(d.scale, read_raw(d.scale)) if d.scale.dtype != "U8" else None
    if s is None:  # U8-typed E4M3 bytes
        from ..fileio.safetensors import fp8_table

        s = fp8_table("F8_E4M3")[read_raw(d.scale).view(np.uint8)]
    s = np.abs(s.reshape(rows, cols // 16))  # mainline keeps the E4M3 bits less the sign (UE4M3)
    out = np.multiply(vals.reshape(rows, cols // 16, 16), s[..., None], dtype=np.float32).reshape(rows, cols)
    scale2 = dict(d.extras).get(".scale")
    return out if scale2 is None else np.multiply(out, scale2.reshape(-1)[0] if scale2.size == 1 else scale2,
                                                  dtype=np.float32)


def place_nvfp4(plans: list, written: list[str], routes, fmt_name: str, quant: bool):
    """The plan's NVFP4 part, as ``prepare_tensors`` writes it: (NVFP4 weights each followed by its
    scale tensors, the other plans, the scale tensors' data, the prec_a4 KVs).

    Raises:
        UsageError: NVFP4 with a format other than llama.cpp, or a llama-quantize outtype.
        WeightsError: an NVFP4 Q/K weight of an interleaved-rope checkpoint (mainline's repack skips
            the NeoX permutation its other weights get: it would write a wrong model); an NVFP4 fc
            with an input scale (mainline writes a tensor its loader rejects).
    """
    import numpy as np

    front, rest, data, a16 = [], [], {}, []
    for p, n in zip(plans, written):
        d = routes.dequant(n)
        if not getattr(d, "nvfp4", False):
            rest.append(p)
            continue
        if p.transform is not None:
            raise WeightsError(f"{p.src}: an NVFP4 weight of a rope_is_neox_style false checkpoint; llama.cpp's "
                               "converter writes it without the NeoX row permutation (a wrong model), dflash-gguf "
                               "refuses it. Give a BF16/F16/F32 checkpoint")
        if p.dst == "fc.weight" and any(k == ".input_scale" for k, _ in d.extras):
            # models/dflash.cpp reads fc.scale but no fc.input_scale: mainline's file has a tensor too many
            raise WeightsError(f"{p.src}: an NVFP4 fc with an input scale; llama.cpp's converter writes it as "
                               "fc.input_scale, which llama.cpp's DFlash loader does not read, so the file fails to "
                               "load ('wrong number of tensors'). dflash-gguf refuses it; a checkpoint with fc left "
                               "unquantized (or weight-only NVFP4) converts")
        front.append(p)
        for suffix, v in d.extras:
            dst = p.dst.replace(".weight", suffix)
            data[dst] = np.asarray(v, dtype=np.float32)
            front.append(replace(p, src=None, dst=dst, shape=(v.size,), src_dtype="F32", ggml_type=Q.F32,
                                 nbytes=4 * v.size, reason=f"per-tensor scale of the NVFP4 {p.dst}", transform=None))
        if d.a16:
            a16.append(p.dst)
    if front and fmt_name != "llama.cpp":
        raise UsageError(f"NVFP4 weights (and their .scale tensors) load only in mainline llama.cpp; use --format "
                         f"llama.cpp instead of --format {fmt_name}, or give a BF16/F16/F32 checkpoint")
    if front and quant:
        raise UsageError("a checkpoint with NVFP4 weights converts with --outtype auto, f32, f16 or bf16 (its NVFP4 "
                         "weights are kept as NVFP4); dflash-gguf does not re-quantize it to a llama-quantize type")
    kvs = [KV(PREC_A4_NAMES, sorted(a16), T.ARRAY, T.STRING), KV(PREC_A4, [False] * len(a16), T.ARRAY, T.BOOL)]
    return front, rest, data, kvs if a16 else []
