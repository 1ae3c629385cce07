"""`check` and `check-instruct` on the command line (cli/checks.py): the exit-code tables, the
order findings are shown in, the text report lines against the JSON document and the file, and a
failure still being one JSON document with --json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGUFReader

from dflash_gguf.cli.checks import _by_severity, report_exit_code, verdict_exit_code
from dflash_gguf.guards.findings import CheckReport, Finding, Severity
from dflash_gguf.guards.instruct import Verdict
from tests.conftest import FIXTURES

GUARDS = FIXTURES / "guards"
DRAFTER = GUARDS / "qwen3-8b-dflash.gguf"
BASE_TARGET = GUARDS / "llama-3.1-8b.gguf"  # a base model with another vocabulary: pairing errors


@pytest.mark.parametrize("verdict,allow,code", [
    (Verdict.INSTRUCT, False, 0), (Verdict.INSTRUCT, True, 0), (Verdict.BASE, False, 10), (Verdict.BASE, True, 10),
    (Verdict.UNKNOWN, False, 11), (Verdict.UNKNOWN, True, 0),
])
def test_verdict_exit_codes(verdict, allow, code):
    assert verdict_exit_code(verdict, allow) == code


def _report(*findings: Finding) -> CheckReport:
    return CheckReport(Path("d.gguf"), findings, (Path("d.gguf"),), None, False, 1, 100, 0)


def _f(sev: Severity, category: str = "integrity", code: str = "c") -> Finding:
    return Finding(sev, code, "m", category=category)


def test_report_exit_codes_put_the_file_before_the_pairing():
    assert report_exit_code(_report()) == 0
    assert report_exit_code(_report(_f(Severity.WARNING), _f(Severity.INFO, "pairing"))) == 0
    assert report_exit_code(_report(_f(Severity.ERROR, "pairing"))) == 13
    for category in ("integrity", "drafter", "data"):
        assert report_exit_code(_report(_f(Severity.ERROR, "pairing"), _f(Severity.ERROR, category))) == 12


def test_findings_are_shown_errors_first_in_their_order():
    fs = [_f(Severity.INFO, code="i1"), _f(Severity.ERROR, code="e1"), _f(Severity.WARNING, code="w1"),
          _f(Severity.ERROR, code="e2"), _f(Severity.INFO, code="i2")]
    assert [f.code for f in _by_severity(tuple(fs))] == ["e1", "e2", "w1", "i1", "i2"]


def test_check_text_report_is_the_json_report(cli):
    code, text, _ = cli("check", DRAFTER, "--target", BASE_TARGET)
    jcode, js, _ = cli("check", DRAFTER, "--target", BASE_TARGET, "--json")
    doc = json.loads(js)
    assert code == jcode == doc["exit_code"] == 13
    s = doc["summary"]
    n_tensors = len(GGUFReader(DRAFTER).tensors)
    assert s["tensors"] == n_tensors and s["file_bytes"] == DRAFTER.stat().st_size and s["errors"] >= 1
    lines = text.splitlines()
    assert lines[0] == (f"{DRAFTER}: {s['errors']} error{'s' * (s['errors'] != 1)} (header only; "
                        f"{n_tensors:,} tensors, {DRAFTER.stat().st_size:,} bytes)")
    assert lines[1:] == [f"  {f['severity']:<7}  {f['code']}: {f['message']}" + (f"  [{f['where']}]" if f["where"] else "")
                         for f in doc["findings"]]
    assert all(f["category"] == "pairing" for f in doc["findings"])


def test_a_clean_file_is_one_ok_line(cli):
    code, text, _ = cli("check", DRAFTER, "--deep", "--no-progress")
    n_tensors = len(GGUFReader(DRAFTER).tensors)
    assert code == 0
    assert text.splitlines() == [f"{DRAFTER}: OK (header + data; {n_tensors:,} tensors, {DRAFTER.stat().st_size:,} bytes)"]


def test_check_instruct_text_is_the_json_evidence(cli):
    for name, code in (("qwen3-8b-dflash.gguf", 0), ("frankenmerge-7b.gguf", 11), ("qwen3-8b-base.gguf", 10)):
        path = GUARDS / name
        rc, text, _ = cli("check-instruct", path)
        _, js, _ = cli("check-instruct", path, "--json")
        doc = json.loads(js)
        assert rc == doc["exit_code"] == code
        want = [f"{path}: {doc['verdict']} ({doc['reason']})"]
        want += [f"  tier {e['tier']}  {e['leans'] or 'info':<8}  {e['field']} = {e['value']}  ({e['description']})"
                 for e in doc["evidence"]]
        if doc["verdict"] == "unknown":
            want.append("  pass --allow-unknown to accept an unknown verdict")
        assert text.splitlines() == want
    _, text, _ = cli("check-instruct", GUARDS / "frankenmerge-7b.gguf", "--allow-unknown")
    assert "pass --allow-unknown" not in text  # accepted: no hint


@pytest.mark.parametrize("command", ["check", "check-instruct"])
def test_a_failure_is_still_one_json_document(cli, tmp_path, command):
    missing = tmp_path / "nope.gguf"
    code, so, se = cli(command, missing, "--json")
    doc = json.loads(so)
    assert code == doc["exit_code"] == 5 and doc["file"] == str(missing)
    assert doc["error"]["type"] == "InputError" and "nope.gguf" in doc["error"]["message"]
    assert se.startswith("error: ") and len(se.strip().splitlines()) == 1
    code, so, se = cli(command, missing)
    assert code == 5 and so == ""
