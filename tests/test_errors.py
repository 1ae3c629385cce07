"""errors.py is the one place for exit codes, and docs/exit-codes.md documents exactly those."""
from __future__ import annotations

import re

from dflash_gguf import errors
from tests.conftest import ROOT


def _codes_in_errors() -> dict[int, str]:
    codes = {}
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, errors.DflashError):
            codes.setdefault(obj.exit_code, name)
        elif name.startswith("EXIT_") and isinstance(obj, int):
            codes.setdefault(obj, name)
    return codes


def test_every_code_is_documented_and_every_documented_code_exists():
    doc = (ROOT / "docs" / "exit-codes.md").read_text()
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", doc, flags=re.M)}
    assert documented == set(_codes_in_errors())


def test_codes_are_distinct_per_failure_class():
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.DflashError)]
    codes = [c.exit_code for c in classes]
    assert len(codes) == len(set(codes)), codes


def test_no_exit_code_is_chosen_outside_errors_py():
    # An exit code written as a literal elsewhere would be a second place for the same fact.
    literal = re.compile(r"exit_code\s*=\s*\d+|Exit\(\s*\d+|sys\.exit\(\s*[1-9]|^EXIT_\w+\s*=", re.M)
    offenders = []
    for path in (ROOT / "dflash_gguf").rglob("*.py"):
        if path.name == "errors.py":
            continue
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in literal.finditer(path.read_text())]
    assert not offenders, offenders
