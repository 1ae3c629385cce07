"""JUnit XML, as CI test-report widgets read it: one ``testsuite`` per stage, one ``testcase`` per
rule and file (``Envelope.coverage``: the rules judged pass too), a ``failure`` where an
unwaived error broke the rule; warnings, notes and waivers go to the case's ``system-out``.
No timestamps or durations: the same inputs give the same bytes."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from .envelope import TOOL, Envelope, display_path
from .findings import Finding


def render(env: Envelope) -> str:
    cases: dict[tuple[str, str, str], list[Finding]] = {}  # (stage, file, rule) -> findings, in order
    for c in env.coverage:
        for rule in c.rules:
            cases.setdefault((c.stage, c.file, rule), [])
    for f in env.findings:
        cases.setdefault((f.stage, f.file, f.rule_id), []).append(f)
    stages: dict[str, list[tuple[str, str, list[Finding]]]] = {}
    for (stage, file, rule), fs in cases.items():
        stages.setdefault(stage, []).append((file, rule, fs))

    root = ET.Element("testsuites", name=f"{TOOL} {env.command}")
    totals = [0, 0]
    for stage, rows in stages.items():
        suite = ET.SubElement(root, "testsuite", name=f"{TOOL} {stage}")
        failures = 0
        for file, rule, fs in rows:
            case = ET.SubElement(suite, "testcase", classname=f"{stage}.{Path(file).name}", name=rule,
                                 file=display_path(file))
            blocking = [f for f in fs if f.blocking]
            if blocking:
                failures += 1
                el = ET.SubElement(case, "failure", message=_one_line(blocking[0].message), type=rule)
                el.text = "\n".join(_describe(f) for f in blocking)
            rest = [f for f in fs if not f.blocking]
            if rest:
                ET.SubElement(case, "system-out").text = "\n".join(_describe(f) for f in rest)
        suite.set("tests", str(len(rows)))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suite.set("skipped", "0")
        totals[0] += len(rows)
        totals[1] += failures
    root.set("tests", str(totals[0]))
    root.set("failures", str(totals[1]))
    root.set("errors", "0")
    _xml_safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _describe(f: Finding) -> str:
    state = f"waived: {f.waived}" if f.waived is not None else f.severity
    where = f" [{f.where}]" if f.where else ""
    return f"{state}: {f.message}{where} (fingerprint {f.fingerprint})"


def _one_line(s: str) -> str:
    return " ".join(s.split())


# XML 1.0 cannot carry these at all, escaped or not; a hostile file's key or tensor name may hold them
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(el: ET.Element) -> None:
    for node in el.iter():
        node.attrib.update({k: _NOT_XML.sub("\ufffd", v) for k, v in node.attrib.items()})
        if node.text:
            node.text = _NOT_XML.sub("\ufffd", node.text)
