"""Legacy DSpark GGUFs: the fork layout early DSpark drafters were published in, and its
migration to the file mainline llama.cpp loads.

A legacy file has ``general.architecture = dspark``, the standard keys under ``dspark.``, the
DSpark keys under a doubled ``dspark.dspark.`` prefix, its own tensor names
(``dspark.markov_head_a.weight``...), taps stored as the z-lab ids (the output of layer L, one
lower than mainline's layer-input ids) and no vocabulary (at most a ``tokenizer.ggml.model =
none`` stub). No mainline build has a ``dspark`` architecture, so it cannot load.

The mapping is the one the fork's own migration applies (``gguf-dspark-to-dflash``:
``gguf-py/gguf/scripts/gguf_dspark_to_dflash.py`` in PrismML-Eng/llama.cpp, ``TENSOR_MAP`` and
``transform_kv``), aligned with what mainline's converter writes for the same checkpoint
(``DSparkModel`` in ``conversion/qwen.py``): the keys mainline does not read are dropped after
they are checked, and its two DSpark keys (``sample_from_anchor``, ``has_confidence_head``)
are written. Only the header changes; tensor bytes are copied as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..errors import GGUFFormatError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_header import show
from ..fileio.types import KV
from .dspark import CONF_PROJ, CONF_PROJ_BIAS, HAS_CONFIDENCE_HEAD, MARKOV_W1, MARKOV_W2, SAMPLE_FROM_ANCHOR
from .llama_cpp import MAINLINE
from .meta import MASK_ID
from .names import OUTPUT, TOKEN_EMBD

LEGACY_ARCH = "dspark"
_STD, _OWN = "dspark.", "dspark.dspark."  # the standard keys' prefix, the DSpark keys' doubled one
_ARCH = "dflash"  # mainline's architecture for every DFlash-family drafter

# Legacy tensor -> mainline tensor (the fork's TENSOR_MAP); every other name is already mainline's.
TENSOR_RENAMES: dict[str, str] = {
    "dspark.fc.weight": MAINLINE.fc_name,
    "dspark.hidden_norm.weight": MAINLINE.hidden_norm_name,
    "dspark.markov_head_a.weight": MARKOV_W1,
    "dspark.markov_head_b.weight": MARKOV_W2,
    "dspark.confidence_head.weight": CONF_PROJ,
    "dspark.confidence_head.bias": CONF_PROJ_BIAS,
}
# Legacy DSpark key (after "dspark.dspark.") -> mainline key; None: read, checked, not written
# (mainline takes the Markov rank from markov_w1's shape, always feeds the Markov row to the
# confidence head, and has no log-SNR conditioning).
KEY_RENAMES: dict[str, str | None] = {
    "block_size": f"{_ARCH}.block_size",
    "target_layers": f"{_ARCH}.target_layers",  # each element +1
    "mask_token_id": MASK_ID,
    "markov_rank": None,
    "confidence_head": None,  # becomes dflash.has_confidence_head, from the tensors as mainline's converter does
    "confidence_head_with_markov": None,
    "log_snr_conditioning": None,
    "min_log_snr": None,
    "max_log_snr": None,
}
# What a full-vocabulary mainline drafter borrows from the target at load (TENSOR_NOT_REQUIRED in
# src/models/dflash.cpp; shared through ctx_other): --drop-shared-tensors leaves them out.
SHARED_TENSORS = (TOKEN_EMBD, OUTPUT)
TAP_SHIFT = 1  # legacy taps name the layer whose output is tapped; mainline stores the next layer's input


def is_legacy_dspark(arch: str | None) -> bool:
    """The fork's migration accepts exactly the files whose architecture is ``dspark``."""
    return arch == LEGACY_ARCH


def migrate_command(name: str = "FILE") -> str:
    return f"dflash-gguf retarget {name} --target-gguf DONOR.gguf -o OUT.gguf"


@dataclass(frozen=True)
class Migration:
    """A legacy header in mainline's spelling: what ``meta_from_gguf`` reads as a mainline file."""

    kvs: dict[str, KV]  # file order, general.architecture = dflash, no tokenizer
    shapes: dict[str, tuple[int, ...]]  # mainline tensor name -> numpy-order shape
    renames: dict[str, str]  # legacy tensor name -> mainline name (every tensor)
    vocab_size: int  # the target vocabulary the Markov head indexes: the donor must have it
    taps: tuple[int, ...]  # as stored in the legacy file (z-lab ids)


def _bad(where: str, msg: str) -> GGUFFormatError:
    return GGUFFormatError(f"{where}: legacy DSpark GGUF: {msg}")


def _bool(kvs: Mapping[str, KV], key: str) -> bool | None:
    kv = kvs.get(key)
    return None if kv is None else bool(kv.value)


def legacy_taps(kvs: Mapping[str, KV]) -> tuple[int, ...] | None:
    """The taps a legacy file stores (z-lab ids), or None when the key is missing or not a list
    of integers."""
    kv = kvs.get(_OWN + "target_layers")
    if kv is None or kv.type != T.ARRAY or not all(isinstance(i, int) and not isinstance(i, bool) for i in kv.value):
        return None
    return tuple(int(i) for i in kv.value)


def migrate_header(kvs: Mapping[str, KV], shapes: Mapping[str, tuple[int, ...]], path: str = "") -> Migration:
    """The legacy header ``kvs`` / ``shapes`` as mainline spells it.

    Raises:
        GGUFFormatError: a part mainline cannot run (log-SNR conditioning, a confidence head
            without the Markov row), a legacy tensor outside the mapping, or taps missing.
    """
    where = str(path)
    renames: dict[str, str] = {}
    for name in shapes:
        new = TENSOR_RENAMES.get(name, name)
        if name.startswith("dspark.log_snr_"):
            raise _bad(where, f"tensor {show(name)} is log-SNR conditioning, which mainline llama.cpp does not "
                              "implement; no mainline file can carry this drafter (run it with the fork)")
        if name.startswith(_STD) and new == name:
            raise _bad(where, f"tensor {show(name)} is not in the legacy DSpark mapping (docs/formats.md); "
                              "it has no mainline name")
        renames[name] = new
    if _bool(kvs, _OWN + "log_snr_conditioning"):
        raise _bad(where, f"{_OWN}log_snr_conditioning = true: mainline llama.cpp has no log-SNR conditioning; "
                          "no mainline file can carry this drafter (run it with the fork)")
    has_conf = "dspark.confidence_head.weight" in shapes
    if has_conf and _bool(kvs, _OWN + "confidence_head_with_markov") is False:
        raise _bad(where, f"{_OWN}confidence_head_with_markov = false: mainline's confidence head always reads the "
                          "Markov row (conf_proj {n_embd + rank, 1}); this head cannot run there")
    taps = legacy_taps(kvs)
    if taps is None:
        raise _bad(where, f"{_OWN}target_layers is missing or not a list of integers; the taps cannot be migrated")
    w1 = shapes.get("dspark.markov_head_a.weight")
    if w1 is None or len(w1) != 2:
        raise _bad(where, "tensor dspark.markov_head_a.weight is missing or not 2-D; not a DSpark drafter")
    rank = kvs.get(_OWN + "markov_rank")
    if rank is not None and rank.value != w1[-1]:
        raise _bad(where, f"{_OWN}markov_rank = {rank.value} but dspark.markov_head_a.weight has rank {w1[-1]} "
                          "(corrupt header; re-export it)")

    out: dict[str, KV] = {}
    for key, kv in kvs.items():
        if key == "general.architecture":
            out[key] = KV(key, _ARCH, T.STRING)
        elif key.startswith(_OWN):
            rest = key[len(_OWN):]
            new = KEY_RENAMES.get(rest, f"{_ARCH}.{rest}")  # unknown DSpark keys: the fork's rule
            if new == f"{_ARCH}.target_layers":
                out[new] = KV(new, [i + TAP_SHIFT for i in taps], T.ARRAY, kv.sub_type or T.INT32)
            elif new is not None:
                out[new] = KV(new, kv.value, kv.type, kv.sub_type)
        elif key == _STD + "vocab_size" or (key.startswith("tokenizer.") and key != MASK_ID):
            continue  # the vocabulary is the donor's (a legacy file has at most a "none" stub)
        elif key.startswith(_STD):
            new = f"{_ARCH}.{key[len(_STD):]}"
            out[new] = KV(new, kv.value, kv.type, kv.sub_type)
        else:
            out[key] = kv
    # mainline's DSparkModel writes these two last among the hparams; a DFlash-lineage
    # checkpoint (the kind legacy files came from) samples from the anchor unless the file says
    # otherwise, and has_confidence_head follows the tensors, as mainline's converter decides it
    anchor = f"{_ARCH}.{SAMPLE_FROM_ANCHOR}"
    out.setdefault(anchor, KV(anchor, True, T.BOOL))
    out[f"{_ARCH}.{HAS_CONFIDENCE_HEAD}"] = KV(f"{_ARCH}.{HAS_CONFIDENCE_HEAD}", has_conf, T.BOOL)
    return Migration(out, {renames[n]: s for n, s in shapes.items()}, renames, int(w1[0]), taps)
