"""`check` and `check-instruct` on the command line (cli/checks.py): the exit-code tables, the
order findings are shown in, the text report lines (and the verdict line they end with) against
the JSON envelope's payload and the file, and a failure still being one JSON document with --json."""
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
    env = json.loads(js)
    (doc,) = env["payload"]["files"]
    assert code == jcode == env["exit_code"] == doc["exit_code"] == 13
    s = doc["summary"]
    n_tensors = len(GGUFReader(DRAFTER).tensors)
    assert s["tensors"] == n_tensors and s["file_bytes"] == DRAFTER.stat().st_size and s["errors"] >= 1
    lines = text.splitlines()
    assert lines[0] == (f"{DRAFTER}: {s['errors']} error{'s' * (s['errors'] != 1)} (header only; "
                        f"{n_tensors:,} tensors, {DRAFTER.stat().st_size:,} bytes)")
    assert lines[1:-1] == [f"  {f['severity']:<7}  {f['code']}: {f['message']}" + (f"  [{f['where']}]" if f["where"] else "")
                           for f in doc["findings"]]
    assert all(f["category"] == "pairing" for f in doc["findings"])
    # the envelope's findings are the report's, with rule ids, and the text ends with its verdict line
    assert [(f["rule_id"], f["stage"], f["message"]) for f in env["findings"]] == [
        (f["code"], "pairing", f["message"]) for f in doc["findings"]]
    assert lines[-1] == env["summary"]
    assert lines[-1].startswith(f"check: FAIL (exit 13): 1 file, {s['errors']} errors, 0 warnings; "
                                f"first: {doc['findings'][0]['code']} in ")


def test_a_clean_file_is_one_ok_line_then_the_verdict(cli):
    code, text, _ = cli("check", DRAFTER, "--deep", "--no-progress")
    n_tensors = len(GGUFReader(DRAFTER).tensors)
    assert code == 0
    assert text.splitlines() == [f"{DRAFTER}: OK (header + data; {n_tensors:,} tensors, {DRAFTER.stat().st_size:,} bytes)",
                                 "check: PASS: 1 file, 0 errors, 0 warnings"]


def test_check_instruct_text_is_the_json_evidence(cli):
    for name, code in (("qwen3-8b.gguf", 0), ("frankenmerge-7b.gguf", 11), ("qwen3-8b-base.gguf", 10)):
        path = GUARDS / name
        rc, text, _ = cli("check-instruct", path)
        _, js, _ = cli("check-instruct", path, "--json")
        env = json.loads(js)
        (doc,) = env["payload"]["files"]
        assert rc == env["exit_code"] == doc["exit_code"] == code
        want = [f"{path}: {doc['verdict']} ({doc['reason']})"]
        want += [f"  tier {e['tier']}  {e['leans'] or 'info':<8}  {e['field']} = {e['value']}  ({e['description']})"
                 for e in doc["evidence"]]
        if doc["verdict"] == "unknown":
            want.append("  pass --allow-unknown to accept an unknown verdict")
        want.append(env["summary"])
        assert text.splitlines() == want
        assert want[-1].startswith("check-instruct: PASS: 1 file" if code == 0 else
                                   f"check-instruct: FAIL (exit {code}): 1 file, 1 error, 0 warnings; "
                                   f"first: instruct-verdict-{doc['verdict']} in {name}: ")
    _, text, _ = cli("check-instruct", GUARDS / "frankenmerge-7b.gguf", "--allow-unknown")
    assert "pass --allow-unknown" not in text  # accepted: no hint


def test_check_instruct_skips_a_drafter(cli):
    """A drafter GGUF is not a target: no instruct verdict, exit 0, a note on stderr."""
    rc, text, err = cli("check-instruct", DRAFTER)
    assert rc == 0 and text.splitlines() == ["check-instruct: PASS: 1 file, 0 errors, 0 warnings"]
    assert err.strip() == f"{DRAFTER}: a drafter (dflash), not a target: no instruct verdict"
    rc, js, _ = cli("check-instruct", DRAFTER, "--json")
    env = json.loads(js)
    assert rc == env["exit_code"] == 0 and env["verdict"] == "pass" and env["findings"] == []
    assert env["payload"]["files"] == [{"file": str(DRAFTER), "verdict": "not-a-target", "exit_code": 0,
                                        "reason": "architecture dflash is a drafter"}]


@pytest.mark.parametrize("command", ["check", "check-instruct"])
def test_a_failure_is_still_one_json_document(cli, tmp_path, command):
    missing = tmp_path / "nope.gguf"
    code, so, se = cli(command, missing, "--json")
    env = json.loads(so)
    (doc,) = env["payload"]["files"]
    assert code == env["exit_code"] == doc["exit_code"] == 5 and doc["file"] == str(missing)
    assert env["verdict"] == "error" and env["error"] == doc["error"]
    assert doc["error"]["type"] == "InputError" and "nope.gguf" in doc["error"]["message"]
    assert [(f["rule_id"], f["file"]) for f in env["findings"]] == [(f"{command}-InputError", str(missing))]
    assert se.startswith("error: ") and len(se.strip().splitlines()) == 1
    code, so, se = cli(command, missing)
    (verdict,) = so.splitlines()  # no verdict on the file: only the verdict line, which names the error
    assert code == 5 and verdict.startswith(
        f"{command}: ERROR (exit 5): 1 file, 1 error, 0 warnings; first: {command}-InputError in nope.gguf: {missing}")
    assert se.startswith("error: ") and len(se.strip().splitlines()) == 1


RUNTIME_GGUF = FIXTURES / "runtime" / "drafter.gguf"  # converted by our convert from runtime/drafter
RUNTIME_DIR = FIXTURES / "runtime" / "drafter"


def _retrained(tmp_path: Path) -> Path:
    """runtime/drafter with two layers and two target layers more: config.json alone."""
    from tests.guards.test_source import republished

    cfg = json.loads((RUNTIME_DIR / "config.json").read_text())
    republished(cfg)
    d = tmp_path / "retrained"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_check_source_that_matches_is_one_more_line(cli):
    code, text, err = cli("check", RUNTIME_GGUF, "--source", RUNTIME_DIR)
    assert code == 0, err
    n_tensors = len(GGUFReader(RUNTIME_GGUF).tensors)
    header, source, verdict = text.splitlines()
    assert header == f"{RUNTIME_GGUF}: OK (header only; {n_tensors:,} tensors, {RUNTIME_GGUF.stat().st_size:,} bytes)"
    assert source.startswith(f"  source   matches {RUNTIME_DIR}'s config.json (") and source.endswith(
        f" constants, {n_tensors} tensors)")
    assert verdict == "check: PASS: 1 file, 0 errors, 0 warnings"
    _, js, _ = cli("check", RUNTIME_GGUF, "--source", RUNTIME_DIR, "--json")
    env = json.loads(js)
    (doc,) = env["payload"]["files"]
    assert env["payload"]["source"] == doc["source"]["source"] and env["payload"]["source"]["path"] == str(RUNTIME_DIR)
    assert doc["source"]["matches"] is True and source == f"  source   {doc['source']['summary']}"
    assert len(doc["source"]["tensors"]) == n_tensors and env["findings"] == []


def test_check_source_text_is_the_json_report(cli, tmp_path):
    src = _retrained(tmp_path)
    code, text, _ = cli("check", RUNTIME_GGUF, "--source", src)
    jcode, js, _ = cli("check", RUNTIME_GGUF, "--source", src, "--json")
    env = json.loads(js)
    (doc,) = env["payload"]["files"]
    assert code == jcode == env["exit_code"] == doc["exit_code"] == 12
    lines = text.splitlines()
    assert lines[1] == f"  source   {doc['source']['summary']}" and doc["source"]["matches"] is False
    assert lines[2:-1] == [f"  {f['severity']:<7}  {f['code']}: {f['message']}" + (f"  [{f['where']}]" if f["where"] else "")
                           for f in doc["findings"]]
    assert {f["category"] for f in doc["findings"]} == {"source"}
    assert {f["code"] for f in doc["findings"]} == {"source-layers", "source-taps", "source-tensor-missing",
                                                    "source-tensor-shape"}
    assert [(f["rule_id"], f["stage"]) for f in env["findings"]] == [(f["code"], "check") for f in doc["findings"]]
    assert lines[-1] == env["summary"] and lines[-1].startswith("check: FAIL (exit 12): 1 file, 5 errors")


def test_check_source_several_files_take_the_worst_code(cli, tmp_path):
    src = _retrained(tmp_path)
    other = FIXTURES / "guards" / "qwen3-8b.gguf"  # not a drafter: one source-not-drafter finding
    code, js, _ = cli("check", RUNTIME_GGUF, other, "--source", src, "--target", BASE_TARGET, "--json")
    env = json.loads(js)
    assert code == env["exit_code"] == 12
    assert [d["source"]["matches"] for d in env["payload"]["files"]] == [False, False]
    assert env["payload"]["files"][1]["source"]["problem"] == "architecture 'qwen3' is not a DFlash drafter"
    # JUnit lists the source rules as passing test cases only when --source is given
    from dflash_gguf.guards.rules import codes

    case = '<testcase classname="check.drafter.gguf" name="{}" '
    _, xml, _ = cli("check", RUNTIME_GGUF, "--source", RUNTIME_DIR, "--format", "junit")
    _, plain, _ = cli("check", RUNTIME_GGUF, "--format", "junit")
    assert codes("source") and all(case.format(c) in xml and c not in plain for c in codes("source"))


def test_check_source_failure_is_one_json_document(cli, tmp_path):
    code, so, se = cli("check", RUNTIME_GGUF, "--source", tmp_path, "--json")
    env = json.loads(so)
    assert code == env["exit_code"] == 3 and env["verdict"] == "error"
    assert env["payload"] == {"files": [], "source": {"arg": str(tmp_path), "error": env["error"]}}
    assert env["error"]["type"] == "ConfigError" and env["error"]["message"].startswith(f"--source {tmp_path}: ")
    assert [f["rule_id"] for f in env["findings"]] == ["check-ConfigError"]
    assert se.startswith("error: --source ") and len(se.strip().splitlines()) == 1
