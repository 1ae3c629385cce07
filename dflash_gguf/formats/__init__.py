"""The four drafter GGUF spellings (one module per runtime family) and the two ways into a
DrafterMeta: from a config.json (convert) and from an existing GGUF (retarget, inspect,
checks, compare).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from ..config import DrafterConfig
from ..errors import GGUFFormatError, UsageError
from ..fileio.types import KV
from ..fileio.gguf_header import show
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_kv import bad_kv, get_int
from .meta import CONVERTER_KEY, MASK_ID, ROPE_SECTIONS, DrafterMeta, Format, without_mask
from .dflash_draft import DFLASH_DRAFT
from .dspark import DSPARK, is_dspark
from .family import DFLASH, FileFamily
from .hparams import encode_hparams
from .llama_cpp import MAINLINE, PR22105_FORMAT
from .lucebox import LUCEBOX

FORMATS: dict[str, Format] = {f.name: f for f in (MAINLINE, PR22105_FORMAT, DFLASH_DRAFT, LUCEBOX)}
DRAFTER_ARCHS = ("dflash", "dflash-draft", "qwen35-dflash-draft", "gemma4-dflash-draft")

__all__ = ["FORMATS", "DrafterMeta", "FileFamily", "Format", "get_format", "detect_format", "file_family",
           "meta_from_config", "meta_from_gguf"]


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise UsageError(f"unknown --format {name!r}; choose one of: {', '.join(FORMATS)}") from None


def detect_format(arch: str, keys: Mapping[str, object] | Sequence[str], tensor_names: Sequence[str] = ()) -> Format | None:
    """The format a file is written in, from its architecture, keys and tensor names; None if
    it is not a DFlash drafter."""
    keys = set(keys)
    if arch == "dflash":
        if "dflash.target_layers" in keys or "enc.output_norm.weight" in tensor_names:
            return MAINLINE
        if "dflash.target_layer_ids" in keys or "hidden_norm.weight" in tensor_names:
            return PR22105_FORMAT
        return MAINLINE
    if arch == "dflash-draft":
        return DFLASH_DRAFT
    if arch in LUCEBOX.archs:
        return LUCEBOX
    return None


def file_family(keys: Mapping[str, object] | Sequence[str], tensor_names: Sequence[str], arch: str) -> FileFamily:
    """The drafter family a file belongs to (``formats.family``): the one place it is chosen."""
    from .deepseek_v4 import DSV4, is_dsv4_file

    if is_dsv4_file(keys, arch):
        return DSV4
    return DSPARK if is_dspark(keys, tensor_names, arch) else DFLASH


# --- config.json -> DrafterMeta (the converter's choices mirror llama.cpp's DFlashModel) ---
def meta_from_config(
    cfg: DrafterConfig,
    *,
    n_target_features: int,
    tokenizer: Sequence[KV] = (),
    file_type: int | None = None,
    name: str | None = None,
    flavor: str | None = None,
    target_mrope: bool = False,
    general: Sequence[KV] | None = None,
) -> DrafterMeta:
    """``target_mrope``: the target ropes with M-RoPE sections (see ``TargetInfo.uses_mrope``).
    The hyperparameter keys come from the one table in ``formats.hparams``. ``general``: the
    authorship keys (name, size label, model card...) as ``convert.metadata.general_kvs`` builds
    them, written after general.type where mainline writes them; without it only ``name``."""
    hp = encode_hparams(cfg)
    if target_mrope:  # the drafter ropes on the temporal section only: degenerate sections
        hp.append((ROPE_SECTIONS, [cfg.head_dim // 2, 0, 0, 0], T.ARRAY, T.INT32))

    # mainline: set_type() then Metadata.set_gguf_meta_model(), before any hyperparameter
    kvs = [KV("general.type", "model", T.STRING)]
    if general is not None:
        kvs += general
    elif name:
        kvs.append(KV("general.name", name, T.STRING))
    dflash2 = {}
    if cfg.is_dflash2:
        dflash2 = {k: getattr(cfg, k) for k in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")}
    if flavor is None:
        flavor = "gemma4" if (cfg.final_logit_softcapping is not None or "gemma" in cfg.model_type) else "qwen35"
    tokenizer, mask_at = without_mask(list(tokenizer))
    return DrafterMeta(
        taps=cfg.target_layer_ids,
        block_size=cfg.block_size,
        mask_token_id=cfg.mask_token_id,
        n_target_features=n_target_features,
        vocab_size=cfg.vocab_size,
        general=kvs,
        hparams=hp,
        dflash2=dflash2,
        tokenizer=tokenizer,
        mask_at=mask_at,
        file_type=file_type,
        quantization_version=2,
        flavor=flavor,
    )


# --- GGUF keys -> DrafterMeta ---------------------------------------------------------------
def meta_from_gguf(
    kvs: Mapping[str, KV], tensors: Mapping[str, tuple[int, ...]], path: str | Path = ""
) -> tuple[Format, DrafterMeta]:
    """Parse a drafter GGUF's keys (in file order) and tensor shapes (numpy order).

    Raises:
        GGUFFormatError: not a DFlash drafter, or a required DFlash key is missing.
    """
    where = str(path)
    arch_kv = kvs.get("general.architecture")
    if arch_kv is not None and (arch_kv.type != T.STRING or not isinstance(arch_kv.value, str)):
        raise bad_kv(where, arch_kv, f"a string (one of {', '.join(DRAFTER_ARCHS)})")
    arch = None if arch_kv is None else arch_kv.value
    fmt = detect_format(arch or "", kvs.keys(), list(tensors))
    if fmt is None:
        raise GGUFFormatError(
            f"{path}: general.architecture={show(arch) if arch is not None else None!r} is not a DFlash drafter "
            f"(expected one of {', '.join(DRAFTER_ARCHS)})"
        )
    fc = tensors.get(fmt.fc_name)
    if fc is None:
        raise GGUFFormatError(f"{path}: drafter tensor {fmt.fc_name} is missing ({fmt.name} format)")
    if len(fc) != 2:
        raise GGUFFormatError(f"{path}: drafter tensor {fmt.fc_name} has shape {list(reversed(fc))} (ggml ne), but "
                              f"it must be 2-D [n_taps × target hidden, hidden] (corrupt tensor info; re-convert)")
    meta = DrafterMeta(taps=(), block_size=None, mask_token_id=None, n_target_features=int(fc[-1]),
                       dspark=is_dspark(kvs.keys(), tensors, arch or ""))
    consumed: set[str] = {"general.architecture", CONVERTER_KEY}  # the writer's own: rewritten, not kept
    fmt.parse_dflash(arch, kvs, meta, consumed, path=where)
    meta.file_type = get_int(kvs, "general.file_type", consumed, required=False, path=where)
    meta.quantization_version = get_int(kvs, "general.quantization_version", consumed, required=False, path=where)
    for key in ("block_count", "embedding_length"):  # what every loader sizes the graph from
        if f"{arch}.{key}" not in kvs:
            raise GGUFFormatError(f"{path}: {arch}.{key} is missing; not a usable drafter")
        get_int(kvs, f"{arch}.{key}", None, path=where, lo=1)
    prefix = f"{arch}."
    # DeepSeek-V4 DSpark: mainline writes the chat template first and general.file_type among the
    # hparams; a rewrite keeps both where they stood
    from .deepseek_v4 import is_dsv4_file

    keep_places, seen_hparam = is_dsv4_file(kvs.keys(), arch or ""), False
    for key, kv in kvs.items():
        if key == MASK_ID and key in consumed:  # read as the drafter's mask id: keep its place on rewrite
            meta.mask_at = len(meta.tokenizer)
        if key == "general.file_type" and keep_places:
            meta.file_type_at = len(meta.hparams)
        if key in consumed:
            continue
        seen_hparam = seen_hparam or key.startswith(prefix)
        if key.startswith("tokenizer.") and (seen_hparam or not keep_places or key != "tokenizer.chat_template"):
            meta.tokenizer.append(kv)
        elif key.startswith(prefix):
            meta.hparams.append((key[len(prefix):], kv.value, kv.type, kv.sub_type))
        else:
            meta.general.append(kv)
    if meta.vocab_size is None:
        tokens = kvs.get("tokenizer.ggml.tokens")
        if tokens is not None and tokens.type == T.ARRAY and tokens.sub_type == T.STRING:
            meta.vocab_size = len(tokens.value)
    return fmt, meta
