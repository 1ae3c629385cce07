"""Family B: the `dflash-draft` architecture of the buun / beellama / ik_llama forks.

Taps are stored unchanged (the forks capture `l_out-<id>`, the output of layer id), and
`n_target_features` must be present: the loaders size `dflash_fc` from it.
"""
from __future__ import annotations

from .meta import DKey, Format


class DflashDraft(Format):
    name = "dflash-draft"
    description = "buun-llama-cpp / beellama.cpp / ik_llama.cpp `dflash-draft` architecture"
    loaders = "spiritbuun/buun-llama-cpp, Anbeeld/beellama.cpp, ikawrakow/ik_llama.cpp, Lucebox (fallback)"
    archs = ("dflash-draft",)
    tap_offset = 0
    fc_name = "dflash_fc.weight"
    hidden_norm_name = "dflash_hidden_norm.weight"
    pre_ffn_norm = "post_attention_norm.weight"
    required_keys = (
        ("{a}.dflash.target_layer_ids", "error", "the fork loaders require it"),
        ("{a}.dflash.n_target_features", "error", "the fork loaders size dflash_fc from it"),
        ("{a}.dflash.mask_token_id", "error", "ik_llama requires it; beellama's default 248070 is "
                                              "only right for Qwen3.5/3.6"),
        ("{a}.attention.layer_norm_rms_epsilon", "error", "the loaders require it"),
        ("{a}.rope.freq_base", "warning", "falls back to 10,000: wrong RoPE, low acceptance"),
    )
    dflash_keys = (DKey("{a}.dflash.block_size", "block_size"), DKey("{a}.dflash.mask_token_id", "mask_token_id"),
                   DKey("{a}.dflash.target_layer_ids", "taps"),
                   DKey("{a}.dflash.n_target_features", "n_target_features"))


DFLASH_DRAFT = DflashDraft()
