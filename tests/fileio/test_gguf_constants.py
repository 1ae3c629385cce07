"""dflash_gguf's copy of gguf-py's constants (so the header path need not import gguf-py)
equals the installed gguf-py's, and interoperates with it."""
from __future__ import annotations

import gguf

from dflash_gguf.fileio import gguf_constants as ours


def test_file_constants_match_gguf_py():
    assert (ours.GGUF_MAGIC, ours.GGUF_VERSION, ours.GGUF_DEFAULT_ALIGNMENT) == (
        gguf.GGUF_MAGIC, gguf.GGUF_VERSION, gguf.GGUF_DEFAULT_ALIGNMENT)


def test_value_types_match_gguf_py():
    assert {m.name: m.value for m in ours.GGUFValueType} == {m.name: m.value for m in gguf.GGUFValueType}


def test_ggml_types_and_sizes_match_gguf_py():
    assert {m.name: m.value for m in ours.GGMLQuantizationType} == {m.name: m.value for m in gguf.GGMLQuantizationType}
    assert {t.name: s for t, s in ours.GGML_QUANT_SIZES.items()} == {t.name: s for t, s in gguf.GGML_QUANT_SIZES.items()}


def test_members_compare_and_hash_like_gguf_py():
    q, g = ours.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q4_K
    assert q == g and hash(q) == hash(g) and q.name == g.name and repr(q) == repr(g)
    assert gguf.GGML_QUANT_SIZES[q] == ours.GGML_QUANT_SIZES[g]
    assert {gguf.GGUFValueType.STRING: "s"}[ours.GGUFValueType.STRING] == "s"
