"""Family B: the `dflash-draft` architecture of the buun / beellama / ik_llama forks.

Taps are stored unchanged (the forks capture `l_out-<id>`, the output of layer id), and
`n_target_features` must be present: the loaders size `dflash_fc` from it.
"""
from __future__ import annotations

from gguf import GGUFValueType as T

from ..fileio.types import KV
from ..fileio.gguf_reader import I32_MAX, get_int, get_ints
from .meta import DrafterMeta, Format


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

    def dflash_kvs(self, arch: str, meta: DrafterMeta) -> list[KV]:
        out = []
        if meta.block_size is not None:
            out.append(KV(f"{arch}.dflash.block_size", meta.block_size, T.UINT32))
        if meta.mask_token_id is not None:
            out.append(KV(f"{arch}.dflash.mask_token_id", meta.mask_token_id, T.UINT32))
        out.append(KV(f"{arch}.dflash.target_layer_ids", self.stored_taps(meta), T.ARRAY, T.INT32))
        out.append(KV(f"{arch}.dflash.n_target_features", meta.n_target_features, T.UINT32))
        return out

    def parse_dflash(self, arch, kv, meta, consumed, path=""):
        meta.block_size = get_int(kv, f"{arch}.dflash.block_size", consumed, required=False, path=path)
        meta.mask_token_id = get_int(kv, f"{arch}.dflash.mask_token_id", consumed, required=False, path=path)
        # INT32 when written back, +1 in the mainline format
        meta.taps = get_ints(kv, f"{arch}.dflash.target_layer_ids", consumed, path=path, lo=0, hi=I32_MAX - 1)
        # n_target_features is re-derived from the fc tensor on write; consume the stored one.
        get_int(kv, f"{arch}.dflash.n_target_features", consumed, required=False, path=path)


DFLASH_DRAFT = DflashDraft()
