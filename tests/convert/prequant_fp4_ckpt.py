"""NVFP4 test checkpoints built from the qwen3-flat fixture drafter: ModelOpt's layout (``modelopt``:
U8 codes, F8_E4M3 ``weight_scale`` per 16 values, F32 ``weight_scale_2`` and ``input_scale``
scalars, ``hf_quant_config.json``; FP8 layers of MIXED_PRECISION with a scalar ``weight_scale``),
written with safetensors; ``ct_nvfp4``: compressed by the real compressed-tensors package."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import torch as safetensors_torch

from tests.convert.prequant_ckpt import E4M3_MAX, SOURCE, _module_tree, source_state, write_checkpoint

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize_nvfp4(w: "torch.Tensor", unit_scale2: bool = False):
    """ModelOpt's NVFP4 recipe: a per-tensor scale2 = amax / (6 × 448), per 16 values an E4M3 scale =
    block amax / 6 / scale2, each value the nearest E2M1 code (sign in bit 3), two codes a byte
    (even element in the low nibble). ``unit_scale2``: scale2 fixed at 1.0 (mainline writes no
    ``.scale`` tensor then)."""
    w = w.float()
    rows, cols = w.shape
    scale2 = torch.tensor(1.0) if unit_scale2 else w.abs().amax() / (6 * E4M3_MAX)
    g = w.reshape(rows, cols // 16, 16)
    bs = (g.abs().amax(-1) / 6 / scale2).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    x = g / (bs.float() * scale2).clamp(min=1e-12)[..., None]
    idx = (x.abs()[..., None] - E2M1).abs().argmin(-1)
    code = (idx | ((x < 0).to(torch.int64) << 3)).to(torch.uint8).reshape(rows, cols)
    return code[:, 0::2] | (code[:, 1::2] << 4), bs, scale2.reshape(()).float()


def modelopt(dst: Path, *, algo: str = "NVFP4", layers: dict[str, str] | None = None, keep=(), in_config=True,
             in_file=True, unit_scales=(), intermediate=None, fc_input_scale: float = 1.0) -> Path:
    """qwen3-flat as ModelOpt exports it: 2-D weights NVFP4 but those in ``keep`` (left BF16);
    ``layers`` (module → "FP8" / "NVFP4" / "W4A16_NVFP4") makes a MIXED_PRECISION checkpoint, its
    FP8 modules F8_E4M3 with scalar scales, listed in hf_quant_config.json's quantized_layers;
    ``unit_scales``: modules whose scale2 and input_scale are 1.0 (not written by mainline);
    ``fc_input_scale``: fc's input scale, 1.0 by default (the DFlash loader reads no fc.input_scale)."""
    state = source_state(intermediate)
    out = {}
    for n, w in state.items():
        m = n.removesuffix(".weight")
        kind = (layers or {}).get(m, algo if algo.endswith("NVFP4") else "NVFP4")
        if w.ndim != 2 or n in keep:
            out[n] = w
        elif kind == "FP8":
            s = w.float().abs().amax() / E4M3_MAX
            out[n], out[m + ".weight_scale"] = (w.float() / s).to(torch.float8_e4m3fn), s.reshape(())
            out[m + ".input_scale"] = torch.tensor(0.25)
        else:
            unit = m in unit_scales
            out[n], out[m + ".weight_scale"], out[m + ".weight_scale_2"] = quantize_nvfp4(w, unit)
            if kind != "W4A16_NVFP4":
                out[m + ".input_scale"] = torch.tensor(1.0 if unit else fc_input_scale if m == "fc" else 0.5)
    quant = {"quant_algo": algo, "kv_cache_quant_algo": None, "group_size": 16, "exclude_modules": ["lm_head"]}
    if layers:
        quant["quantized_layers"] = {"model." + m: {"quant_algo": k, **({"group_size": 16} if "NVFP4" in k else {})}
                                     for m, k in layers.items()}
    qc = {"quant_method": "modelopt", "quant_algo": algo} if in_config else None
    write_checkpoint(dst, out, qc, **({"intermediate_size": intermediate} if intermediate else {}))
    if in_file:
        (dst / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt", "version": "0.29.0"},
                                                              "quantization": quant}, indent=2))
    return dst


def ct_nvfp4(dst: Path, preset: str = "NVFP4", fc_input_scale: float = 1.0) -> Path:
    """qwen3-flat compressed by the real compressed-tensors package with its ``NVFP4`` (weights and
    a static input global scale) or ``NVFP4A16`` preset: per-tensor global scales from the
    package's ``generate_gparam``, group scales from its ``calculate_qparams``, then
    ``ModelCompressor.compress_model`` (U8 ``weight_packed``, F8_E4M3 ``weight_scale``, F32
    ``weight_global_scale`` / ``input_global_scale``) and ``update_config``. fc's input global scale
    is ``fc_input_scale`` (1.0: no fc.input_scale, which the DFlash loader does not read), 3.0 elsewhere."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    model = _module_tree(safetensors_torch.load_file(str(SOURCE / "model.safetensors")))
    scheme = preset_name_to_scheme(preset, ["Linear"])
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}), show_progress=False)
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            a, w = m.quantization_scheme.weights, m.weight.data.float()
            gs = generate_gparam(w.amin(), w.amax())
            m.weight_global_scale.data.copy_(gs)
            r = w.reshape(w.shape[0], -1, a.group_size)
            scale, _ = calculate_qparams(r.amin(-1), r.amax(-1), a, global_scale=gs)
            m.weight_scale.data.copy_(scale)
            if hasattr(m, "input_global_scale"):  # what calibration would observe; any value will do
                m.input_global_scale.data.copy_(torch.tensor([fc_input_scale if name == "fc" else 3.0]))
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    write_checkpoint(dst, dict(model.state_dict()), None)
    compressor.update_config(str(dst))
    return dst
