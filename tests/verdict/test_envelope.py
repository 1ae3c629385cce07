"""verdict/envelope.py: the JSON envelope matches docs/verdict.schema.json, and the verdict line
says the verdict, the counts and the first blocking finding."""
from __future__ import annotations

import json

import pytest

from dflash_gguf.verdict import Envelope, Finding
from dflash_gguf.verdict.envelope import display_path, verdict_line
from tests.verdict.conftest import envelope_validator

BAD = Finding("compare-weights", "constant-differs", "error", "/ci/d.gguf", "dflash.rope.freq_base = 10000 in the file",
              "key dflash.rope.freq_base")
WARN = Finding("pairing", "pair-rope-theta", "warning", "/ci/d.gguf", "RoPE base differs")


def test_the_envelope_validates_and_round_trips():
    v = envelope_validator()
    for env in (Envelope("check", 0, [WARN], ("d.gguf",), payload={"files": []}, tool_version="1"),
                Envelope("compare-weights", 20, [BAD, WARN], ("d.gguf",), payload={}, tool_version="1"),
                Envelope("check", 6, [], ("d.gguf",), error={"type": "TruncatedError", "message": "m"},
                         tool_version="1")):
        doc = json.loads(json.dumps(env.to_json()))
        v.validate(doc)
        assert doc["verdict"] == ("pass" if env.exit_code == 0 else "error" if env.error else "fail")


def test_the_schema_refuses_what_it_must():
    v = envelope_validator()
    good = Envelope("gate", 50, [BAD], ("d.gguf",), payload={}, tool_version="1").to_json()
    for broken in ({**good, "verdict": "pass"},  # a pass with exit 50
                   {**good, "schema_version": 2},
                   {**good, "findings": [{**good["findings"][0], "fingerprint": "xyz"}]},
                   {**good, "extra": 1}):
        with pytest.raises(Exception):
            v.validate(broken)


def test_the_verdict_line_names_the_first_blocking_finding():
    line = verdict_line("compare-weights", 20, [WARN, BAD], ("/ci/d.gguf",))
    assert line == ("compare-weights: FAIL (exit 20): 1 file, 1 error, 1 warning; first: constant-differs in d.gguf "
                    "[key dflash.rope.freq_base]: dflash.rope.freq_base = 10000 in the file")
    assert verdict_line("check", 0, [WARN], ("a", "b")) == "check: PASS: 2 files, 0 errors, 1 warning"
    waived = Finding("check", "x", "error", "d.gguf", "m", waived="ok")
    assert verdict_line("gate", 0, [waived], ("d",)) == "gate: PASS: 1 file, 0 errors, 0 warnings, 1 waived"
    long = Finding("check", "x", "error", "d.gguf", "line one\nline two " + "z" * 500)
    line = verdict_line("check", 12, [long], ("d",))
    assert "\n" not in line and line.endswith("…") and len(line) < 300


def test_an_error_without_findings_says_the_error():
    line = verdict_line("gate", 5, [], ("d",), {"type": "InputError", "message": "x: not a directory"})
    assert line == "gate: ERROR (exit 5): 1 file, 0 errors, 0 warnings; InputError: x: not a directory"


def test_paths_are_shown_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    assert display_path(str(tmp_path / "m" / "d.gguf")) == "m/d.gguf"
    assert display_path("/elsewhere/d.gguf") == "/elsewhere/d.gguf"
