"""gate/report.py: fingerprints are stable (not tied to a directory or a message's numbers) and
the summary line says what failed where."""
from __future__ import annotations

from dflash_gguf.gate.report import GateReport, StageResult
from dflash_gguf.verdict.findings import Finding as GateFinding


def test_a_fingerprint_ignores_the_directory_and_the_message():
    a = GateFinding("compare-weights", "constant-differs", "error", "/ci/run1/d.gguf", "10000 vs 1e6", "key k")
    b = GateFinding("compare-weights", "constant-differs", "error", "/ci/run2/d.gguf", "10001 vs 1e6", "key k")
    c = GateFinding("compare-weights", "constant-differs", "error", "/ci/run1/d.gguf", "m", "key other")
    assert a.fingerprint == b.fingerprint != c.fingerprint and len(a.fingerprint) == 16


def test_the_summary_counts_and_names_the_failing_stages():
    err = GateFinding("check", "x", "error", "d.gguf", "m")
    warn = GateFinding("pairing", "y", "warning", "d.gguf", "m")
    waived = GateFinding("check", "z", "error", "d.gguf", "m", waived="ok")
    r = GateReport([StageResult("check", "failed", "", [err, waived]), StageResult("pairing", "passed", "", [warn]),
                    StageResult("parity", "skipped", "no torch")])
    assert not r.passed
    assert r.summary == "gate: FAIL: 2 stages ran, 1 errors, 1 warnings, 1 waived (skipped: parity); failed at check"
    doc = r.to_json()
    assert doc["verdict"] == "fail" and [f["fingerprint"] for f in doc["findings"]] == [
        err.fingerprint, waived.fingerprint, warn.fingerprint]
