"""Family C: Lucebox's native `qwen35-dflash-draft` / `gemma4-dflash-draft`.

`dflash.n_target_layers` is the **tap count** (not the target's depth, which is what the
config's `num_target_layers` means — writing that was a Lucebox bug). Lucebox takes the
tokenizer and mask id from the target at run time, so no tokenizer is required here.
"""
from __future__ import annotations

from .meta import DKey, DrafterMeta, Format


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

    dflash_keys = (DKey("{a}.vocab_size", "vocab_size"), DKey("{a}.dflash.n_target_layers", "n_taps"),
                   DKey("{a}.dflash.target_layer_ids", "taps"),
                   DKey("{a}.dflash.n_target_features", "n_target_features"),
                   DKey("{a}.dflash.block_size", "block_size"), DKey("{a}.dflash.mask_token_id", "mask_token_id"))

    def parse_dflash(self, arch, kv, meta, consumed, path=""):
        meta.flavor = "gemma4" if arch.startswith("gemma4") else "qwen35"
        super().parse_dflash(arch, kv, meta, consumed, path)


LUCEBOX = Lucebox()
