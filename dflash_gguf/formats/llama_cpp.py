"""Family A: mainline llama.cpp (`general.architecture = dflash`), and the original PR
#22105 branch naming that forks built on that PR still load.

Ground truth for the mainline spelling: `DFlashModel` in llama.cpp's `conversion/qwen.py`
(vendored in llama-cpp-python 0.3.36). Taps are stored **+1**: the runtime captures the
*input* of layer id (`llama_set_embeddings_layer_inp`), i.e. the output of layer id-1,
while z-lab ids name the layer whose *output* is tapped.
"""
from __future__ import annotations

from gguf import GGUFValueType as T

from ..fileio.types import KV
from ..fileio.gguf_reader import I32_MAX, get_int, get_ints
from .meta import DrafterMeta, Format

MASK_KEY = "tokenizer.ggml.mask_token_id"
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
    required_keys = (
        ("{a}.target_layers", "error", "the loader throws 'DFlash model requires target_layers'"),
        ("{a}.attention.layer_norm_rms_epsilon", "error", "the loader requires it"),
        (MASK_KEY, "error", "the runtime takes the mask token from the vocab"),
        ("{a}.rope.freq_base", "warning", "llama.cpp falls back to 10,000: wrong RoPE, low acceptance"),
        ("{a}.block_size", "info", "the runtime assumes 16"),
    )

    def dflash_kvs(self, arch: str, meta: DrafterMeta) -> list[KV]:
        out = []
        if meta.block_size is not None:
            out.append(KV(f"{arch}.block_size", meta.block_size, T.UINT32))
        for k in _DFLASH2_KEYS:
            if k in meta.dflash2:
                out.append(KV(f"{arch}.{k}", meta.dflash2[k], T.UINT32))
        out.append(KV(f"{arch}.target_layers", self.stored_taps(meta), T.ARRAY, T.INT32))
        return out

    def tail_kvs(self, arch: str, meta: DrafterMeta) -> list[KV]:
        # The mask id moved into the vocab (llama_vocab_mask); the converter writes it last.
        return [] if meta.mask_token_id is None else [KV(MASK_KEY, meta.mask_token_id, T.UINT32)]

    def parse_dflash(self, arch, kv, meta, consumed, path=""):
        # stored as layer-input ids (+1); every format writes taps as INT32
        stored = get_ints(kv, f"{arch}.target_layers", consumed, path=path, lo=0, hi=I32_MAX - 1)
        meta.taps = tuple(i - self.tap_offset for i in stored)
        meta.block_size = get_int(kv, f"{arch}.block_size", consumed, required=False, path=path)
        meta.mask_token_id = get_int(kv, MASK_KEY, consumed, required=False, path=path)
        for k in _DFLASH2_KEYS:
            v = get_int(kv, f"{arch}.{k}", consumed, required=False, path=path)
            if v is not None:
                meta.dflash2[k] = v


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

    def dflash_kvs(self, arch: str, meta: DrafterMeta) -> list[KV]:
        out = [KV(f"{arch}.target_layer_ids", self.stored_taps(meta), T.ARRAY, T.INT32)]
        if meta.block_size is not None:
            out.append(KV(f"{arch}.block_size", meta.block_size, T.UINT32))
        if meta.mask_token_id is not None:
            out.append(KV(f"{arch}.mask_token_id", meta.mask_token_id, T.UINT32))
        return out

    def parse_dflash(self, arch, kv, meta, consumed, path=""):
        stored = get_ints(kv, f"{arch}.target_layer_ids", consumed, path=path, lo=0, hi=I32_MAX - 1)
        meta.taps = tuple(i - self.tap_offset for i in stored)
        meta.block_size = get_int(kv, f"{arch}.block_size", consumed, required=False, path=path)
        meta.mask_token_id = get_int(kv, f"{arch}.mask_token_id", consumed, required=False, path=path)


MAINLINE = Mainline()
PR22105_FORMAT = PR22105()
