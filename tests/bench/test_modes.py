"""Chat modes: raw text, the chat template, and its enable_thinking switch when it has one."""
from types import SimpleNamespace

import pytest

from dflash_gguf.bench.client import RequestFailed
from dflash_gguf.bench.modes import plan_modes
from tests.bench.conftest import PLAIN_TARGET, TARGET


class Stub:
    def __init__(self, switch=True, fail=False, template="t"):
        self.switch, self.fail, self.template = switch, fail, template

    def props(self):
        return {"chat_template": self.template}

    def apply_template(self, msg, thinking):
        if self.fail:
            raise RequestFailed("POST /apply-template: HTTP 500: boom")
        return msg + ("<think>" if thinking and self.switch else "")


def opts(**kw):
    base = dict(raw=False, engine="llama.cpp", thinking="auto", target=TARGET)
    return SimpleNamespace(**{**base, **kw})


def labels(o, client=None):
    modes, notes = plan_modes(o, client or Stub())
    return [m.label for m in modes], notes


@pytest.mark.parametrize("thinking,want", [("auto", ["think", "no-think"]), ("both", ["think", "no-think"]),
                                           ("on", ["think"]), ("off", ["no-think"])])
def test_llama_cpp_with_the_switch(thinking, want):
    assert labels(opts(thinking=thinking))[0] == want


def test_llama_cpp_template_without_the_switch():
    assert labels(opts(), Stub(switch=False)) == (["chat"], [])
    got, notes = labels(opts(thinking="on"), Stub(switch=False))
    assert got == ["chat"] and "no enable_thinking switch" in notes[0]


def test_raw_cases():
    assert labels(opts(raw=True))[0] == ["raw"]
    got, notes = labels(opts(target=PLAIN_TARGET))
    assert got == ["raw"] and "no chat template" in notes[0]
    assert labels(opts(target=None), Stub(template=""))[0] == ["raw"]  # a running server without one


def test_probe_failure_falls_back_to_plain_chat():
    got, notes = labels(opts(), Stub(fail=True))
    assert got == ["chat"] and "not probed" in notes[0]


def test_vllm_and_sglang():
    assert labels(opts(engine="vllm", target=None))[0] == ["chat"]
    assert labels(opts(engine="vllm", target=None, thinking="both"))[0] == ["think", "no-think"]
    got, notes = labels(opts(engine="sglang", target=None, thinking="on"))
    assert got == ["raw"] and "raw text" in notes[0]


def test_a_suite_of_raw_prompts_runs_once():
    from dflash_gguf.bench.modes import Mode, modes_for
    from dflash_gguf.bench.suites import Prompt, Suite

    modes = [Mode("think", True, True), Mode("no-think", True, False)]
    ids = Suite("ids", (Prompt("a", "1 2", True, (1, 2)),), "t")
    mixed = Suite("m", (Prompt("a", "1 2", True, (1, 2)), Prompt("b", "hi")), "t")
    assert [m.label for m in modes_for(ids, modes)] == ["raw"]
    assert modes_for(mixed, modes) == modes
