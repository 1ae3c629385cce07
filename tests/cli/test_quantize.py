"""`quantize`'s command line: the required TYPE, --threads."""
from __future__ import annotations

import ast
import json

import pytest

from tests.quants.test_gguf_file import odd_gguf


@pytest.mark.parametrize("value", ["0", "-1"])
def test_threads_below_one_is_a_usage_error(cli, tmp_path, value):
    src = odd_gguf(tmp_path / "odd.gguf")
    code, so, se = cli("quantize", src, tmp_path / "x.gguf", "q4_k_m", "--threads", value)
    assert code == 2
    assert se.strip().splitlines() == [f"error: --threads must be at least 1 (got {value})"]
    assert not (tmp_path / "x.gguf").exists()


def test_threads_not_a_number_is_refused(cli, tmp_path):
    code, _, se = cli("quantize", tmp_path / "in.gguf", tmp_path / "x.gguf", "q8_0", "--threads", "two")
    assert code == 2 and "--threads" in se


def test_any_thread_count_writes_the_same_file(cli, tmp_path):
    src = odd_gguf(tmp_path / "odd.gguf")
    outs = []
    for n in ("1", "3"):
        out = tmp_path / f"q{n}.gguf"
        code, _, se = cli("quantize", src, out, "q4_k_m", "--threads", n)
        assert code == 0, se
        outs.append(out.read_bytes())
    default = tmp_path / "default.gguf"
    assert cli("quantize", src, default, "q4_k_m")[0] == 0
    assert outs[0] == outs[1] == default.read_bytes()


def test_ctrl_c_is_one_line_and_exit_130(cli, tmp_path, monkeypatch):
    """typer turns a KeyboardInterrupt into a silent Exit(130): the CLI still says what happened."""
    from dflash_gguf.quants import gguf_file

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_file, "quantize_gguf", interrupted)
    code, out, err = cli("quantize", tmp_path / "in.gguf", tmp_path / "out.gguf", "q8_0")
    assert code == 130 and err.strip() == "error: Ctrl-C: the partial output was removed." and out == ""


def test_the_type_is_required(cli, tmp_path):
    """llama-quantize has no default type, and neither has quantize: no silent Q8_0."""
    src = odd_gguf(tmp_path / "odd.gguf")
    code, so, se = cli("quantize", src, tmp_path / "x.gguf")
    assert code == 2 and so == ""
    (line,) = se.strip().splitlines()
    assert line.startswith("error: quantize: missing TYPE (one of q8_0, q6_k, q5_k_m, ") and line.endswith(
        ", f32, copy): dflash-gguf quantize IN.gguf OUT.gguf TYPE")
    assert not (tmp_path / "x.gguf").exists()
    code, _, se = cli("quantize", src, "--dry-run")
    assert code == 2 and "missing TYPE (one of q8_0" in se and len(se.strip().splitlines()) == 1


def test_a_type_where_out_goes(cli, tmp_path):
    src = odd_gguf(tmp_path / "odd.gguf")
    # a dry run writes nothing, so it needs no OUT: IN TYPE --dry-run
    code, so, se = cli("quantize", src, "Q4_K_M", "--dry-run", "--json")
    assert code == 0, se
    assert json.loads(so)["ftype"].upper() == "Q4_K_M"
    # without --dry-run the output is missing, and the line says where the type goes
    code, so, se = cli("quantize", src, "q4_k_m")
    assert code == 2 and so == "" and not (tmp_path / "q4_k_m").exists()
    assert se.strip().splitlines() == ["error: quantize: q4_k_m is the TYPE; name the output before it: "
                                       "dflash-gguf quantize IN.gguf OUT.gguf q4_k_m (or add --dry-run)"]


_IMPORTS_PROBE = """
import sys
from dflash_gguf.cli import main
code = main(sys.argv[1:])
print(code, sorted(m for m in ("numpy", "gguf", "numba", "dflash_gguf.formats") if m in sys.modules))
"""


@pytest.mark.parametrize("ftype, imported", [("copy", set()), ("q8_0", {"gguf", "numpy"})])
def test_a_copy_only_job_imports_no_numpy_gguf_py_or_numba(tmp_path, ftype, imported):
    """A job that converts nothing (COPY; BF16 from a BF16 file) is a file copy, where start-up
    is a good part of the wall time: it plans and writes without numpy, gguf-py, numba or the
    drafter formats. A job that quantizes imports what it needs (the probe can tell)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    src = odd_gguf(tmp_path / "odd.gguf")
    out = tmp_path / "out.gguf"
    r = subprocess.run([sys.executable, "-c", _IMPORTS_PROBE, "quantize", str(src), str(out), ftype, "--json"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    code, _, mods = r.stdout.strip().splitlines()[-1].partition(" ")
    assert code == "0" and imported <= set(ast.literal_eval(mods)) and ("dflash_gguf.formats" not in mods)
    if ftype == "copy":
        from dflash_gguf.fileio.gguf_reader import read_gguf

        assert mods == "[]"
        a, b = read_gguf(src), read_gguf(out)  # llama-quantize's tensor order, every tensor's bytes kept
        assert {t.name: a.raw(t).tobytes() for t in a.tensors} == {t.name: b.raw(t).tobytes() for t in b.tensors}
