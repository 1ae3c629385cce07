"""llama3 rope scaling's per-frequency factors (``rope_freqs.weight``), as mainline's converter
computes them; a generated tensor of the plan (``convert/plan.py``)."""
from __future__ import annotations

import math

from ..config import DrafterConfig


def llama3_rope_factors(cfg: DrafterConfig):
    """Per-frequency scaling factors for llama3 rope, as llama.cpp's LlamaModel computes them."""
    import numpy as np

    rs = cfg.rope_scaling
    dim = cfg.rope_dim
    freqs = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = rs.factor
    low, high = rs.llama3_freq_factors
    old = rs.original_context_length or 8192
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)

