"""The rules each verdict command judges by, with the metadata CI formats show: SARIF's rule
descriptors and JUnit's test cases (one per rule and file, passing or not).

check's rules are its finding codes (``guards/rules.py``); the other stages' are listed here.
A stage that cannot read a file reports ``<stage>-<ErrorClass>`` (``check-GGUFFormatError``): those
are described from the error class itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..compare.report import CONSTANT_FAILING, TENSOR_FAILING
from .findings import ERROR, WARNING

DOCS = {"check": "docs/check.md", "pairing": "docs/check.md", "check-instruct": "docs/check-instruct.md",
        "compare-weights": "docs/compare-weights.md", "parity": "docs/parity.md", "gate": "docs/gate.md",
        "diagnose": "docs/diagnose.md"}
PARITY_GATES = ("min_acceptance_length", "max_acceptance_drop", "min_top1")
PARITY_REQUIRED = "parity-required"  # gate --require-parity, and parity could not run


@dataclass(frozen=True)
class RuleInfo:
    id: str
    stage: str
    level: str  # the documented default severity
    summary: str

    @property
    def doc(self) -> str:
        return DOCS[self.stage]


def _own_rules() -> tuple[RuleInfo, ...]:
    rules = [RuleInfo("instruct-verdict-base", "check-instruct", ERROR, "the target is a base model (exit 10)"),
             RuleInfo("instruct-verdict-unknown", "check-instruct", ERROR,
                       "instruct or base cannot be told from the metadata (exit 11; a warning in gate)"),
             RuleInfo("instruct-no-chat-template", "check-instruct", ERROR,
                      "a Hugging Face target dir without a chat template: a base model?"),
             RuleInfo("parity-not-lossless", "parity", ERROR,
                      "at temperature 0 the speculative output differs from the target's greedy decoding"),
             RuleInfo(PARITY_REQUIRED, "parity", ERROR, "gate --require-parity, and parity could not run")]
    rules += [RuleInfo(f"tensor-{s}", "compare-weights", ERROR, why) for s, why in TENSOR_FAILING.items()]
    rules += [RuleInfo(f"constant-{s}", "compare-weights", ERROR, why) for s, why in CONSTANT_FAILING.items()]
    rules += [RuleInfo(f"parity-{g}", "parity", ERROR, f"parity gate {g} failed") for g in PARITY_GATES]
    rules.append(RuleInfo("diagnose-max-stage-loss", "diagnose", ERROR,
                          "a stage loses more mean acceptance length than --max-stage-loss, or the runtime fails (exit 32)"))
    return tuple(rules)


def _check_rules() -> tuple[RuleInfo, ...]:
    from ..guards.rules import RULES

    return tuple(RuleInfo(r.code, "pairing" if r.category == "pairing" else "check", r.severity, r.summary)
                 for r in RULES)


def catalog() -> dict[str, RuleInfo]:
    return {r.id: r for r in (*_check_rules(), *_own_rules())}


def describe(rule_id: str) -> RuleInfo:
    """A rule's metadata; a stage's failure to read a file (``<stage>-<ErrorClass>``) from the class."""
    known = catalog().get(rule_id)
    if known is not None:
        return known
    from ..errors import DflashError

    classes = {c.__name__: c for c in _subclasses(DflashError)}  # the loaded ones: whoever raised it is
    for stage in sorted(DOCS, key=len, reverse=True):  # "check-instruct-X" before "check-X"
        name = rule_id[len(stage) + 1:] if rule_id.startswith(stage + "-") else ""
        if name:
            cls = classes.get(name)
            what = f"{(cls.__doc__ or name).strip().splitlines()[0].rstrip('.')} (exit {cls.exit_code})" if cls else name
            return RuleInfo(rule_id, stage, ERROR, f"the file could not be judged: {what}")
    return RuleInfo(rule_id, "gate", WARNING, rule_id)


def _subclasses(cls: type) -> list[type]:
    out = []
    for c in cls.__subclasses__():
        out += [c, *_subclasses(c)]
    return out


def rules_of(stage: str, *, deep: bool = False, gates: Iterable[str] = (), constants: bool = True,
             source: bool = False) -> tuple[str, ...]:
    """The rules a stage judges every file by (JUnit's passing test cases): check's header rules,
    its data rules with ``deep``, its source rules with ``source`` (``check --source``);
    compare-weights' tensor rules and, with ``constants``, its constant rules; parity's lossless
    rule and the ``gates`` it was given."""
    if stage in ("check", "pairing"):
        from ..guards.rules import codes

        if stage == "pairing":
            return codes("pairing")
        return codes("integrity", "drafter", *(("data",) if deep else ()), *(("source",) if source else ()))
    if stage == "check-instruct":
        return ("instruct-verdict-base", "instruct-verdict-unknown")
    if stage == "compare-weights":
        return (*(f"tensor-{s}" for s in TENSOR_FAILING), *((f"constant-{s}" for s in CONSTANT_FAILING) if constants else ()))
    if stage == "parity":
        return ("parity-not-lossless", *(f"parity-{g}" for g in gates))
    raise ValueError(stage)
