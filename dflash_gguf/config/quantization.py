"""``quantization_config``: how a pre-quantized checkpoint stores its weights.

Read the way llama.cpp's converter reads it (``conversion/base.py``: ``ModelBase.dequant_model``
and ``prepare_tensors``): the ``quantization_config`` object of config.json when it is a
non-empty object, else ModelOpt's ``hf_quant_config.json`` beside it (its producer names the
method). Only parsed here; what convert does with each method is ``convert/prequant.py``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError

MODELOPT_FILE = "hf_quant_config.json"


@dataclass(frozen=True)
class QuantizationConfig:
    method: str  # quant_method ("fp8", "compressed-tensors", "modelopt", ...); "" when not given
    where: str  # where it was read: "config.json quantization_config" or the ModelOpt file
    format: str | None = None  # compressed-tensors: "float-quantized", "pack-quantized", ...; gptq: "gptq"/"gptq_v2"
    block_size: tuple[int, ...] | None = None  # fp8 weight_block_size / compressed-tensors block_structure
    strategy: str | None = None  # compressed-tensors weights.strategy: "channel", "block", "group", ...
    weight_type: str | None = None  # compressed-tensors weights.type: "float" or "int"
    num_bits: int | None = None
    group_size: int | None = None
    n_groups: int = 0  # compressed-tensors config_groups
    quant_algo: str | None = None  # ModelOpt: "NVFP4", "FP8", "MIXED_PRECISION", "W4A16_NVFP4"
    # ModelOpt quantized_layers: (module path, its quant_algo), for MIXED_PRECISION checkpoints
    layer_algos: tuple[tuple[str, str | None], ...] = ()
    # mainline's ``_is_nvfp4``: weights with 2-D scales are NVFP4, repacked to ggml blocks
    nvfp4: bool = False

    @property
    def fp8_weights(self) -> bool:
        """Whether the quantized weights are FP8 (what mainline's ``--fp8-as-q8`` applies to)."""
        if self.method == "fp8":
            return True
        return (self.method == "compressed-tensors" and self.format == "float-quantized"
                and self.weight_type == "float" and self.num_bits == 8)


def parse_quantization(raw: dict[str, Any], cfg_path: Path) -> QuantizationConfig | None:
    """The checkpoint's quantization, or None for a plain float checkpoint.

    Raises:
        ConfigError: a field mainline reads has the wrong type (a block size that is not a list
            of positive integers, config_groups that is not an object).
    """
    qc = raw.get("quantization_config")
    modelopt = cfg_path.parent / MODELOPT_FILE
    if not (isinstance(qc, dict) and qc):
        if not modelopt.is_file():
            return None
        return _with_nvfp4(_modelopt_file(modelopt), {}, modelopt)
    where = f"{cfg_path}: quantization_config"
    method = qc.get("quant_method")
    method = method if isinstance(method, str) else ("" if method is None else str(method))
    if method == "fp8":
        return QuantizationConfig(method, where, block_size=_block(qc.get("weight_block_size"), where,
                                                                    "weight_block_size"))
    if method == "gptq":  # format: checkpoint_format ("gptq": zero points stored less one, "gptq_v2")
        fmt, bits = qc.get("checkpoint_format", "gptq"), qc.get("bits")
        return QuantizationConfig(method, where, format=fmt if isinstance(fmt, str) else None,
                                  num_bits=bits if isinstance(bits, int) and not isinstance(bits, bool) else None,
                                  group_size=qc.get("group_size"))
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        if not isinstance(groups, dict):
            raise ConfigError(f"{where}.config_groups must be an object of quantization groups, got {groups!r:.80}")
        first = next(iter(groups.values()), None)
        weights = first.get("weights") if isinstance(first, dict) else None
        weights = weights if isinstance(weights, dict) else {}
        fmt = qc.get("format")
        q = QuantizationConfig(
            method, where, format=fmt if isinstance(fmt, str) else None,
            block_size=_block(weights.get("block_structure"), where, "config_groups.*.weights.block_structure"),
            strategy=weights.get("strategy"), weight_type=weights.get("type"), num_bits=weights.get("num_bits"),
            group_size=weights.get("group_size"), n_groups=len(groups))
        return _with_nvfp4(q, qc, modelopt)
    algo = qc.get("quant_algo")
    return _with_nvfp4(QuantizationConfig(method, where, quant_algo=algo if isinstance(algo, str) else None),
                       qc, modelopt)


def _with_nvfp4(q: QuantizationConfig, qc: dict[str, Any], modelopt: Path) -> QuantizationConfig:
    """``q`` with ModelOpt's per-layer algorithms and mainline's NVFP4 decision, read as its
    ``prepare_tensors`` reads them: config.json's quant_algo / quantized_layers, overridden by
    hf_quant_config.json's ``quantization`` when config.json lacks either; compressed-tensors
    ``nvfp4-pack-quantized`` (or ``mixed-precision`` of only such groups) is NVFP4 too."""
    algo, layers = qc.get("quant_algo"), qc.get("quantized_layers") or {}
    fmt, groups = qc.get("format"), qc.get("config_groups") or {}
    if (not algo or not layers) and modelopt.is_file():
        doc = _read(modelopt)
        quant = doc.get("quantization") if isinstance(doc.get("quantization"), dict) else {}
        algo, fmt = quant.get("quant_algo", algo), quant.get("format", fmt)
        groups = quant.get("config_groups", groups) or {}
        layers = quant.get("quantized_layers", layers) or {}
    layers = layers if isinstance(layers, dict) else {}
    groups = groups if isinstance(groups, dict) else {}
    ct_nvfp4 = q.method == "compressed-tensors" and (
        fmt == "nvfp4-pack-quantized" or fmt == "mixed-precision" and bool(groups)
        and all(g.get("format") == "nvfp4-pack-quantized" for g in groups.values() if isinstance(g, dict)))
    layer_algos = tuple((str(k), v.get("quant_algo")) for k, v in layers.items() if isinstance(v, dict))
    nvfp4 = algo in ("NVFP4", "W4A16_NVFP4") or ct_nvfp4 or any(str(a).endswith("NVFP4") for _, a in layer_algos)
    return replace(q, quant_algo=algo if isinstance(algo, str) else None, layer_algos=layer_algos, nvfp4=nvfp4)


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc}); re-download it") from None
    return doc if isinstance(doc, dict) else {}


def _modelopt_file(path: Path) -> QuantizationConfig:
    doc = _read(path)
    quant = doc.get("quantization") if isinstance(doc.get("quantization"), dict) else {}
    producer = doc.get("producer") if isinstance(doc.get("producer"), dict) else {}
    method = quant.get("quant_method") or str(producer.get("name") or "").lower()
    algo = quant.get("quant_algo")
    return QuantizationConfig(str(method), str(path), quant_algo=algo if isinstance(algo, str) else None)


def _block(value: Any, where: str, key: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ConfigError(f"{where}.{key} = {value!r:.80} is not a list of positive block sizes; fix config.json")
    return tuple(value)
