"""MiMo's ``mask_embedding.pt`` side file: the drafter brings its own vector for the mask token
(the target's row is untrained), so the GGUF must carry the target's embedding table with that
row replaced, and the target's output head next to it — as mainline's ``DFlashModel`` does.

The table and head are streamed from the target (its safetensors, or a float GGUF of it);
only the one replacement row is held in memory.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import MASK_FILE, DrafterConfig, load_target_config
from ..errors import ConfigError, TargetError, UsageError, WeightsError
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor, read_inventory

EMBED, HEAD = "embed_tokens.weight", "lm_head.weight"  # drafter checkpoint names (without "model.")
_GGUF_FLOATS = {"F32": "F32", "F16": "F16", "BF16": "BF16"}  # GGML type name -> safetensors dtype

if TYPE_CHECKING:  # numpy: imported by the code that patches a row (the chunks are arrays)
    import numpy as np


def type_name_of(ggml_type: int) -> str:
    from gguf import GGMLQuantizationType as Q

    try:
        return Q(ggml_type).name
    except ValueError:
        return f"GGML type {ggml_type}"


@dataclass(frozen=True)
class MaskEmbedding:
    token_id: int
    row: bytes  # the replacement row, already in the embedding table's storage dtype
    source: Path


def load_mask_embedding(drafter_dir: str | Path, cfg: DrafterConfig, table_dtype: str) -> MaskEmbedding | None:
    """The side file's row in ``table_dtype`` ("BF16" | "F16" | "F32"), or None when absent.

    Raises:
        UsageError: torch is not installed (only torch can read a .pt file).
        ConfigError: not a {mask_token_id, embedding} dict, or it disagrees with config.json.
    """
    path = Path(drafter_dir) / MASK_FILE
    if not path.is_file():
        return None
    try:
        import torch
    except ImportError:
        raise UsageError(f"{path}: reading a .pt file needs torch; pip install 'dflash-gguf[torch]'") from None
    try:
        # weights_only: a .pt file is a pickle; never execute code from a downloaded checkpoint
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing; the error says it
            warnings.simplefilter("ignore")
            data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a corrupt or hostile file
        raise ConfigError(f"{path}: not a readable tensor file ({type(exc).__name__}: {str(exc)[:120]}); "
                          "re-download it") from None
    if not isinstance(data, dict) or not isinstance(data.get("embedding"), torch.Tensor) or "mask_token_id" not in data:
        raise ConfigError(f"{path}: expected a dict with mask_token_id and embedding (a tensor); re-download it")
    mask_id = data["mask_token_id"]
    if isinstance(mask_id, torch.Tensor) and mask_id.numel() == 1:
        mask_id = mask_id.item()
    if mask_id != cfg.mask_token_id:
        raise ConfigError(f"{path}: mask_token_id {mask_id!r:.40} does not match dflash_config's {cfg.mask_token_id}")
    vec = data["embedding"]
    if tuple(vec.shape) != (cfg.hidden_size,):
        raise ConfigError(f"{path}: embedding has shape {list(vec.shape)}, expected [{cfg.hidden_size}] (hidden_size)")
    if not vec.is_floating_point():
        raise ConfigError(f"{path}: embedding has dtype {vec.dtype}; expected a float tensor")
    # torch's own cast, as mainline does (``mask["embedding"].to(embeddings.dtype)``): same rounding
    dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[table_dtype]
    row = vec.detach().to(dtype).contiguous().view(torch.uint8).numpy().tobytes()
    return MaskEmbedding(int(mask_id), row, path)


def target_tables(cfg: DrafterConfig, inventory: list[SourceTensor], target_gguf: str | Path | None,
                  target_dir: str | Path | None) -> dict[str, SourceTensor]:
    """The embedding table and output head the drafter GGUF must carry, by drafter checkpoint
    name: the drafter's own when it ships them, else the target's (tied targets: the embedding
    table is the head).

    Raises:
        TargetError: no target given, or the target lacks the tensors / they are not float.
        WeightsError: the embedding table's shape is not [vocab_size, hidden_size].
    """
    own = {t.name.removeprefix("model."): t for t in inventory}
    if target_gguf is None and target_dir is None and not (EMBED in own and HEAD in own):
        raise TargetError(f"{MASK_FILE} needs the target's embeddings and output head: pass --target-dir T/ "
                          "(its safetensors) or --target-gguf T.gguf (a float GGUF)")
    find = _from_gguf(target_gguf) if target_gguf is not None else _from_dir(target_dir) if target_dir else None
    out = {}
    out[EMBED] = own.get(EMBED) or find("embed")
    if HEAD not in own:
        out[HEAD] = find("head")
    emb = out[EMBED]
    if emb.shape != (cfg.vocab_size, cfg.hidden_size):
        raise WeightsError(f"{emb.file}: {emb.name} has shape {list(emb.shape)} but the drafter needs "
                           f"[{cfg.vocab_size}, {cfg.hidden_size}] (vocab_size, hidden_size); is this its target?")
    for t in out.values():
        if t.dtype not in FLOAT_DTYPES:
            raise TargetError(f"{t.file}: {t.name} is {t.dtype}; {MASK_FILE} needs the target's table in "
                              "BF16/F16/F32 (a quantized target cannot give it back exactly)")
    return out


def _from_dir(target_dir: str | Path):
    d = Path(target_dir)
    tensors = {t.name: t for t in read_inventory(d)}
    try:
        cfg = load_target_config(d)
    except ConfigError as exc:
        raise TargetError(f"target: {exc}") from None
    tied = bool(cfg.raw.get("tie_word_embeddings", False))
    names = {"embed": "model.embed_tokens.weight", "head": "model.embed_tokens.weight" if tied else "lm_head.weight"}

    def find(what: str) -> SourceTensor:
        t = tensors.get(names[what])
        if t is None:
            raise TargetError(f"{d}: target tensor {names[what]} was not found in its safetensors "
                              f"({MASK_FILE} needs the target's embeddings and output head)")
        return t
    return find


def _from_gguf(target_gguf: str | Path):
    from ..fileio.gguf_header import read_header

    p = Path(target_gguf)
    header = read_header(p)
    byname = header.tensors_by_name

    def find(what: str) -> SourceTensor:
        name = "token_embd.weight" if what == "embed" else ("output.weight" if "output.weight" in byname
                                                            else "token_embd.weight")  # tied: no output.weight
        t = byname.get(name)
        if t is None:
            raise TargetError(f"{p}: has no {name} ({MASK_FILE} needs the target's embeddings and output head)")
        dtype = _GGUF_FLOATS.get(type_name_of(t.ggml_type), f"GGML type {t.ggml_type}")
        # a float GGUF tensor is the safetensors row-major layout (ggml ne reversed = numpy shape)
        return SourceTensor(name, dtype, tuple(t.shape), p, t.offset_abs, t.nbytes)
    return find


def patch_row(chunk: np.ndarray, first_row: int, mask: MaskEmbedding) -> np.ndarray:
    """``chunk`` (rows first_row.. of the table, storage dtype) with the mask row replaced."""
    import numpy as np

    i = mask.token_id - first_row
    if 0 <= i < len(chunk):
        chunk = chunk.copy()
        chunk[i] = np.frombuffer(mask.row, dtype=chunk.dtype)
    return chunk
