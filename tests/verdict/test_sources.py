"""verdict/sources.py: each command's result becomes the same findings wherever it is reported."""
from __future__ import annotations

from dflash_gguf.errors import GGUFFormatError
from dflash_gguf.guards.run import run_checks
from dflash_gguf.verdict import sources
from tests.conftest import FIXTURES

GUARDS = FIXTURES / "guards"


def test_check_findings_keep_codes_and_put_pairing_in_its_own_stage():
    r = run_checks(GUARDS / "qwen3-8b-dflash.gguf", target=GUARDS / "llama-3.1-8b.gguf")
    fs = sources.check_findings(r)
    assert [(f.rule_id, f.severity, f.where) for f in fs] == [(g.code, g.severity.value, g.where) for g in r.findings]
    assert {f.stage for f in fs} == {"pairing"} and all(g.category == "pairing" for g in r.findings)
    assert {f.file for f in fs} == {g.file for g in r.findings}


def test_a_read_failure_is_a_rule_of_its_stage():
    f = sources.failure("check", "/x/cut.gguf", GGUFFormatError("cut.gguf: truncated"))
    assert (f.stage, f.rule_id, f.severity, f.file) == ("check", "check-GGUFFormatError", "error", "/x/cut.gguf")
    assert f.fingerprint == sources.failure("check", "/y/cut.gguf", GGUFFormatError("other")).fingerprint


def test_an_unknown_instruct_verdict_is_as_severe_as_the_caller_says():
    from dflash_gguf.guards.instruct import InstructVerdict, Verdict

    v = InstructVerdict(Verdict.UNKNOWN, "no evidence", [])
    assert [f.severity for f in sources.instruct_findings("t.gguf", v)] == ["warning"]
    assert [f.severity for f in sources.instruct_findings("t.gguf", v, unknown="error")] == ["error"]
    assert sources.instruct_findings("t.gguf", InstructVerdict(Verdict.INSTRUCT, "chat template", [])) == []
