"""verdict/rules.py: every rule a verdict command reports has metadata (summary, level, page), a
stage's read failures included; each stage knows the rules it judges a file by."""
from __future__ import annotations

from pathlib import Path

from dflash_gguf.verdict.rules import catalog, describe, rules_of

ROOT = Path(__file__).resolve().parents[2]


def test_every_rule_has_a_summary_a_level_and_a_page():
    for r in catalog().values():
        assert r.summary and "\n" not in r.summary and r.level in ("error", "warning", "info")
        assert (ROOT / r.doc).is_file()


def test_a_stage_failure_is_described_by_its_error_class():
    import dflash_gguf.fileio.gguf_header  # noqa: F401  (defines TruncatedError, as a run that raises it has)

    r = describe("check-TruncatedError")
    assert r.stage == "check" and "exit 6" in r.summary
    assert describe("check-instruct-GGUFFormatError").stage == "check-instruct"
    assert describe("compare-weights-ConfigError").stage == "compare-weights"
    assert describe("check-NoSuchError").summary == "the file could not be judged: NoSuchError"


def test_rules_of_each_stage():
    assert "nan-inf" in rules_of("check", deep=True) and "nan-inf" not in rules_of("check")
    assert all(c.startswith("pair-") for c in rules_of("pairing"))
    assert "constant-differs" in rules_of("compare-weights") and "constant-differs" not in rules_of(
        "compare-weights", constants=False)
    assert rules_of("parity", gates=("min_top1",)) == ("parity-not-lossless", "parity-min_top1")
