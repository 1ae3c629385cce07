"""Helpers shared by the convert tests: convert a fixture drafter through the CLI, read a GGUF back."""
from __future__ import annotations

from gguf import GGUFReader

from dflash_gguf.formats import FORMATS
from tests.conftest import DRAFTERS, TARGETS

LLAMA_GGUF = TARGETS / "llama-tiny.gguf"
QWEN_DIR = TARGETS / "qwen3-tiny"
# drafter -> target option that pairs with it (same vocab, hidden, enough depth)
PAIRS = {
    "qwen3-flat": ("--target-dir", QWEN_DIR),
    "qwen3-nested": ("--target-dir", QWEN_DIR),
    "qwen3-dflash2": ("--target-dir", QWEN_DIR),
    "gemma-style": ("--target-gguf", LLAMA_GGUF),
}


def kvs(path):
    r = GGUFReader(path)
    return {k: (f.contents(), [t.name for t in f.types]) for k, f in r.fields.items() if not k.startswith("GGUF.")}


def tensors(path):
    r = GGUFReader(path)
    return {t.name: (t.tensor_type.name, bytes(t.data.tobytes())) for t in r.tensors}


def do_convert(cli, tmp_path, drafter, fmt, outtype="auto", name="out.gguf", with_target=False):
    out = tmp_path / name
    args = ["convert", DRAFTERS / drafter, "-o", out, "--format", fmt, "--outtype", outtype]
    if FORMATS[fmt].needs_tokenizer or with_target:
        args += list(PAIRS[drafter])
    code, so, se = cli(*args)
    return code, out, so, se

