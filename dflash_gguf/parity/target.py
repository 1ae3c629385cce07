"""The target as parity runs it: loaded from a Hugging Face dir or a GGUF (or through
transformers), its stop ids, and optionally its weights round-tripped through our quantizers
(--target-quant)."""
from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .options import ParityOptions


def load_target(target: str | Path, opts: ParityOptions):
    from .. import reference as ref

    p = Path(target)
    if opts.target_backend not in ("native", "transformers"):
        raise UsageError(f"--target-backend {opts.target_backend!r}: choose native or transformers")
    if opts.target_backend == "transformers":
        # targets we do not implement (Gemma-4, Qwen3.5 hybrids): hidden states via output_hidden_states
        from ..reference.hf_target import load_hf_target

        if not p.is_dir():
            raise UsageError(f"--target-backend transformers: {target} must be a Hugging Face directory")
        model = load_hf_target(p, dtype=opts.dtype, device=opts.device, device_map=opts.device_map)
    elif p.is_file():
        model = ref.target_from_gguf(p, dtype=opts.dtype, device=opts.device)
    elif p.is_dir():
        model = ref.load_target(p, dtype=opts.dtype, device=opts.device)
    else:
        raise UsageError(f"--target {target}: not a Hugging Face dir or a GGUF file")
    if opts.target_quant:
        quantize_target_weights(model, opts.target_quant)
    return model


def target_stop_ids(target: str | Path) -> tuple[int, ...]:
    p = Path(target)
    ids: list[int] = []
    if p.is_dir():
        from ..config import load_target_config

        eos = load_target_config(p).eos_token_id
        ids = list(eos) if isinstance(eos, tuple) else ([] if eos is None else [int(eos)])
    else:
        from ..fileio.gguf_reader import read_gguf

        kv = read_gguf(p).kvs.get("tokenizer.ggml.eos_token_id")
        ids = [] if kv is None else [int(kv.value)]
    return tuple(ids)


def quantize_target_weights(target, qtype: str) -> list[tuple[str, str]]:
    """Round-trip the target's matrices through our bit-exact quantizers, with llama-quantize's
    per-tensor plan for the mix (the embedding and head included). Returns (name, type) pairs."""
    import numpy as np
    import torch

    from ..formats.names import target_gguf_name
    from ..quants import dequantize, quantize
    from ..quants.policy import plan_types

    params = dict(target.named_parameters())
    names: dict[str, str] = {}  # GGUF name -> parameter name
    for hf, p in params.items():
        g = target_gguf_name(hf) if p.dim() == 2 else None
        if g is not None:
            names[g] = hf
    if target.spec.tie_word_embeddings:
        names.pop("output.weight", None)  # tied: one tensor, planned as token_embd (llama-quantize's rule)
    plan = plan_types([(g, tuple(params[hf].shape)) for g, hf in names.items()], qtype, target.spec.num_hidden_layers)
    done = []
    with torch.no_grad():
        for c in plan:
            if not c.quantized:
                continue
            p = params[names[c.name]]
            x = p.detach().float().cpu().numpy()
            y = dequantize(quantize(np.ascontiguousarray(x), c.ggml_type, name=names[c.name]), c.ggml_type, x.shape)
            p.copy_(torch.from_numpy(y).to(p.dtype))
            done.append((names[c.name], c.ggml_type.name))
    return done
