"""DFlash block-diffusion drafter (DFlash1 and DFlash2), top to bottom.

Mirrors ``dflash/model.py`` of z-lab's PyPI ``dflash`` 0.1.0 (``DFlashDraftModel``,
``DFlash2DraftModel``, ``Qwen3DFlashAttention``, ``GroupedDynamicCausalConv``,
``CandidateSelector``), which builds on transformers 5.15's Qwen3 modules. Module attributes
use the checkpoint's own tensor names, so ``load_state_dict(strict=True)`` is the name check.

One draft call: the target's features of the newly committed positions (``target_hidden``,
the concatenated outputs of the tapped target layers) go through ``fc`` → ``hidden_norm`` and
become extra keys/values in every layer; the queries are the block [last token, MASK × (B−1)]
embedded with the *target's* embedding table. The block's K/V are thrown away after the call
(the loop crops the cache back to the committed prefix), so the cache only ever holds context.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..config import DrafterConfig
from .common import MLP, KVCache, RMSNorm, RopeSpec, RopeTable, apply_rope, attend, visibility_mask, yarn_truncate


def layer_rules(cfg: DrafterConfig) -> list[tuple[bool, int | None]]:
    """(is_causal, sliding_window) per layer, as z-lab's reference reads them.

    z-lab takes these from transformers' ``Qwen3Config``: ``sliding_window`` only counts when
    ``use_sliding_window`` is true, missing ``layer_types`` are derived from
    ``max_window_layers`` (default 28), and only top-level ``is_causal`` overrides the per-layer
    rule (sliding layers causal, full layers not). The vLLM-only spellings that DrafterConfig
    also honours (``dflash_config.use_swa``/``swa_window_size``/``causal``) are ignored here.
    """
    raw = cfg.raw
    window = raw.get("sliding_window") if raw.get("use_sliding_window", False) else None
    types = raw.get("layer_types")
    if types is None:
        first = raw.get("max_window_layers", 28)
        types = ["sliding_attention" if window is not None and i >= first else "full_attention"
                 for i in range(cfg.num_hidden_layers)]
    forced = raw.get("is_causal")
    rules = []
    for t in types:
        sliding = t == "sliding_attention"
        rules.append((sliding if forced is None else bool(forced), window if sliding else None))
    return rules


def rope_spec(cfg: DrafterConfig) -> RopeSpec:
    return RopeSpec(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, cfg.partial_rotary_factor,
                    cfg.max_position_embeddings, yarn_truncate(cfg.raw))


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig, causal: bool, window: int | None):
        super().__init__()
        H, nh, nkv, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(H, nh * D, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(H, nkv * D, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(H, nkv * D, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(nh * D, H, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.head_dim = D
        self.scale = D**-0.5
        self.causal, self.window = causal, window

    def forward(self, x, ctx, cos, sin, cache: KVCache, layer: int, pos: int):
        # x (1, q, H) the block; ctx (1, c, H) fc+hidden_norm features; cos/sin (c+q, D)
        B, q, _ = x.shape
        c = ctx.shape[1]
        D = self.head_dim
        Q = self.q_norm(self.q_proj(x).view(B, q, -1, D)).transpose(1, 2)  # (1, nh, q, D)
        # Context and block share k_proj/v_proj; the context rows are the "target" half of the keys.
        K = torch.cat([self.k_proj(ctx), self.k_proj(x)], dim=1).view(B, c + q, -1, D)
        V = torch.cat([self.v_proj(ctx), self.v_proj(x)], dim=1).view(B, c + q, -1, D)
        K = self.k_norm(K).transpose(1, 2)  # (1, nkv, c+q, D)
        V = V.transpose(1, 2)  # (1, nkv, c+q, D)
        Q = apply_rope(Q, cos[-q:], sin[-q:])  # queries only sit at the block's positions
        K = apply_rope(K, cos, sin)
        K, V = cache.write(layer, pos, K, V)  # (1, nkv, pos+c+q, D): every committed position
        mask = visibility_mask(q, K.shape[2], causal=self.causal, window=self.window, device=x.device)
        return self.o_proj(attend(Q, K, V, mask, self.scale))  # (1, q, H)


class DynamicConv(nn.Module):
    """DFlash2's ``GroupedDynamicCausalConv``: a per-position kernel (static base + a
    projection of the input, one coefficient per channel group) convolved causally along the
    block. Side 0 is applied before the sublayer (``prepare``), side 1 after it (``finish``)."""

    def __init__(self, hidden: int, kernel_size: int, group_size: int):
        super().__init__()
        self.kernel_size, self.group_size = kernel_size, group_size
        self.base_kernel = nn.Parameter(torch.empty(2, kernel_size, hidden))  # [side, tap, H]
        self.kernel_projection = nn.Linear(hidden, 2 * kernel_size * (hidden // group_size), bias=False)

    def convolve(self, x, dynamic, base):
        # x (B, L, H); dynamic (B, L, k, G); base (k, H); z-lab's op order, kept for bitwise parity
        B, L, H = x.shape
        G = H // self.group_size
        blocks = x.view(B, L, G, self.group_size)
        dynamic = dynamic.view(B, L, base.shape[0], G, 1)
        out = torch.zeros_like(blocks)
        for offset in range(base.shape[0]):
            # Shift by `offset` along the block, zero-filled: position p sees p, p-1, ... only.
            shifted = blocks if offset == 0 else F.pad(blocks[:, :-offset], (0, 0, 0, 0, offset, 0))
            out = out + base[offset].view(1, 1, G, self.group_size).to(x.dtype) * shifted
            out = torch.addcmul(out, dynamic[:, :, offset], shifted)
        return out.view_as(x)

    def prepare(self, x):
        G = x.shape[-1] // self.group_size
        dynamic = self.kernel_projection(x).view(*x.shape[:-1], 2, self.kernel_size, G)  # (B, L, 2, k, G)
        return self.convolve(x, dynamic[..., 0, :, :], self.base_kernel[0]), dynamic[..., 1, :, :]

    def finish(self, x, dynamic):
        return self.convolve(x, dynamic, self.base_kernel[1])


class DecoderLayer(nn.Module):
    """Pre-norm attention + residual, pre-norm SwiGLU + residual; the norms see the block only."""

    def __init__(self, cfg: DrafterConfig, causal: bool, window: int | None):
        super().__init__()
        self.self_attn = Attention(cfg, causal, window)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.is_dflash2:
            self.attention_conv = DynamicConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
            self.mlp_conv = DynamicConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
        else:
            self.attention_conv = self.mlp_conv = None

    def forward(self, x, ctx, cos, sin, cache, layer, pos):
        h = self.input_layernorm(x)
        if self.attention_conv is not None:
            h, kernel = self.attention_conv.prepare(h)
        h = self.self_attn(h, ctx, cos, sin, cache, layer, pos)
        if self.attention_conv is not None:
            h = self.attention_conv.finish(h, kernel)
        x = x + h
        h = self.post_attention_layernorm(x)
        if self.mlp_conv is not None:
            h, kernel = self.mlp_conv.prepare(h)
        h = self.mlp(h)
        if self.mlp_conv is not None:
            h = self.mlp_conv.finish(h, kernel)
        return x + h


class CandidateSelector(nn.Module):
    """DFlash2: re-ranks each slot's top-k tokens left to right with a low-rank bigram score
    <pred[prev] ⊙ W h_p, succ[c]> so consecutive drafted tokens fit together."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.top_k = cfg.selector_top_k
        # Stored on disk without a ".weight" suffix, so they are bare parameters here.
        self.predecessor_codebook = nn.Parameter(torch.empty(cfg.vocab_size, cfg.selector_rank))
        self.successor_codebook = nn.Parameter(torch.empty(cfg.vocab_size, cfg.selector_rank))
        self.hidden_projection = nn.Linear(cfg.hidden_size, cfg.selector_rank, bias=False)

    def select(self, hidden, logits, anchor, temperature, generator=None):
        """hidden (1, P, H), logits (1, P, V), anchor (1,) -> (tokens (1, P), candidates (1, P, K), q (1, P, K) | None)."""
        from .sampling import sample_probs, sampling_probs

        unary, candidates = torch.topk(logits, self.top_k, dim=-1, sorted=False)  # (1, P, K)
        hidden = self.hidden_projection(hidden)  # (1, P, R)
        prev = anchor
        path, q_rows = [], []
        for p in range(hidden.shape[1]):
            scores = unary[:, p] + torch.einsum(
                "br,bkr->bk",
                F.embedding(prev, self.predecessor_codebook) * hidden[:, p],
                F.embedding(candidates[:, p], self.successor_codebook),
            )  # (1, K)
            if temperature > 0:
                q = sampling_probs(scores[:, None], temperature)[:, 0]
                index = sample_probs(q, generator)
                q_rows.append(q)
            else:
                index = torch.argmax(scores, dim=-1)
            prev = candidates[:, p].gather(-1, index[:, None])[:, 0]
            path.append(prev)
        return torch.stack(path, dim=1), candidates, torch.stack(q_rows, dim=1) if q_rows else None


class DFlashDrafter(nn.Module):
    """The drafter: ``forward`` gives the final-normed hidden states of the block,
    ``compute_logits`` turns them into logits through the target's head."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg, c, w) for c, w in layer_rules(cfg))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        feature_width = cfg.n_taps * (cfg.target_hidden_size or cfg.hidden_size)
        self.fc = nn.Linear(feature_width, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.is_dflash2:
            self.candidate_selector = CandidateSelector(cfg)

    @property
    def block_size(self) -> int:
        return self.cfg.block_size

    @property
    def mask_token_id(self) -> int:
        return self.cfg.mask_token_id

    @property
    def target_layer_ids(self) -> tuple[int, ...]:
        return self.cfg.target_layer_ids

    @property
    def rope_spec(self) -> RopeSpec:
        return rope_spec(self.cfg)

    def new_cache(self, capacity: int) -> KVCache:
        p = self.fc.weight
        return KVCache(len(self.layers), self.cfg.num_key_value_heads, self.cfg.head_dim, capacity, p.dtype, p.device)

    def embed(self, block_ids: torch.Tensor, embed_weight: torch.Tensor) -> torch.Tensor:
        """The block's input: raw target embedding rows (no target-side scaling) × input_embedding_scale."""
        scale = self.cfg.input_embedding_scale
        return F.embedding(block_ids, embed_weight) * (1.0 if scale is None else float(scale))

    def forward(
        self,
        noise_embedding: torch.Tensor,  # (1, q, H) the embedded block
        target_hidden: torch.Tensor,  # (1, c, T·Ht) features of the positions committed since the last call
        rope: RopeTable,
        cache: KVCache,
    ) -> torch.Tensor:
        """Run the block at positions [cache.length + c, +q); returns (1, q, H) final-normed.

        The context rows land at [cache.length, cache.length + c) and stay; the block rows are
        written after them and dropped by the caller's ``cache.crop``.
        """
        pos = cache.length
        c, q = target_hidden.shape[1], noise_embedding.shape[1]
        ctx = self.hidden_norm(self.fc(target_hidden))  # (1, c, H)
        cos, sin = rope(pos, pos + c + q)
        x = noise_embedding
        for i, layer in enumerate(self.layers):
            x = layer(x, ctx, cos, sin, cache, i, pos)
        cache.length = pos + c + q
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        """Target head × output_multiplier, then tanh softcap: the drafter copies the target's output transform."""
        logits = F.linear(hidden, head_weight)
        mult = self.cfg.output_multiplier
        logits = logits * (1.0 if mult is None else float(mult))
        cap = self.cfg.final_logit_softcapping
        if cap is not None and cap > 0:
            logits = torch.tanh(logits / cap) * cap
        return logits
