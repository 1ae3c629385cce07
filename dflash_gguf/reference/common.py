"""Pieces shared by the reference drafter and target: RMSNorm, SwiGLU, RoPE, attention, KV cache.

Every formula mirrors transformers 5.15 (``modeling_rope_utils.ROPE_INIT_FUNCTIONS``,
``Qwen3RotaryEmbedding``, ``Qwen3RMSNorm``, ``integrations/sdpa_attention.py``) so that the
reference and z-lab's ``dflash`` 0.1.0 (which runs on those classes) agree to the last ulp
wherever the op order allows it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..config import RopeScaling
from ..errors import ConfigError

SUPPORTED_ROPE_TYPES = ("default", "linear", "yarn", "llama3")


class RMSNorm(nn.Module):
    """Normalise in float32, cast back, *then* scale: the cast before the weight is transformers' order."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if x.dtype is torch.float32 and w.dtype is torch.float32 and x.device.type == "cpu":
            # torch's CPU rms_norm runs these very ops in this order (pow, mean, + eps, rsqrt, ×, × weight)
            # in one dispatch: bit-equal in float32 (test_common pins it). Not for bf16 (it scales by the
            # weight before casting back) nor CUDA (a fused kernel of its own).
            return torch.rms_norm(x, w.shape, w, self.eps)
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, intermediate: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (L, H)
        return linear(F.silu(linear(x, self.gate_proj)) * linear(x, self.up_proj), self.down_proj)


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """``layer(x)`` for a 2-D ``x``: the very mm / addmm that ``F.linear`` reaches, without the
    module call and aten::linear's layers (t, matmul, reshape, _unsafe_view) — a third of the
    reference's per-token dispatches. Same kernel, same bits."""
    w, b = layer.weight, layer.bias
    return torch.mm(x, w.t()) if b is None else torch.addmm(b, x, w.t())


class KVCache:
    """Preallocated K/V for every layer; ``length`` is the committed prefix.

    Cropping is just moving ``length`` back: rejected rows are overwritten by the next write,
    so a whole generation runs without reallocating. ``window_start`` (default 0) hides the
    rows before it from attention: ``write`` returns rows [window_start, end) only, so a
    draft-context cap is a moving view, with every row still at its absolute position.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device):
        shape = (n_layers, 1, n_kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # one view per layer, made once: a write is then a narrow + copy, not a 4-index __setitem__
        self._k, self._v = self.k.unbind(0), self.v.unbind(0)
        self.capacity = capacity
        self.length = 0
        self.window_start = 0  # first row attention sees (a draft-context cap); 0 = all

    def write(self, layer: int, pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k/v (1, nkv, L, D) at [pos, pos+L) and return the rows [window_start, pos+L)."""
        end = pos + k.shape[2]
        if pos > self.length or end > self.capacity:
            raise IndexError(f"KV write [{pos}, {end}) outside the cache (length {self.length}, capacity {self.capacity})")
        if self.window_start >= end:
            raise IndexError(f"KV window starts at {self.window_start}, past the write's end {end}")
        kl, vl = self._k[layer], self._v[layer]
        kl.narrow(2, pos, end - pos).copy_(k)
        vl.narrow(2, pos, end - pos).copy_(v)
        w = self.window_start
        return kl.narrow(2, w, end - w), vl.narrow(2, w, end - w)

    def crop(self, length: int) -> None:
        self.length = length


@dataclass(frozen=True)
class RopeSpec:
    """What ``ROPE_INIT_FUNCTIONS`` needs: everything else about RoPE is the same for all types."""

    head_dim: int
    theta: float
    scaling: RopeScaling | None = None
    partial_rotary_factor: float | None = None
    max_position_embeddings: int | None = None
    # Dims RoPE rotates (vLLM's get_rope: the first int(head_dim * partial_rotary_factor)). None is
    # transformers' rule, which z-lab runs on: the whole head for default rope, whatever the factor.
    rotary_dim: int | None = None
    interleaved: bool = False  # GPT-J pairs (2i, 2i+1) share a frequency instead of NeoX halves (i, i + D/2)


def inv_freq(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """(inv_freq (R/2,) float32, attention_scaling) exactly as transformers computes them, R
    being ``spec.rotary_dim`` when given (vLLM's formulas are transformers' with R for D).

    Raises:
        ConfigError: a scaling type the reference does not implement, or partial rotary
            with a scaled rope under z-lab's rule (transformers would build cos/sin narrower
            than the heads and crash in ``apply_rotary_pos_emb``; the reference refuses instead).
    """
    kind = "default" if spec.scaling is None else spec.scaling.type
    if kind not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(f"rope type {kind!r} is not implemented by the reference (supported: {', '.join(SUPPORTED_ROPE_TYPES)})")
    base = spec.theta
    if spec.rotary_dim is not None:
        # vLLM's RotaryEmbedding: every formula below with the rotated slice's width as "dim"
        dim = spec.rotary_dim
        if not 0 < dim <= spec.head_dim or dim % 2:
            raise ConfigError(f"rotary dims {dim} must be even and within head_dim {spec.head_dim}")
    elif kind == "default":
        # transformers' default rope ignores partial_rotary_factor: it rotates the whole head.
        dim = spec.head_dim
    else:
        dim = int(spec.head_dim * (spec.partial_rotary_factor or 1.0))
    if kind == "default":
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0

    partial = spec.partial_rotary_factor or 1.0
    if spec.rotary_dim is None and dim != spec.head_dim:
        raise ConfigError(
            f"partial_rotary_factor={partial} with rope type {kind!r}: z-lab's reference cannot run this "
            "(cos/sin narrower than the heads); not supported"
        )
    p = spec.scaling.params
    factor = spec.scaling.factor
    if kind == "linear":
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        return inv / factor, 1.0

    orig = spec.scaling.original_context_length or spec.max_position_embeddings
    if orig is None:
        raise ConfigError(f"rope type {kind!r} needs original_max_position_embeddings")
    if kind == "llama3":
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        low, high = p["low_freq_factor"], p["high_freq_factor"]
        low_wavelen, high_wavelen = orig / low, orig / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0

    # yarn
    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        if p.get("mscale") and p.get("mscale_all_dim"):
            attention_factor = float(mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"]))
        else:
            attention_factor = mscale(factor)
    beta_fast = p.get("beta_fast") or 32
    beta_slow = p.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if spec.scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extra_factor = 1 - ramp
    return interpolation * (1 - extra_factor) + extrapolation * extra_factor, attention_factor


class RopeTable:
    """cos/sin for every position a generation can reach, computed once (no per-step work)."""

    def __init__(self, spec: RopeSpec, length: int, dtype: torch.dtype, device: torch.device):
        inv, scale = inv_freq(spec)
        positions = torch.arange(length, dtype=torch.float32)
        # An outer product of float32 scalars is exact, so slicing this table gives the same
        # bits as transformers' per-call ``inv_freq @ position_ids``.
        freqs = positions[:, None] * inv[None, :]  # (L, R/2)
        # NeoX: frequency i serves dims i and i + R/2; GPT-J: dims 2i and 2i + 1
        emb = freqs.repeat_interleave(2, dim=-1) if spec.interleaved else torch.cat((freqs, freqs), dim=-1)  # (L, R)
        self.cos = (emb.cos() * scale).to(device=device, dtype=dtype)
        self.sin = (emb.sin() * scale).to(device=device, dtype=dtype)

        # rotate_half(x) · sin = roll(x, R/2) · sin with sin's first half negated (a sign flip is
        # exact, so the product is the same bits): ``apply_rope_rolled``'s table, NeoX pairs only
        half = emb.shape[-1] // 2
        self.sin_rolled = torch.cat((-self.sin[:, :half], self.sin[:, half:]), dim=-1)

    def __call__(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[start:stop], self.sin[start:stop]  # (L, R) each, R = the rotated width

    def rolled(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and the signed sin ``apply_rope_rolled`` takes, (L, R) each."""
        return self.cos[start:stop], self.sin_rolled[start:stop]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, nh, L, D); cos/sin (L, D) for exactly those L positions."""
    return (x * cos) + (rotate_half(x) * sin)


def apply_rope_rolled(x: torch.Tensor, cos: torch.Tensor, sin_rolled: torch.Tensor) -> torch.Tensor:
    """``apply_rope`` bit for bit in four dispatches instead of seven; ``sin_rolled`` from
    ``RopeTable.rolled`` (full-head NeoX rotation)."""
    return (x * cos) + (x.roll(x.shape[-1] // 2, -1) * sin_rolled)


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """GPT-J's rotate_every_two: (x0, x1, x2, x3, …) -> (−x1, x0, −x3, x2, …)."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def apply_rope_slice(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """vLLM's RotaryEmbedding.forward_static: rotate x[..., :R] (R = cos width), pass the rest
    through. NeoX pairs dims i and i + R/2 *within the slice*; GPT-J pairs 2i and 2i + 1."""
    r = cos.shape[-1]
    rot = x[..., :r]
    rot = rot * cos + (rotate_pairs(rot) if interleaved else rotate_half(rot)) * sin
    return rot if r == x.shape[-1] else torch.cat((rot, x[..., r:]), dim=-1)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    B, nkv, L, D = x.shape
    return x[:, :, None].expand(B, nkv, n_rep, L, D).reshape(B, nkv * n_rep, L, D)


def attend(
    q: torch.Tensor,  # (B, nh, Lq, D)
    k: torch.Tensor,  # (B, nkv, Lk, D)
    v: torch.Tensor,  # (B, nkv, Lk, D)
    mask: torch.Tensor | None,  # (Lq, Lk) bool, True = visible
    scale: float,
    causal: bool = False,
) -> torch.Tensor:
    """SDPA as transformers' sdpa_attention_forward calls it -> (B, Lq, nh·D).

    GQA goes through ``enable_gqa`` only when there is no mask (transformers' rule; with a
    mask it repeats K/V), so both implementations hit the same SDPA kernels. On CPU the
    masked GQA kernel gives the repeated one's bits (test_common pins it), so there the K/V
    copies are skipped.
    """
    groups = q.shape[1] // k.shape[1]
    kwargs = {}
    if groups > 1:
        if (mask is None or q.device.type == "cpu") and k.shape[-1] <= 256:
            kwargs["enable_gqa"] = True
        else:
            k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else mask[None, None], scale=scale, is_causal=causal, **kwargs
    )
    B, nh, L, D = out.shape
    return out.transpose(1, 2).reshape(B, L, nh * D)


def attend_with_sinks(
    q: torch.Tensor,  # (B, nh, Lq, D)
    k: torch.Tensor,  # (B, nkv, Lk, D)
    v: torch.Tensor,  # (B, nkv, Lk, D)
    mask: torch.Tensor | None,  # (Lq, Lk) bool, True = visible
    scale: float,
    sinks: torch.Tensor,  # (nh,) one logit per query head
) -> torch.Tensor:
    """softmax over [q·k·scale …, sink_h] with the sink's column dropped afterwards -> (B, Lq, nh·D).

    The form vLLM hands its kernels (``Attention(sinks=…)``), llama.cpp's
    ``ggml_soft_max_add_sinks`` and mlx's ``scaled_dot_product_attention(sinks=…)`` all compute:
    the sink is a logit with no value, added unscaled to the scaled scores, so it only grows
    the denominator. Eager float32 softmax: SDPA has no sink argument.
    """
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale  # (B, nh, Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    sink = sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    out = (probs @ v.float()).to(q.dtype)
    B, nh, L, D = out.shape
    return out.transpose(1, 2).reshape(B, L, nh * D)


def visibility_mask(
    q_len: int, kv_len: int, *, causal: bool, window: int | None, device: torch.device
) -> torch.Tensor | None:
    """z-lab's ``_attention_mask``: query i sits at key index kv_len - q_len + i.

    Causal keeps key <= query; a sliding window keeps query - key < window, and when the layer
    is not causal also key - query < window (the window then looks both ways).
    Returns None when nothing is masked (a full, non-causal layer).
    """
    if not causal and window is None:
        return None
    qpos = kv_len - q_len + torch.arange(q_len, device=device)[:, None]
    kpos = torch.arange(kv_len, device=device)[None, :]
    visible = torch.ones((q_len, kv_len), dtype=torch.bool, device=device)
    if causal:
        visible &= kpos <= qpos
    if window is not None:
        visible &= qpos - kpos < window
        if not causal:
            visible &= kpos - qpos < window
    return visible

