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


def _doc_rows() -> dict[int, str]:
    """Each documented code's rows, joined (a shared code has one row per class)."""
    rows: dict[int, str] = {}
    for m in re.finditer(r"^\| (\d+) \|(.*)$", (ROOT / "docs" / "exit-codes.md").read_text(), flags=re.M):
        rows[int(m.group(1))] = rows.get(int(m.group(1)), "") + m.group(2)
    return rows


def _classes() -> list[type[errors.DflashError]]:
    return [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.DflashError)]


def test_every_class_is_documented_under_its_code():
    rows = _doc_rows()
    undocumented = [c.__name__ for c in _classes() if f"`{c.__name__}`" not in rows.get(c.exit_code, "")]
    assert not undocumented, undocumented


def test_codes_are_distinct_per_failure_class_unless_documented_as_shared():
    # One code per failure class, except where the page says two classes share one on purpose
    # (InputError and OutputError keep 5, which scripts read as "file not found").
    rows, by_code = _doc_rows(), {}
    for c in _classes():
        by_code.setdefault(c.exit_code, []).append(c.__name__)
    accidental = {code: names for code, names in by_code.items()
                  if len(names) > 1 and "Shared with" not in rows.get(code, "")}
    assert not accidental, accidental


def test_no_exit_code_is_chosen_outside_errors_py():
    # An exit code written as a literal elsewhere would be a second place for the same fact.
    literal = re.compile(r"exit_code\s*=\s*\d+|Exit\(\s*\d+|sys\.exit\(\s*[1-9]|^EXIT_\w+\s*=", re.M)
    offenders = []
    for path in (ROOT / "dflash_gguf").rglob("*.py"):
        if path.name == "errors.py":
            continue
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in literal.finditer(path.read_text())]
    assert not offenders, offenders
