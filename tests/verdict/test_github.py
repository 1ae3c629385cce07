"""verdict/github.py: workflow commands escaped as the runner parses them, and the job summary."""
from __future__ import annotations

import re

from dflash_gguf.verdict import Envelope, Finding
from dflash_gguf.verdict.github import annotation, escape_data, escape_property, render, step_summary


def _unescape(s: str, prop: bool) -> str:
    """The runner's inverse (ActionCommand.UnescapeProperty / UnescapeData)."""
    pairs = [("%0D", "\r"), ("%0A", "\n")] + ([("%3A", ":"), ("%2C", ",")] if prop else []) + [("%25", "%")]
    for a, b in pairs:
        s = s.replace(a, b)
    return s


def test_escaping_round_trips_hostile_text():
    for s in ("a:b,c%d\r\ne", "%0A", "::error::x", "100% done, 3:4"):
        assert _unescape(escape_data(s), prop=False) == s
        assert _unescape(escape_property(s), prop=True) == s
        assert "\n" not in escape_data(s) and not re.search("[:,]", escape_property(s))


def test_one_annotation_per_finding_with_file_title_and_fingerprint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = Finding("compare-weights", "constant-differs", "error", str(tmp_path / "out" / "d,1.gguf"),
                "theta 10000\nvs 1e6", "key dflash.rope.freq_base")
    line = annotation(f)
    m = re.fullmatch(r"::error file=([^,:]*),title=([^,:]*)::(.*)", line)
    assert m, line
    assert _unescape(m.group(1), True) == "out/d,1.gguf"
    assert _unescape(m.group(2), True) == "dflash-gguf compare-weights constant-differs"
    assert _unescape(m.group(3), False) == f"theta 10000\nvs 1e6 [key dflash.rope.freq_base] (fingerprint {f.fingerprint})"
    assert annotation(Finding("check", "w", "warning", "d", "m")).startswith("::warning ")
    assert annotation(Finding("check", "i", "info", "d", "m")).startswith("::notice ")
    assert annotation(Finding("check", "e", "error", "d", "m", waived="known")).startswith("::notice ")


def test_the_output_ends_with_the_verdict_and_the_summary_is_a_table():
    fs = [Finding("check", "drafter-fc-width", "error", "d.gguf", "width | 3 <b>", "tensor dflash.fc.weight")]
    env = Envelope("check", 12, fs, ("d.gguf",))
    lines = render(env).splitlines()
    assert len(lines) == 2 and lines[0].startswith("::error ") and lines[1] == env.summary
    md = step_summary(env)
    assert md.startswith("### ❌ dflash-gguf check: FAIL (exit 12)")
    row = [ln for ln in md.splitlines() if ln.startswith("| error")][0]
    assert "width \\| 3 &lt;b&gt;" in row and row.count(" | ") == 6
