"""Family C: Lucebox's native `qwen35-dflash-draft` / `gemma4-dflash-draft`.

`dflash.n_target_layers` is the **tap count** (not the target's depth, which is what the
config's `num_target_layers` means — writing that was a Lucebox bug). Lucebox takes the
tokenizer and mask id from the target at run time, so no tokenizer is required here.
"""
from __future__ import annotations

from gguf import GGUFValueType as T

from ..fileio.types import KV
from ..fileio.gguf_reader import I32_MAX, get_int, get_ints
from .meta import DrafterMeta, Format


class Lucebox(Format):
    name = "lucebox"
    description = "Lucebox dflash_server (`qwen35-dflash-draft`, `gemma4-dflash-draft`)"
    loaders = "Luce-Org/lucebox(-hub) dflash_server"
    archs = ("qwen35-dflash-draft", "gemma4-dflash-draft")
    needs_tokenizer = False
    tap_offset = 0
    fc_name = "dflash.fc.weight"
    hidden_norm_name = "dflash.hidden_norm.weight"
    pre_ffn_norm = "ffn_norm.weight"
    ignores_unknown_tensors = True
    required_keys = (
        ("{a}.attention.key_length", "error", "Lucebox uses it as head_dim"),
        ("{a}.dflash.target_layer_ids", "error", "Lucebox captures these target layers"),
        ("{a}.rope.freq_base", "warning", "Lucebox warns 'draft RoPE will be wrong'"),
    )

    def arch(self, meta: DrafterMeta) -> str:
        return "gemma4-dflash-draft" if meta.flavor == "gemma4" else "qwen35-dflash-draft"

    def dflash_kvs(self, arch: str, meta: DrafterMeta) -> list[KV]:
        out = []
        if meta.vocab_size is not None:
            out.append(KV(f"{arch}.vocab_size", meta.vocab_size, T.UINT32))
        out.append(KV(f"{arch}.dflash.n_target_layers", len(meta.taps), T.UINT32))
        out.append(KV(f"{arch}.dflash.target_layer_ids", self.stored_taps(meta), T.ARRAY, T.INT32))
        out.append(KV(f"{arch}.dflash.n_target_features", meta.n_target_features, T.UINT32))
        if meta.block_size is not None:
            out.append(KV(f"{arch}.dflash.block_size", meta.block_size, T.UINT32))
        if meta.mask_token_id is not None:
            out.append(KV(f"{arch}.dflash.mask_token_id", meta.mask_token_id, T.UINT32))
        return out

    def parse_dflash(self, arch, kv, meta, consumed, path=""):
        meta.flavor = "gemma4" if arch.startswith("gemma4") else "qwen35"
        meta.vocab_size = get_int(kv, f"{arch}.vocab_size", consumed, required=False, path=path)
        get_int(kv, f"{arch}.dflash.n_target_layers", consumed, required=False, path=path)
        get_int(kv, f"{arch}.dflash.n_target_features", consumed, required=False, path=path)
        # INT32 when written back, +1 in the mainline format
        meta.taps = get_ints(kv, f"{arch}.dflash.target_layer_ids", consumed, path=path, lo=0, hi=I32_MAX - 1)
        meta.block_size = get_int(kv, f"{arch}.dflash.block_size", consumed, required=False, path=path)
        meta.mask_token_id = get_int(kv, f"{arch}.dflash.mask_token_id", consumed, required=False, path=path)


LUCEBOX = Lucebox()
