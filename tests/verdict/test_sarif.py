"""verdict/sarif.py: valid SARIF 2.1.0 (the official schema), rules with metadata, results at the
file and the key, fingerprints, waivers as suppressions, the same bytes every time."""
from __future__ import annotations

import json

from dflash_gguf.verdict import Envelope, Finding
from dflash_gguf.verdict.sarif import FINGERPRINT_KEY, render, to_sarif
from tests.verdict.conftest import sarif_validator


def _env(tmp_path) -> Envelope:
    return Envelope("gate", 50, [
        Finding("compare-weights", "constant-differs", "error", str(tmp_path / "d 1.gguf"), "theta 1e4 vs 1e6",
                "key dflash.rope.freq_base"),
        Finding("pairing", "pair-rope-theta", "warning", str(tmp_path / "d 1.gguf"), "theta differs", waived="ok"),
        Finding("check", "check-TruncatedError", "error", "/abs/cut.gguf", "ends at 3,000"),
    ], ("d 1.gguf",), tool_version="0.2.0")


def test_valid_against_the_official_schema(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    v = sarif_validator()
    doc = json.loads(render(_env(tmp_path)))
    v.validate(doc)
    v.validate(to_sarif(Envelope("check", 0, [], ("d.gguf",), tool_version="0.2.0")))  # a clean run
    v.validate(to_sarif(Envelope("check", 6, [], ("d.gguf",), error={"type": "T", "message": "m"})))


def test_rules_results_locations_fingerprints_and_suppressions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = _env(tmp_path)
    run = to_sarif(env)["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["check-TruncatedError", "constant-differs", "pair-rope-theta"]
    assert rules[1]["shortDescription"]["text"] and rules[1]["defaultConfiguration"]["level"] == "error"
    assert run["tool"]["driver"]["version"] == "0.2.0"
    r0, r1, r2 = run["results"]
    assert rules[r0["ruleIndex"]]["id"] == r0["ruleId"] == "constant-differs"
    assert r0["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "d%201.gguf"
    assert r0["locations"][0]["logicalLocations"] == [{"fullyQualifiedName": "key dflash.rope.freq_base"}]
    assert r0["partialFingerprints"] == {FINGERPRINT_KEY: env.findings[0].fingerprint}
    assert r1["level"] == "warning" and r1["suppressions"][0]["justification"] == "ok"
    assert r2["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "file:///abs/cut.gguf"
    assert run["invocations"] == [{"executionSuccessful": True, "exitCode": 50}]


def test_deterministic(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert render(_env(tmp_path)) == render(_env(tmp_path))
