"""Helpers of the diagnose tests (also used by tests/cli/test_diagnose.py)."""
from tests.conftest import RUNTIME, rewrite_gguf


def plant_theta(dst):
    """fixtures/runtime/drafter.gguf with RoPE theta 1e4 instead of the trained 1e6: the fault
    stage 2 must catch (the key found by its suffix: its prefix is the file's architecture)."""
    from dflash_gguf.fileio.gguf_reader import read_gguf

    key = next(k for k in read_gguf(RUNTIME / "drafter.gguf").kvs if k.endswith(".rope.freq_base"))
    return rewrite_gguf(RUNTIME / "drafter.gguf", dst, values={key: 1e4})


def plant_target(dst):
    """fixtures/runtime/target.gguf quantized badly by our quantizer: every tensor Q4_0, the tied
    embedding (the head) included (``--pure``; llama-quantize's mix would keep it Q8_0, and the
    64-wide rows leave no K-quant to fall to), the fault stage 3 must catch."""
    from dflash_gguf.quants.ftypes import Overrides
    from dflash_gguf.quants.gguf_file import quantize_gguf

    quantize_gguf(RUNTIME / "target.gguf", dst, "q4_0", force=True, overrides=Overrides(pure=True))
    return dst
