"""verdict/junit.py: one suite per stage, one case per rule and file (passing ones too), failures
for unwaived errors; read back with junitparser."""
from __future__ import annotations

from dflash_gguf.verdict import Envelope, Finding
from dflash_gguf.verdict.envelope import Coverage
from dflash_gguf.verdict.junit import render
from tests.verdict.conftest import junit_suites


def test_cases_per_rule_and_file_with_failures(tmp_path):
    bad = Finding("check", "drafter-taps", "error", "d.gguf", "taps empty\x01\x1b[31m", "key dflash.target_layers")
    warn = Finding("pairing", "pair-rope-theta", "warning", "d.gguf", "theta differs")
    waived = Finding("check", "drafter-fc-width", "error", "d.gguf", "w", waived="known")
    env = Envelope("check", 12, [bad, warn, waived], ("d.gguf",), coverage=(
        Coverage("d.gguf", "check", ("drafter-taps", "drafter-fc-width", "nested-array")),
        Coverage("d.gguf", "pairing", ("pair-rope-theta",))))
    xml = render(env)
    assert xml == render(env)  # deterministic
    suites = {s.name: s for s in junit_suites(xml, tmp_path)}
    assert set(suites) == {"dflash-gguf check", "dflash-gguf pairing"}
    check = suites["dflash-gguf check"]
    assert (check.tests, check.failures) == (3, 1)
    cases = {c.name: c for c in check}
    assert not cases["drafter-taps"].is_passed and cases["nested-array"].is_passed
    assert cases["drafter-fc-width"].is_passed  # waived: passes, with the justification in system-out
    assert "waived: known" in cases["drafter-fc-width"].system_out
    failure = cases["drafter-taps"].result[0]
    assert failure.type == "drafter-taps" and failure.message.startswith("taps empty")
    assert "\x01" not in failure.message and cases["drafter-taps"].classname == "check.d.gguf"
    pairing = suites["dflash-gguf pairing"]
    assert (pairing.tests, pairing.failures) == (1, 0)
    assert "warning: theta differs" in next(iter(pairing)).system_out


def test_a_finding_outside_the_coverage_is_its_own_case(tmp_path):
    f = Finding("check", "check-TruncatedError", "error", "cut.gguf", "the file ends at 3,000")
    suites = list(junit_suites(render(Envelope("check", 6, [f], ("cut.gguf",))), tmp_path))
    assert [(c.name, c.is_passed) for c in suites[0]] == [("check-TruncatedError", False)]
