"""--format and --report on every verdict command (cli/_verdict.py): each format, on a passing and
a failing case, read back by a real validator — the envelope's JSON Schema, the official SARIF
2.1.0 schema, junitparser — and the text output ending with the envelope's verdict line."""
from __future__ import annotations

import importlib.util
import json
import re

import pytest

from tests.conftest import FIXTURES, rewrite_gguf
from tests.verdict.conftest import envelope_validator, junit_suites, sarif_validator

RUNTIME = FIXTURES / "runtime"
GUARDS = FIXTURES / "guards"
_ANNOTATION = re.compile(r"::(error|warning|notice) file=[^,:]+,title=[^,:]+::.+")


def _cases(tmp_path) -> dict[str, tuple[tuple, int]]:
    """command line -> expected exit code, for each command, passing and failing."""
    theta = rewrite_gguf(RUNTIME / "drafter.gguf", tmp_path / "theta.gguf", values={"dflash.rope.freq_base": 1e4})
    cut = tmp_path / "cut.gguf"
    cut.write_bytes((GUARDS / "qwen3-8b-dflash.gguf").read_bytes()[:3000])
    gate = ("gate", "--drafter", RUNTIME / "drafter", "--target", RUNTIME / "target.gguf")
    cases = {
        "check-pass": (("check", RUNTIME / "drafter.gguf", "--target", RUNTIME / "target.gguf"), 0),
        "check-fail": (("check", GUARDS / "qwen3-8b-dflash.gguf", "--target", GUARDS / "llama-3.1-8b.gguf"), 13),
        "check-unreadable": (("check", RUNTIME / "drafter.gguf", cut), 6),
        "instruct-pass": (("check-instruct", GUARDS / "qwen3-8b.gguf", GUARDS / "qwen3-8b-dflash.gguf"), 0),
        "instruct-fail": (("check-instruct", GUARDS / "qwen3-8b-base.gguf"), 10),
        "compare-pass": (("compare-weights", RUNTIME / "drafter", RUNTIME / "drafter.gguf"), 0),
        "compare-fail": (("compare-weights", RUNTIME / "drafter", theta), 20),
        "gate-pass": ((*gate, "--drafter-gguf", RUNTIME / "drafter.gguf"), 0),
        "gate-fail": ((*gate, "--drafter-gguf", theta), 50),
    }
    if importlib.util.find_spec("torch") is not None:
        parity = ("parity", "--target", RUNTIME / "target", "--drafter", RUNTIME / "drafter", "--prompt-ids",
                  "1,5,9,33,71,100,7,250", "--max-new-tokens", "12", "--device", "cpu")
        cases["parity-pass"] = ((*parity, "--drafter-gguf", RUNTIME / "drafter.gguf"), 0)
        cases["parity-fail"] = ((*parity, "--drafter-gguf", theta, "--min-top1", "0.9"), 31)
    return cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return _cases(tmp_path_factory.mktemp("verdict"))


@pytest.mark.parametrize("case", ["check-pass", "check-fail", "check-unreadable", "instruct-pass", "instruct-fail",
                                  "compare-pass", "compare-fail", "gate-pass", "gate-fail", "parity-pass",
                                  "parity-fail"])
def test_every_format_validates(cli, cases, case, tmp_path, monkeypatch):
    if case not in cases:
        pytest.skip("parity needs torch (the [torch] extra)")
    args, want = cases[case]
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code, text, _ = cli(*args)
    assert code == want
    code, js, _ = cli(*args, "--format", "json", "--report", tmp_path / "r.sarif", "--report", tmp_path / "r.xml")
    assert code == want
    doc = json.loads(js)
    envelope_validator().validate(doc)
    assert doc["exit_code"] == want and doc["command"] == args[0]
    assert text.rstrip("\n").splitlines()[-1] == doc["summary"]  # the text ends with the verdict line
    assert (doc["verdict"] == "pass") == (want == 0)
    if want:
        assert any(f["severity"] == "error" for f in doc["findings"])
    sarif = json.loads((tmp_path / "r.sarif").read_text())
    sarif_validator().validate(sarif)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == [f["rule_id"] for f in doc["findings"]]
    suites = list(junit_suites((tmp_path / "r.xml").read_text(), tmp_path))
    assert sum(s.failures for s in suites) == len({(f["stage"], f["file"], f["rule_id"]) for f in doc["findings"]
                                                    if f["severity"] == "error" and f["waived"] is None})
    assert sum(s.tests for s in suites) >= len(doc["findings"])
    code, gh, _ = cli(*args, "--format", "github")
    lines = gh.splitlines()
    assert code == want and lines[-1] == doc["summary"].replace("%", "%25")
    assert len(lines) == len(doc["findings"]) + 1 and all(_ANNOTATION.fullmatch(x) for x in lines[:-1])
    for fmt in ("junit", "sarif"):  # on stdout too, the same bytes as the report file
        code, got, _ = cli(*args, "--format", fmt)
        assert code == want and got == (tmp_path / f"r.{'xml' if fmt == 'junit' else 'sarif'}").read_text()


def test_the_github_format_appends_the_job_summary(cli, cases, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    args, want = cases["compare-fail"]
    assert cli(*args, "--format", "github")[0] == want
    md = summary.read_text()
    assert md.startswith("earlier step\n### ❌ dflash-gguf compare-weights: FAIL (exit 20)")
    assert "| error | compare-weights | constant-differs | theta.gguf | key dflash.rope.freq_base |" in md


def test_bad_format_options_are_one_usage_line(cli, tmp_path):
    args = ("check", RUNTIME / "drafter.gguf")
    code, out, err = cli(*args, "--format", "yaml")
    assert code == 2 and out == "" and "--format 'yaml': choose one of text, json, github, junit, sarif" in err
    code, _, err = cli(*args, "--json", "--format", "sarif")
    assert code == 2 and "--json and --format sarif disagree" in err
    code, _, err = cli(*args, "--report", tmp_path / "r.txt")
    assert code == 2 and "the name says no format" in err
    code, _, err = cli(*args, "--report", RUNTIME / "drafter.gguf")  # never replaces an input
    assert code != 0 and not (tmp_path / "r.txt").exists()
    assert (RUNTIME / "drafter.gguf").read_bytes()[:4] == b"GGUF"


@pytest.mark.parametrize("command", ["parity", "bench"])
def test_the_old_json_path_spelling_says_what_to_use(cli, command):
    code, out, err = cli(command, "--json", "r.json", "--target", "t.gguf")
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].endswith("to write a file use --report r.json")
