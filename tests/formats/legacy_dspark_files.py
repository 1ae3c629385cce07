"""Legacy DSpark GGUFs for tests: a mainline DSpark drafter we convert, written back in the fork's
legacy layout (``dflash_gguf.formats.legacy_dspark``: the mapping run backwards) with gguf-py's
GGUFWriter, plus the two shared tensors the fork's legacy files carry."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dflash_gguf.formats.legacy_dspark import TENSOR_RENAMES
from tests.conftest import TARGETS

DONOR = TARGETS / "llama-tiny.gguf"  # the target the drafter pairs with: vocab 512, hidden 64, 3 layers
VOCAB, HIDDEN, RANK = 512, 64, 32


def mainline_drafter(root: Path) -> Path:
    """A DSpark checkpoint (Qwen3DSparkModel, full vocabulary, confidence head, taps 0 1 2)
    converted by us to mainline llama.cpp with the donor's vocabulary."""
    from dflash_gguf.convert import convert
    from tests.convert.dspark_ckpt import dspark_config, write_dspark

    out = root / "mainline.gguf"
    if not out.exists():
        ckpt = write_dspark(root / "ckpt", dspark_config("Qwen3DSparkModel", taps=(0, 1, 2)))
        convert(ckpt, out, target_gguf=DONOR)
    return out


def to_legacy(mainline: Path, out: Path, *, shared: bool = True, add: dict | None = None,
              add_tensors: dict[str, np.ndarray] | None = None) -> Path:
    """``mainline`` written as the fork's legacy file: arch ``dspark``, ``dspark.`` / ``dspark.dspark.``
    keys, taps one lower, legacy tensor names, no vocabulary but a ``none`` stub, and (``shared``)
    its own ``token_embd.weight`` / ``output.weight``. ``add``: legacy keys {key: (value, type,
    sub_type)}; ``add_tensors``: more tensors."""
    from gguf import GGUFReader, GGUFValueType as V, GGUFWriter

    r = GGUFReader(mainline)
    w = GGUFWriter(out, "dspark")
    back = {v: k for k, v in TENSOR_RENAMES.items()}

    def put(key, f, value=None):
        w.add_key_value(key, f.contents() if value is None else value, f.types[0],
                        sub_type=f.types[1] if len(f.types) > 1 else None)

    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in ("general.architecture", "dflash_gguf.version", "dflash.sample_from_anchor"):
            continue
        if k == "tokenizer.ggml.mask_token_id":
            put("dspark.dspark.mask_token_id", f)
        elif k.startswith("tokenizer."):
            continue
        elif k == "dflash.target_layers":
            put("dspark.dspark.target_layers", f, [i - 1 for i in f.contents()])
            w.add_uint32("dspark.dspark.markov_rank", RANK)
        elif k == "dflash.block_size":
            put("dspark.dspark.block_size", f)
        elif k == "dflash.has_confidence_head":
            put("dspark.dspark.confidence_head", f)
            w.add_bool("dspark.dspark.confidence_head_with_markov", True)
            w.add_bool("dspark.dspark.log_snr_conditioning", False)
        elif k.startswith("dflash."):
            put("dspark." + k.removeprefix("dflash."), f)
        else:
            put(k, f)
    w.add_uint32("dspark.vocab_size", VOCAB)
    w.add_string("tokenizer.ggml.model", "none")  # the fork's stub
    for k, (value, typ, sub) in (add or {}).items():
        w.add_key_value(k, value, V(typ), sub_type=sub)
    for t in r.tensors:
        w.add_tensor(back.get(t.name, t.name), np.array(t.data), raw_dtype=t.tensor_type)
    rng = np.random.default_rng(5)
    extra = dict(add_tensors or {})
    if shared:
        extra = {"token_embd.weight": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16),
                 "output.weight": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16), **extra}
    for name, arr in extra.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def llama_cpp_available() -> bool:
    """Real llama.cpp can be loaded: llama-cpp-python and the native library it is pointed at."""
    import importlib.util

    lib = os.environ.get("LLAMA_CPP_LIB_PATH")
    return importlib.util.find_spec("llama_cpp") is not None and bool(lib) and any(
        (Path(lib) / n).exists() for n in ("libllama.so", "libllama.dylib"))
