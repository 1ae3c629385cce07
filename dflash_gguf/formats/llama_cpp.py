"""Family A: mainline llama.cpp (`general.architecture = dflash`), and the original PR
#22105 branch naming that forks built on that PR still load.

Ground truth for the mainline spelling: `DFlashModel` in llama.cpp's `conversion/qwen.py`
(vendored in llama-cpp-python 0.3.36). Taps are stored **+1**: the runtime captures the
*input* of layer id (`llama_set_embeddings_layer_inp`), i.e. the output of layer id-1,
while z-lab ids name the layer whose *output* is tapped.
"""
from __future__ import annotations

from .meta import MASK_ID, DKey, Format
_DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


class Mainline(Format):
    name = "llama.cpp"
    description = "mainline llama.cpp (--spec-type draft-dflash)"
    loaders = "ggml-org/llama.cpp (and ik_llama.cpp for dense Qwen dflash files)"
    archs = ("dflash",)
    tap_offset = 1
    fc_name = "fc.weight"
    hidden_norm_name = "enc.output_norm.weight"
    pre_ffn_norm = "ffn_norm.weight"
    supports_dflash2 = True
    supports_dspark = True
    loads_weight_scales = True
    required_keys = (
        ("{a}.target_layers", "error", "the loader throws 'DFlash model requires target_layers'"),
        ("{a}.attention.layer_norm_rms_epsilon", "error", "the loader requires it"),
        (MASK_ID, "error", "the runtime takes the mask token from the vocab"),
        ("{a}.rope.freq_base", "warning", "llama.cpp falls back to 10,000: wrong RoPE, low acceptance"),
        ("{a}.block_size", "info", "the runtime assumes 16"),
    )
    # The mask id moved into the vocab (llama_vocab_mask); the converter writes it last.
    dflash_keys = (DKey("{a}.block_size", "block_size"),
                   *(DKey(f"{{a}}.{k}", k) for k in _DFLASH2_KEYS),
                   DKey("{a}.target_layers", "taps"), DKey(MASK_ID, "mask_token_id", tail=True))


class PR22105(Format):
    name = "llama.cpp-pr22105"
    description = "the original llama.cpp DFlash PR branch (#22105) naming"
    loaders = "forks built on the ruixiang63/llama.cpp dflash branch"
    archs = ("dflash",)
    tap_offset = 1
    fc_name = "fc.weight"
    hidden_norm_name = "hidden_norm.weight"
    pre_ffn_norm = "ffn_norm.weight"
    required_keys = (
        ("{a}.target_layer_ids", "error", "the PR-branch loader requires it"),
        ("{a}.mask_token_id", "error", "the PR-branch runtime reads the mask token here"),
        ("{a}.attention.layer_norm_rms_epsilon", "error", "the loader requires it"),
        ("{a}.rope.freq_base", "warning", "falls back to 10,000: wrong RoPE, low acceptance"),
    )
    dflash_keys = (DKey("{a}.target_layer_ids", "taps"), DKey("{a}.block_size", "block_size"),
                   DKey("{a}.mask_token_id", "mask_token_id"))


MAINLINE = Mainline()
PR22105_FORMAT = PR22105()
