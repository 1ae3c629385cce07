"""MiMo's ``mask_embedding.pt`` side file: the drafter brings its own vector for the mask token
(the target's row is untrained), so the GGUF must carry the target's embedding table with that
row replaced, and the target's output head next to it — as mainline's ``DFlashModel`` does.

The table and head are streamed from the target (its safetensors, or a float GGUF of it);
only the one replacement row is held in memory.
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._lazy import require
from ..config import MASK_FILE, DrafterConfig, load_target_config
from ..errors import ConfigError, TargetError, WeightsError
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor, read_inventory
from ..formats.names import OUTPUT, TOKEN_EMBD

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
        WeightsError: not a readable torch file, not a {mask_token_id, embedding} dict, a mask id
            other than config.json's, or an embedding that is not ``hidden_size`` finite floats.
    """
    path = Path(drafter_dir) / MASK_FILE
    if not path.is_file():
        return None
    torch = _torch(path)
    data = read_mask_file(path, cfg.hidden_size)
    if not isinstance(data, dict) or "embedding" not in data or "mask_token_id" not in data:
        raise WeightsError(f"{path}: expected a dict with mask_token_id and embedding (a tensor), got "
                           f"{describe(data)}; re-download it")
    mask_id = mask_id_of(data["mask_token_id"], path)
    if mask_id != cfg.mask_token_id:
        raise WeightsError(f"{path}: mask_token_id {mask_id} does not match dflash_config's {cfg.mask_token_id}")
    vec = embedding_of(data["embedding"], path, cfg.hidden_size)
    # torch's own cast, as mainline does (``mask["embedding"].to(embeddings.dtype)``): same rounding
    dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[table_dtype]
    row = vec.detach().to(dtype).contiguous().view(torch.uint8).numpy().tobytes()
    return MaskEmbedding(int(mask_id), row, path)


# --- reading the side file: shared with the torch reference (reference.load.read_mask_embedding) ---
# ``torch.load(weights_only=True)`` executes no code, but it still hands back whatever plain
# containers the pickle describes: lists nested 40 deep that share themselves (a few kB of pickle,
# 2**40 elements to ``repr``), integers of any length, tensors on the meta device, sparse or
# quantized, declared far larger than their storage (stride 0). So nothing loaded is formatted
# whole: errors name types, lengths and shapes, and every check reads metadata only, before any
# tensor data is touched.

#: The published file is a dict and one vector (hidden_size values, a few kB); anything this size
#: or larger is not one, and is refused before torch reads it.
MAX_MASK_FILE_BYTES = 1 << 24
_MASK_DTYPES = ("float32", "bfloat16", "float16", "float64")  # torch dtype names the row may be cast from


def _torch(path: Path):
    return require("torch", f"{path}: reading a .pt file", "torch")


def read_mask_file(path: Path, hidden_size: int):
    """``torch.load(path, weights_only=True)`` on the CPU, for a file of bounded size.

    Raises:
        UsageError: no torch.
        WeightsError: too large to be a mask embedding, or torch cannot read it (one line)."""
    torch = _torch(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise WeightsError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__}); re-download it") from None
    if size > MAX_MASK_FILE_BYTES:
        raise WeightsError(f"{path}: {size:,} bytes is not a mask embedding (one vector of {hidden_size} values, "
                           f"a few kB); re-download it")
    try:
        # weights_only: a .pt file is a pickle; never execute code from a downloaded checkpoint
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing; the error says it
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a corrupt or hostile file
        why = str(exc)[:120].splitlines()[0] if str(exc) else ""
        raise WeightsError(f"{path}: not a readable tensor file ({type(exc).__name__}: {why}); "
                           "re-download it") from None


def describe(value) -> str:
    """What a loaded value is, in a few words, without formatting the value itself (a shared
    nested list expands to 2**40 elements; a long int to thousands of digits)."""
    import torch

    if isinstance(value, torch.Tensor):
        return (f"a {value.layout} {value.dtype} tensor of shape {_shape(value)} on {value.device.type}"
                .replace("torch.strided ", ""))
    if isinstance(value, dict):
        keys = [k for k in itertools.islice(value, 6) if isinstance(k, str) and len(k) <= 40]
        more = ", …" if len(value) > len(keys) else ""
        return f"a dict with {len(value)} key(s) ({', '.join(map(repr, keys))}{more})"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    return f"a {type(value).__name__}"


def _shape(t) -> str:
    dims = list(t.shape)
    return str(dims) if len(dims) <= 4 else f"[{', '.join(map(str, dims[:4]))}, …] ({len(dims)} dims)"


def _dense_cpu(t, path: Path, what: str) -> None:
    import torch

    if t.layout != torch.strided:
        raise WeightsError(f"{path}: {what} is a {t.layout} tensor; expected a dense one (re-download it)")
    if t.device.type != "cpu":  # loaded with map_location="cpu": only the meta device stays behind
        raise WeightsError(f"{path}: {what} is a tensor on the {t.device.type} device, which holds no values; "
                           "re-download it")
    if t.is_quantized:
        raise WeightsError(f"{path}: {what} is a quantized tensor ({t.dtype}); expected a float one (re-download it)")


def mask_id_of(value, path: Path) -> int:
    """The mask token id: an int (or an integral float, which mainline's ``!=`` test accepts too),
    or a tensor of one such element.

    Raises:
        WeightsError: anything else (named by type and shape, never printed)."""
    import math

    import torch

    if isinstance(value, torch.Tensor):
        _dense_cpu(value, path, "mask_token_id")
        if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
            raise WeightsError(f"{path}: mask_token_id is {describe(value)}; expected one integer")
        value = value.reshape(()).item()
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise WeightsError(f"{path}: mask_token_id is {describe(value)}; expected one integer")
    if not 0 <= value < 2**31:  # never formatted: an int may have any number of digits
        raise WeightsError(f"{path}: mask_token_id is not a token id (negative, or 2**31 or more); re-download it")
    return value


def embedding_of(value, path: Path, hidden_size: int, *, flat_only: bool = True):
    """The embedding vector, 1-D, in its stored dtype, after checking (metadata first) that it
    is a dense CPU float tensor of ``hidden_size`` finite values. ``flat_only=False`` takes any
    shape of ``hidden_size`` values (a (1, hidden_size) row), as the reference always has.

    Raises:
        WeightsError: what it is instead, in one line (never its values)."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise WeightsError(f"{path}: embedding is {describe(value)}; expected a tensor of {hidden_size} floats")
    _dense_cpu(value, path, "embedding")
    if str(value.dtype).removeprefix("torch.") not in _MASK_DTYPES:
        raise WeightsError(f"{path}: embedding has dtype {value.dtype}; expected a float tensor "
                           f"({'/'.join(_MASK_DTYPES)})")
    shape = tuple(value.shape)
    if shape != (hidden_size,) and (flat_only or value.numel() != hidden_size):
        raise WeightsError(f"{path}: embedding has shape {_shape(value)}, expected [{hidden_size}] (hidden_size)")
    vec = value.detach().reshape(hidden_size)
    bad = ~torch.isfinite(vec)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise WeightsError(f"{path}: embedding value {i} is {float(vec[i])} ({int(bad.sum())} of {hidden_size} are "
                           "NaN/inf); a runtime would draft garbage with it; re-download it")
    return vec


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
    tied = cfg.tie_word_embeddings
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
        name = TOKEN_EMBD if what == "embed" else (OUTPUT if OUTPUT in byname else TOKEN_EMBD)  # tied: no output.weight
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
