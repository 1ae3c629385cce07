"""Helpers of the diagnose tests (also used by tests/cli/test_diagnose.py)."""
from tests.conftest import RUNTIME, rewrite_gguf


def plant_theta(dst):
    """fixtures/runtime/drafter.gguf with RoPE theta 1e4 instead of the trained 1e6: the fault
    stage 2 must catch (the key found by its suffix: its prefix is the file's architecture)."""
    from dflash_gguf.fileio.gguf_reader import read_gguf

    key = next(k for k in read_gguf(RUNTIME / "drafter.gguf").kvs if k.endswith(".rope.freq_base"))
    return rewrite_gguf(RUNTIME / "drafter.gguf", dst, values={key: 1e4})
