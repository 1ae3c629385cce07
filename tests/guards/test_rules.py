"""guards/rules.py: the catalog of check's finding codes is docs/check.md's tables (codes and
severities), and every code the checks emit is in it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from dflash_gguf.guards.rules import BY_CODE, RULES

ROOT = Path(__file__).resolve().parents[2]


def _documented() -> dict[str, str]:
    text = (ROOT / "docs" / "check.md").read_text()
    return {m.group(1): m.group(2).split()[0] for m in re.finditer(r"^\| `([a-z0-9-]+)` \| ((?:error|warning|info)[^|]*) \|",
                                                                     text, re.M)}


def _emitted() -> set[str]:
    """Every string literal that is a finding code argument in the guards (third positional
    argument of finding()/helpers, or second of the pairing shorthand)."""
    codes = set()
    for path in (ROOT / "dflash_gguf" / "guards").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                for arg in node.args[:3]:
                    if (isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                            and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", arg.value) and arg.value in BY_CODE):
                        codes.add(arg.value)
    return codes


def test_the_catalog_is_the_documented_table_with_its_severities():
    docs = _documented()
    assert list(BY_CODE) == [r.code for r in RULES] and len(BY_CODE) == len(RULES)
    assert set(BY_CODE) == set(docs)
    assert {c: r.severity for c, r in BY_CODE.items()} == docs


def test_every_code_the_checks_emit_is_in_the_catalog():
    source = "\n".join(p.read_text() for p in (ROOT / "dflash_gguf" / "guards").glob("*.py") if p.name != "rules.py")
    quoted = set(re.findall(r'Severity\.\w+(?: if [^,]+ else Severity\.\w+)?, "([a-z0-9-]+)"', source))
    assert quoted and quoted <= set(BY_CODE)
    assert set(BY_CODE) <= _emitted() | quoted  # no catalog entry that nothing emits
