"""--emulate llama.cpp: its semantics and the draft-context cap."""
import pytest

pytest.importorskip("torch")

from tests.conftest import DRAFTERS  # noqa: E402
from tests.parity.conftest import QWEN, parity  # noqa: E402


def test_emulate_llama_cpp_caps_the_draft_context(cli, tmp_path, monkeypatch):
    """--emulate llama.cpp also applies the historical 512-position cross_ctx cap (listed in the notes),
    to the emulated run only; a small cap, set through ParityOptions, binds on a longer prompt and stays
    lossless. (That the cap changes the drafter's logits is tested in tests/reference/test_loop.py.)"""
    from dflash_gguf import reference as ref
    from dflash_gguf.parity import LLAMA_CPP_DRAFT_CONTEXT, ParityOptions, run_parity

    code, rep, so, se = parity(cli, tmp_path, "--emulate", "llama.cpp")
    assert code == 0, se
    notes = rep["emulated"]["notes"]
    assert LLAMA_CPP_DRAFT_CONTEXT == 512
    assert any("draft context capped at the last 512 positions" in n and "cross_ctx" in n for n in notes)
    assert any("never binds" in n for n in notes)  # 8 + 20 tokens < 512
    assert "capped at the last 512" in se or "capped at the last 512" in so

    caps = []
    real = ref.generate

    def spy(*args, **kwargs):
        caps.append(kwargs.get("draft_context"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ref, "generate", spy)
    prompt = list(range(3, 40))
    opts = ParityOptions(max_new_tokens=16, device="cpu", emulate="llama.cpp", draft_context=4)
    report = run_parity(QWEN, DRAFTERS / "qwen3-flat", [prompt], options=opts)
    assert caps == [None, 4]  # the reference runs uncapped, the emulated drafter capped
    (p,) = report.prompts
    assert any("capped at the last 4 positions" in n for n in p.emulated.notes)
    assert not any("never binds" in n for n in p.emulated.notes)
    assert p.emulated.lossless is True and p.reference.lossless is True
    caps.clear()
    report = run_parity(QWEN, DRAFTERS / "qwen3-flat", [prompt], options=ParityOptions(max_new_tokens=16, device="cpu"))
    assert caps == [None] and report.prompts[0].emulated is None


def test_cli_draft_context_cap_is_reported(cli, tmp_path):
    code, rep, so, se = parity(cli, tmp_path, "--emulate", "llama.cpp", "--draft-context", "4",
                               prompt=",".join(str(i) for i in range(3, 40)), n=8)
    assert code == 0, se
    assert rep["settings"]["draft_context"] == 4
    assert any("last 4 positions" in n for n in rep["emulated"]["notes"])
    code, rep, _, _ = parity(cli, tmp_path)
    assert rep["settings"]["draft_context"] is None  # no emulation: the reference is never capped
