"""Helpers for the parity tests: the fixture target and prompt, a converted GGUF drafter,
and a `parity` CLI run with its JSON report (the payload of the envelope `--report` writes)."""
import json

from tests.conftest import DRAFTERS, TARGETS

QWEN = TARGETS / "qwen3-tiny"
PROMPT = "1,5,9,33,71,100,7,250"


def gguf_of(cli, tmp_path, drafter="qwen3-flat", outtype="q8_0", name="d.gguf", fmt="llama.cpp"):
    out = tmp_path / name
    code, _, se = cli("convert", DRAFTERS / drafter, "--target-dir", QWEN, "--outtype", outtype, "--format", fmt,
                      "-o", out)
    assert code == 0, se
    return out


def parity(cli, tmp_path, *extra, drafter="qwen3-flat", target=QWEN, prompt=PROMPT, n=20):
    rep = tmp_path / "report.json"
    code, so, se = cli("parity", "--target", target, "--drafter", DRAFTERS / drafter, "--prompt-ids", prompt,
                       "--max-new-tokens", n, "--device", "cpu", "--report", rep, *extra)
    return code, (json.loads(rep.read_text())["payload"] if rep.exists() else None), so, se

