"""Dense Qwen3 / Llama target with a static KV cache that also hands out the drafter's features.

Mirrors transformers 5.15 ``modeling_qwen3.py`` / ``modeling_llama.py`` (they differ only in
Qwen3's per-head ``q_norm``/``k_norm``, Qwen3's optional sliding layers and Llama's
``mlp_bias``). Attribute names are the Hugging Face names (``model.embed_tokens``,
``model.layers.N.self_attn.q_proj``, ``lm_head``) so checkpoints load with ``strict=True``.

Features: z-lab reads ``hidden_states[L + 1]`` for each tap L. ``hidden_states[0]`` is the
embedding output, so index L+1 is the output of decoder layer L — except for the last layer,
where transformers overwrites the entry with the *final-normed* state
(``capture_outputs(tie_last_hidden_states=True)``). ``Target.forward`` reproduces both.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import TargetConfig
from ..errors import ConfigError, TargetError
from .common import MLP, KVCache, RMSNorm, RopeSpec, RopeTable, apply_rope_rolled, attend, linear, visibility_mask

SUPPORTED_TARGETS = ("qwen3", "llama")


def check_taps(taps: tuple[int, ...], n_layers: int) -> None:
    """Raises TargetError when a drafter tap has no ``hidden_states[L+1]`` in a target of ``n_layers``."""
    bad = [t for t in taps if not 0 <= t < n_layers]
    if bad:
        raise TargetError(f"drafter taps target layers {bad} but the target has {n_layers} layers "
                          f"(valid 0..{n_layers - 1})")


@dataclass(frozen=True)
class TargetSpec:
    """The dense-decoder numbers, resolved once from a TargetConfig (``raw`` for what it lacks)."""

    arch: str  # "qwen3" | "llama"
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope: RopeSpec
    attention_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    layer_windows: tuple[int | None, ...]  # per layer: sliding window or None (full)

    @classmethod
    def from_config(cls, tc: TargetConfig) -> "TargetSpec":
        arch = tc.model_type
        if arch not in SUPPORTED_TARGETS:
            raise ConfigError(f"{tc.path}: model_type {arch!r} is not a supported reference target ({', '.join(SUPPORTED_TARGETS)})")
        if tc.hidden_act != "silu":
            raise ConfigError(f"{tc.path}: hidden_act={tc.hidden_act!r}; the reference target implements silu only")
        missing = [k for k in ("intermediate_size", "num_attention_heads", "rms_norm_eps") if getattr(tc, k) is None]
        if missing:
            raise ConfigError(f"{tc.path}: missing {', '.join(missing)}")
        windows: list[int | None] = [None] * tc.num_hidden_layers
        hf = tc.hf_attention
        if arch == "qwen3" and hf.sliding_window:
            # Qwen3Config: layer_types default to sliding from max_window_layers on.
            types = tc.layer_types or [
                "sliding_attention" if i >= hf.max_window_layers else "full_attention"
                for i in range(tc.num_hidden_layers)
            ]
            windows = [hf.sliding_window if t == "sliding_attention" else None for t in types]
        theta = tc.rope_theta if tc.rope_theta is not None else 10000.0  # transformers' default_theta
        head_dim = tc.head_dim or tc.hidden_size // tc.num_attention_heads
        return cls(
            arch=arch,
            hidden_size=tc.hidden_size,
            intermediate_size=tc.intermediate_size,
            num_hidden_layers=tc.num_hidden_layers,
            num_attention_heads=tc.num_attention_heads,
            num_key_value_heads=tc.num_key_value_heads or tc.num_attention_heads,
            head_dim=head_dim,
            vocab_size=tc.vocab_size,
            rms_norm_eps=tc.rms_norm_eps,
            rope=RopeSpec(head_dim, float(theta), tc.rope_scaling, tc.partial_rotary_factor,
                          tc.max_position_embeddings),
            attention_bias=tc.attention_bias,
            mlp_bias=tc.mlp_bias if arch == "llama" else False,
            tie_word_embeddings=tc.tie_word_embeddings,
            layer_windows=tuple(windows),
        )


class Attention(nn.Module):
    def __init__(self, s: TargetSpec, window: int | None):
        super().__init__()
        H, nh, nkv, D = s.hidden_size, s.num_attention_heads, s.num_key_value_heads, s.head_dim
        self.q_proj = nn.Linear(H, nh * D, bias=s.attention_bias)
        self.k_proj = nn.Linear(H, nkv * D, bias=s.attention_bias)
        self.v_proj = nn.Linear(H, nkv * D, bias=s.attention_bias)
        self.o_proj = nn.Linear(nh * D, H, bias=s.attention_bias)
        if s.arch == "qwen3":
            self.q_norm = RMSNorm(D, s.rms_norm_eps)
            self.k_norm = RMSNorm(D, s.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.head_dim, self.scale, self.window = D, D**-0.5, window

    def forward(self, x, cos, sin, cache: KVCache, layer: int, pos: int, plan):
        # x (L, H) at positions [pos, pos+L); cos/sin from RopeTable.rolled; plan: (mask, is_causal)
        L = x.shape[0]
        D = self.head_dim
        q = linear(x, self.q_proj).view(L, -1, D)
        k = linear(x, self.k_proj).view(L, -1, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope_rolled(q.transpose(0, 1)[None], cos, sin)  # (1, nh, L, D)
        k = apply_rope_rolled(k.transpose(0, 1)[None], cos, sin)  # (1, nkv, L, D)
        v = linear(x, self.v_proj).view(L, -1, D).transpose(0, 1)[None]  # (1, nkv, L, D)
        k, v = cache.write(layer, pos, k, v)  # (1, nkv, pos+L, D)
        mask, causal = plan
        return linear(attend(q, k, v, mask, self.scale, causal=causal)[0], self.o_proj)

    @staticmethod
    def plan(L: int, kv: int, window: int | None, device) -> tuple[torch.Tensor | None, bool]:
        """(mask, is_causal) for L queries over kv keys, as transformers picks them: the same for
        every layer with this window, so a forward builds it once per window."""
        if window is None and L == kv and L > 1:
            return None, True  # transformers skips the mask here and lets SDPA's is_causal do it (same kernel choice)
        if window is None and L == 1:
            return None, False
        return visibility_mask(L, kv, causal=True, window=window, device=device), False


class DecoderLayer(nn.Module):
    def __init__(self, s: TargetSpec, window: int | None):
        super().__init__()
        self.self_attn = Attention(s, window)
        self.mlp = MLP(s.hidden_size, s.intermediate_size, bias=s.mlp_bias)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)

    def forward(self, x, cos, sin, cache, layer, pos, plan):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, pos, plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """transformers' ``model.``: embeddings, layers, final norm."""

    def __init__(self, s: TargetSpec):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(s, w) for w in s.layer_windows)
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)


class Target(nn.Module):
    def __init__(self, spec: TargetSpec):
        super().__init__()
        self.spec = spec
        self.model = Backbone(spec)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)

    def new_cache(self, capacity: int) -> KVCache:
        p = self.lm_head.weight
        s = self.spec
        return KVCache(s.num_hidden_layers, s.num_key_value_heads, s.head_dim, capacity, p.dtype, p.device)

    def check_taps(self, taps: tuple[int, ...]) -> None:
        check_taps(taps, self.spec.num_hidden_layers)

    def forward(
        self,
        input_ids: torch.Tensor,  # (1, L) tokens at positions [cache.length, cache.length + L)
        rope: RopeTable,
        cache: KVCache,
        taps: tuple[int, ...] = (),
        features_out: torch.Tensor | None = None,  # (capacity, T·H): rows [pos, pos+L) get written
        logits_to_keep: int = 0,  # 0 = every position, n = the last n (transformers' meaning)
    ) -> torch.Tensor:
        """Append the tokens to the cache; return logits (1, L or n, V).

        ``features_out[pos + i]`` receives cat(hidden_states[L+1] for L in taps) of row i.
        """
        pos = cache.length
        L = input_ids.shape[1]
        cos, sin = rope.rolled(pos, pos + L)
        H = self.spec.hidden_size
        last = self.spec.num_hidden_layers - 1
        plans = {w: Attention.plan(L, pos + L, w, input_ids.device) for w in set(self.spec.layer_windows)}
        x = self.model.embed_tokens(input_ids[0])  # (L, H); batch 1 throughout
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, cache, i, pos, plans[layer.self_attn.window])
            if i != last:
                for slot, t in enumerate(taps):
                    if t == i:
                        features_out[pos:pos + L, slot * H:(slot + 1) * H] = x
        cache.length = pos + L
        x = self.model.norm(x)
        for slot, t in enumerate(taps):
            if t == last:  # transformers' hidden_states[-1] is the final-normed state
                features_out[pos:pos + L, slot * H:(slot + 1) * H] = x
        if logits_to_keep:
            x = x[-logits_to_keep:]
        return linear(x, self.lm_head)[None]

    @property
    def embed_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight

    @property
    def head_weight(self) -> torch.Tensor:
        return self.lm_head.weight
