"""Shared by the compare tests: GGUFs converted by our library (cached for the session) and
faulty copies of them, re-written with gguf-py's own GGUFReader / GGUFWriter (not our writer,
so a bug in ours cannot hide a fault)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType, GGUFWriter

from dflash_gguf.convert import convert

from tests.conftest import DRAFTERS, TARGETS, optional_packages

QWEN_DIR = TARGETS / "qwen3-tiny"
LLAMA_GGUF = TARGETS / "llama-tiny.gguf"
TARGET = {
    "qwen3-flat": {"target_dir": QWEN_DIR},
    "qwen3-nested": {"target_dir": QWEN_DIR},
    "qwen3-dflash2": {"target_dir": QWEN_DIR},
    "gemma-style": {"target_gguf": LLAMA_GGUF},
}
OUTTYPES = ("auto", "f32", "f16", "bf16", "q8_0", "q4_k_m")
SUMMARY = re.compile(r"^(\d+) tensors: (\d+) bit-identical, (\d+) within tolerance, (\d+) out of tolerance, "
                     r"(\d+) missing(, (\d+) extra)?(; \d+ constants (match|: \d+ differ))?$")


@pytest.fixture(params=[True, False], ids=["numba", "numpy"])
def numba_mode(request):
    """The numba kernels or the NumPy path (True / False), restored after."""
    from dflash_gguf.quants import _numba

    if request.param and not _numba.AVAILABLE:
        pytest.skip("numba is not installed")
    prev = _numba.set_enabled(request.param)
    yield request.param
    _numba.set_enabled(prev)


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """(drafter, format, outtype) -> path of a GGUF converted by our library (cached per session)."""
    root = tmp_path_factory.mktemp("compare")
    cache: dict[tuple[str, str, str], object] = {}

    def get(drafter: str, fmt: str = "llama.cpp", outtype: str = "auto"):
        key = (drafter, fmt, outtype)
        if key not in cache:
            out = root / f"{drafter}-{fmt}-{outtype}.gguf"
            target = {} if fmt == "lucebox" else TARGET[drafter]
            with optional_packages():  # a target dir's tokenizer needs the [tokenizers] extra
                convert(DRAFTERS / drafter, out, format=fmt, outtype=outtype, **target)
            cache[key] = out
        return cache[key]

    return get


def rewrite(src, dst, edit=lambda name, typ, shape, data: [(name, typ, shape, data)]):
    """Copy a GGUF with gguf-py, passing each tensor through ``edit(name, type, shape (torch
    order), flat uint8 bytes) -> [(name, type, shape, bytes), ...]`` (empty list = drop it)."""
    r = GGUFReader(src)
    w = GGUFWriter(dst, str(r.fields["general.architecture"].contents()))
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), f.types[0], sub_type=f.types[1])
        else:
            w.add_key_value(key, f.contents(), f.types[0])
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        data = np.asarray(t.data).view(np.uint8).reshape(-1).copy()
        for name, typ, shp, raw in edit(t.name, t.tensor_type, shape, data):
            bs, ts = GGML_QUANT_SIZES[typ]
            w.add_tensor(name, raw.reshape(*shp[:-1], shp[-1] // bs * ts), raw_dtype=typ)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def tensor_bytes(path):
    return {t.name: np.asarray(t.data).view(np.uint8).reshape(-1).copy() for t in GGUFReader(path).tensors}


def by_name(report):
    return {t.name: t for t in report.tensors}


def failing(report):
    return {t.name: t for t in report.tensors if not t.passed}
