"""`compare-weights` on the command line (cli/compare.py): table, summary, JSON, exit codes, one-line errors."""
from __future__ import annotations

import json

import pytest

from tests.compare.conftest import LLAMA_GGUF, rewrite, tensor_bytes
from tests.conftest import DRAFTERS


def test_cli_pass_table_and_summary(cli, converted):
    code, out, err = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "llama.cpp", "q8_0"))
    assert code == 0, err
    assert "25 tensors: 25 bit-identical, 0 within tolerance, 0 out of tolerance, 0 missing" in out
    assert "blk.0.ffn_up.weight" in out and "BF16→Q8_0" in out


def test_cli_json_has_every_number(cli, converted):
    code, out, _ = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "lucebox", "q4_k_m"),
                       "--json")
    env = json.loads(out)
    doc = env["payload"]
    assert code == 0 and env["exit_code"] == 0 and env["verdict"] == doc["verdict"] == "pass"
    assert doc["format"] == "lucebox" and "exit_code" not in doc and env["findings"] == []
    assert doc["summary"]["bit-identical"] == doc["summary"]["tensors"] == len(doc["tensors"])
    t = next(t for t in doc["tensors"] if t["type"] == "Q4_K")
    for k in ("rel_rms", "max_abs", "max_abs_index", "cosine", "norm_ratio", "expected_rel_rms",
              "deviation_from_ggml", "bytes_differing", "limit", "shape", "ne", "source_ne", "flags"):
        assert t[k] is not None, k


def test_cli_fail_exit_code_and_details(cli, converted, tmp_path):
    src = converted("qwen3-flat", "llama.cpp", "auto")
    orig = tensor_bytes(src)

    def edit(name, typ, shape, data):
        if name == "blk.0.attn_q.weight":
            data = orig["blk.0.attn_output.weight"]
        return [(name, typ, shape, data)]

    bad = rewrite(src, tmp_path / "bad.gguf", edit)
    code, out, err = cli("compare-weights", DRAFTERS / "qwen3-flat", bad)
    assert code == 20 and not err
    assert "25 tensors: 24 bit-identical, 0 within tolerance, 1 out of tolerance, 0 missing" in out
    assert "swapped-with:layers.0.self_attn.o_proj.weight" in out
    *_, counts, verdict = out.strip().splitlines()
    assert counts.startswith("25 tensors: 24 bit-identical") and " MB in " in counts
    assert verdict.startswith("compare-weights: FAIL (exit 20): 1 file, 1 error, 0 warnings; "
                              "first: tensor-out in bad.gguf")
    code, out, _ = cli("compare-weights", DRAFTERS / "qwen3-flat", bad, "--json")
    env = json.loads(out)
    assert code == 20 and env["exit_code"] == 20 and env["verdict"] == env["payload"]["verdict"] == "fail"
    assert env["summary"] == verdict and [f["rule_id"] for f in env["findings"]] == ["tensor-out"]


def test_cli_gguf_vs_gguf(cli, converted):
    code, out, err = cli("compare-weights", converted("qwen3-flat", "llama.cpp", "bf16"),
                         converted("qwen3-flat", "dflash-draft", "q8_0"), "--top", "3")
    assert code == 0, err
    assert "25 tensors: 25 bit-identical" in out and "3 worst of 25" in out


def test_cli_tolerance_makes_it_fail(cli, converted):
    code, out, _ = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "llama.cpp", "q4_k_m"),
                       "--tolerance", "q4_K=0.01", "--tolerance", "q5_0=0.5")
    assert code == 20 and "--tolerance" in out


@pytest.mark.parametrize("args,code,words", [
    (("--tolerance", "q9=1"), 2, "unknown ggml type"),
    (("--tolerance", "-3"), 2, "not a positive number"),
])
def test_cli_bad_tolerance(cli, converted, args, code, words):
    c, out, err = cli("compare-weights", DRAFTERS / "qwen3-flat", converted("qwen3-flat", "lucebox", "auto"), *args)
    assert c == code and words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_bad_inputs_one_line_each(cli, converted, tmp_path):
    good = converted("qwen3-flat", "lucebox", "auto")
    c, _, err = cli("compare-weights", tmp_path / "nope", good)
    assert c == 5 and "no such file or directory" in err
    c, _, err = cli("compare-weights", DRAFTERS / "qwen3-flat", tmp_path / "nope.gguf")
    assert c == 5 and "nope.gguf" in err
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[:1000])
    c, _, err = cli("compare-weights", DRAFTERS / "qwen3-flat", trunc)
    assert c == 6 and "Traceback" not in err
    c, out, err = cli("compare-weights", DRAFTERS / "gemma-style", LLAMA_GGUF, "--json")
    env = json.loads(out)
    assert c == 6 and "not a DFlash drafter" in err and env["exit_code"] == 6 and env["verdict"] == "error"
    assert env["payload"] == {"a": str(DRAFTERS / "gemma-style"), "b": str(LLAMA_GGUF)}
    assert env["error"]["type"] == "GGUFFormatError" and "not a DFlash drafter" in env["error"]["message"]
    c, _, err = cli("compare-weights", tmp_path, good)  # a dir without weights
    assert c == 5 and "model.safetensors" in err


def test_rows_sort_failures_first_then_by_error():
    from types import SimpleNamespace as T

    from dflash_gguf.cli.compare import _key
    from dflash_gguf.compare.report import BIT_IDENTICAL, EXTRA, MISSING, OUT, SHAPE_MISMATCH, WITHIN

    rows = [T(status=BIT_IDENTICAL, rel_rms=0.0, name="a"), T(status=WITHIN, rel_rms=0.01, name="b"),
            T(status=WITHIN, rel_rms=0.03, name="c"), T(status=OUT, rel_rms=float("nan"), name="d"),
            T(status=OUT, rel_rms=0.5, name="e"), T(status=EXTRA, rel_rms=None, name="f"),
            T(status=SHAPE_MISMATCH, rel_rms=None, name="g"), T(status=MISSING, rel_rms=None, name="h")]
    assert [r.name for r in sorted(rows, key=_key)] == ["h", "g", "f", "d", "e", "c", "b", "a"]


def test_numbers_in_the_table():
    from dflash_gguf.cli.compare import _num

    assert [_num(None), _num(0.0123456), _num(1.0, ".6f"), _num(float("inf")), _num(7)] == [
        "-", "0.0123", "1.000000", "inf", "7"]
