"""DFlash block-diffusion drafter (DFlash1, DFlash2 and the DSpark backbone), top to bottom.

Mirrors ``dflash/model.py`` of z-lab's PyPI ``dflash`` 0.1.0 (``DFlashDraftModel``,
``DFlash2DraftModel``, ``Qwen3DFlashAttention``, ``GroupedDynamicCausalConv``,
``CandidateSelector``), which builds on transformers 5.15's Qwen3 modules. Module attributes
use the checkpoint's own tensor names, so ``load_state_dict(strict=True)`` is the name check.

One draft call: the target's features of the newly committed positions (``target_hidden``,
the concatenated outputs of the tapped target layers) go through ``fc`` → ``hidden_norm`` and
become extra keys/values in every layer; the queries are the block [last token, MASK × (B−1)]
embedded with the *target's* embedding table. The block's K/V are thrown away after the call
(the loop crops the cache back to the committed prefix), so the cache only ever holds context.

Attention details that differ between published references (sinks, value scale, partial or
interleaved RoPE, which layers slide or are causal) come from ``rules``; DSpark's heads from
``dspark``.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..config import DrafterConfig
from .common import (MLP, KVCache, RMSNorm, RopeSpec, RopeTable, apply_rope_rolled, apply_rope_slice, attend,
                     attend_with_sinks, linear, visibility_mask)
from .dspark import ConfidenceHead, DSparkLayout, MarkovHead, layout_from_config
from .rules import AttentionRules, attention_rules


def layer_rules(cfg: DrafterConfig) -> list[tuple[bool, int | None]]:
    """(is_causal, sliding_window) per layer under the drafter's rules (see ``rules``)."""
    return list(attention_rules(cfg).layers)


def rope_spec(cfg: DrafterConfig) -> RopeSpec:
    rules = attention_rules(cfg)
    return RopeSpec(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, cfg.partial_rotary_factor,
                    cfg.max_position_embeddings, rules.rotary_dim, rules.interleaved)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig, rules: AttentionRules, causal: bool, window: int | None):
        super().__init__()
        H, nh, nkv, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(H, nh * D, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(H, nkv * D, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(H, nkv * D, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(nh * D, H, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)
        # On disk without ".weight": a bare parameter, one logit per query head.
        self.attention_sink_bias = nn.Parameter(torch.zeros(nh)) if rules.sinks else None
        self.value_scale = rules.value_scale
        self.rotary_dim, self.interleaved = rules.rotary_dim, rules.interleaved
        self.head_dim = D
        self.scale = D**-0.5
        self.causal, self.window = causal, window

    def forward(self, x, ctx, cos, sin, cache: KVCache, layer: int, pos: int, masks):
        # x (q, H) the block; ctx (c, H) fc+hidden_norm features; cos/sin (c+q, R) (RopeTable.rolled
        # for z-lab's full-head rotation); masks: {(causal, window): mask}, built once per forward
        q, c, D = x.shape[0], ctx.shape[0], self.head_dim
        Q = self.q_norm(linear(x, self.q_proj).view(q, -1, D)).transpose(0, 1)[None]  # (1, nh, q, D)
        # Context and block share k_proj/v_proj; the context rows are the "target" half of the keys.
        # Two products, not one over the stacked rows: a 1-row product is BLAS's gemv, whose bits
        # differ from the same row inside a gemm, and z-lab projects them apart.
        K = torch.cat([linear(ctx, self.k_proj), linear(x, self.k_proj)]).view(c + q, -1, D)
        V = torch.cat([linear(ctx, self.v_proj), linear(x, self.v_proj)]).view(c + q, -1, D)
        if self.value_scale is not None:
            # MiMo: V × scale before attention (vLLM's mimo_v2 and SGLang scale V, so context and
            # block rows alike; llama.cpp scales the attention output instead: the same without o_proj bias)
            V = V * self.value_scale
        K = self.k_norm(K).transpose(0, 1)[None]  # (1, nkv, c+q, D)
        V = V.transpose(0, 1)[None]  # (1, nkv, c+q, D)
        if self.rotary_dim is None:  # z-lab: transformers' full-head rotate_half, its exact op order
            Q = apply_rope_rolled(Q, cos[-q:], sin[-q:])  # queries only sit at the block's positions
            K = apply_rope_rolled(K, cos, sin)
        else:
            Q = apply_rope_slice(Q, cos[-q:], sin[-q:], self.interleaved)
            K = apply_rope_slice(K, cos, sin, self.interleaved)
        K, V = cache.write(layer, pos, K, V)  # (1, nkv, pos+c+q, D): every committed position
        mask = masks[self.causal, self.window]
        if self.attention_sink_bias is not None:
            return linear(attend_with_sinks(Q, K, V, mask, self.scale, self.attention_sink_bias)[0], self.o_proj)
        return linear(attend(Q, K, V, mask, self.scale)[0], self.o_proj)  # (q, H)


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

    def __init__(self, cfg: DrafterConfig, rules: AttentionRules, causal: bool, window: int | None):
        super().__init__()
        self.self_attn = Attention(cfg, rules, causal, window)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.is_dflash2:
            self.attention_conv = DynamicConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
            self.mlp_conv = DynamicConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
        else:
            self.attention_conv = self.mlp_conv = None

    def forward(self, x, ctx, cos, sin, cache, layer, pos, masks):  # x (q, H), ctx (c, H)
        h = self.input_layernorm(x)
        if self.attention_conv is not None:
            h, kernel = self.attention_conv.prepare(h[None])
            h = h[0]
        h = self.self_attn(h, ctx, cos, sin, cache, layer, pos, masks)
        if self.attention_conv is not None:
            h = self.attention_conv.finish(h[None], kernel)[0]
        x = x + h
        h = self.post_attention_layernorm(x)
        if self.mlp_conv is not None:
            h, kernel = self.mlp_conv.prepare(h[None])
            h = h[0]
        h = self.mlp(h)
        if self.mlp_conv is not None:
            h = self.mlp_conv.finish(h[None], kernel)[0]
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
    ``compute_logits`` turns them into logits through the target's head (a DSpark drafter's
    own ``lm_head`` when it ships one)."""

    def __init__(self, cfg: DrafterConfig, dspark: DSparkLayout | None = None):
        super().__init__()
        self.cfg = cfg
        self.rules = attention_rules(cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg, self.rules, c, w) for c, w in self.rules.layers)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        feature_width = cfg.n_taps * (cfg.target_hidden_size or cfg.hidden_size)
        self.fc = nn.Linear(feature_width, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.is_dflash2:
            self.candidate_selector = CandidateSelector(cfg)
        self.dspark = self.markov_head = self.confidence_head = self.lm_head = self.embed_tokens = None
        self.mask_embedding: torch.Tensor | None = None  # MiMo's mask_embedding.pt (load.read_mask_embedding)
        if cfg.dspark is not None:
            self._build_dspark(dspark or layout_from_config(cfg))

    def _build_dspark(self, lay: DSparkLayout) -> None:
        H, R = self.cfg.hidden_size, lay.markov_rank
        self.dspark = lay
        if R:
            self.markov_head = MarkovHead(self.cfg.vocab_size, R, lay.draft_vocab)
        if lay.confidence:
            self.confidence_head = ConfidenceHead(H + (R if lay.confidence_with_markov else 0))
        if lay.own_head:
            self.lm_head = nn.Linear(H, lay.draft_vocab, bias=False)
        if lay.own_embed:
            self.embed_tokens = nn.Embedding(self.cfg.vocab_size, H)
        if lay.reduced:
            # the checkpoint's offsets (target = draft + d2t[draft]); an index table, never cast
            self.register_buffer("d2t", torch.zeros(lay.draft_vocab, dtype=torch.long))

    @property
    def is_dspark(self) -> bool:
        return self.dspark is not None

    @property
    def first_draft_slot(self) -> int:
        """Block slot of the first prediction: 0 for an anchor-sampling DSpark head, else 1."""
        return 0 if self.is_dspark and self.cfg.dspark.sample_from_anchor else 1

    def draft_ids(self) -> torch.Tensor | None:
        """(Vd,) the target id of every draft id, or None for a full-vocabulary head."""
        if not (self.is_dspark and self.dspark.reduced):
            return None
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

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
        """The block's input: raw target embedding rows (no target-side scaling) × input_embedding_scale.
        A DSpark drafter that ships ``embed_tokens`` embeds with its own table (mlx-dspark, llama.cpp)."""
        scale = self.cfg.input_embedding_scale
        if self.embed_tokens is not None:
            embed_weight = self.embed_tokens.weight
        x = F.embedding(block_ids, embed_weight)
        if self.mask_embedding is not None:  # vLLM's embed_input_ids: the MASK slots take the side file's vector
            x = torch.where((block_ids == self.cfg.mask_token_id)[..., None], self.mask_embedding.to(x.dtype), x)
        return x * (1.0 if scale is None else float(scale))

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
        ctx = self.hidden_norm(linear(target_hidden[0], self.fc))  # (c, H); batch 1 throughout
        cos, sin = rope.rolled(pos, pos + c + q) if self.rules.rotary_dim is None else rope(pos, pos + c + q)
        kv = pos + c + q - cache.window_start  # the rows cache.write hands attention
        masks = {(causal, window): visibility_mask(q, kv, causal=causal, window=window, device=ctx.device)
                 for causal, window in set(self.rules.layers)}
        x = noise_embedding[0]
        for i, layer in enumerate(self.layers):
            x = layer(x, ctx, cos, sin, cache, i, pos, masks)
        cache.length = pos + c + q
        return self.norm(x)[None]

    def compute_logits(self, hidden: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        """Target head × output_multiplier, then tanh softcap: the drafter copies the target's output transform.
        A DSpark ``lm_head`` replaces the target's head (its own, possibly reduced, vocabulary); the
        Markov bias is added after the softcap (mlx-dspark's order)."""
        if self.lm_head is not None:
            head_weight = self.lm_head.weight
        logits = F.linear(hidden, head_weight)
        mult = self.cfg.output_multiplier
        if mult is not None and float(mult) != 1.0:  # z-lab multiplies by 1.0 too: x·1.0 is x, bit for bit
            logits = logits * float(mult)
        cap = self.cfg.final_logit_softcapping
        if cap is not None and cap > 0:
            logits = torch.tanh(logits / cap) * cap
        return logits
