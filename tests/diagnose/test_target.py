"""Stage 3's target (diagnose/target.py), chosen from the headers before any stage runs: the
quantized --target-gguf itself, --target-quant's round trip (which wins when both are given), or
no stage 3 and why (a full-precision file, another architecture, another model)."""
import pytest

from dflash_gguf.diagnose.target import plan_stage3, served_quant
from tests.conftest import RUNTIME
from tests.diagnose import plant_target

TARGET = RUNTIME / "target"


@pytest.fixture(scope="module")
def q4_target(tmp_path_factory):
    return plant_target(tmp_path_factory.mktemp("target") / "target-Q4_0.gguf")


def test_a_quantized_target_gguf_is_stage_3s_target_as_served(q4_target):
    t, why = plan_stage3(TARGET, None, q4_target)
    assert why is None and (t.source, t.quant, t.path) == ("served", "Q4_0", q4_target)
    assert t.label == "target as served: target-Q4_0.gguf (Q4_0)"
    assert t.to_json()["path"] == str(q4_target)


def test_target_quant_wins_and_says_the_served_file_is_stage_5s_only(q4_target):
    t, why = plan_stage3(TARGET, "Q4_K_M", q4_target)
    assert why is None and (t.source, t.quant, t.path) == ("target-quant", "Q4_K_M", None)
    assert "round-tripped through Q4_K_M (--target-quant)" in t.label
    assert t.notes == ("--target-quant Q4_K_M given: stage 3 round-trips --target; the served target-Q4_0.gguf "
                       "(Q4_0) is stage 5's target only",)


@pytest.mark.parametrize("gguf,says", [
    (None, "no --target-quant, and no quantized --target-gguf"),
    (RUNTIME / "target.gguf", "--target-gguf target.gguf is full precision (F32/F16/BF16)"),
    (RUNTIME.parent / "guards" / "qwen3-8b.gguf", "another model than --target"),  # a Qwen3-8B header
])
def test_no_stage_3_says_why(gguf, says):
    t, why = plan_stage3(TARGET, None, gguf)
    assert t is None and says in why


def test_a_quantized_drafter_is_no_target(tmp_path):
    from dflash_gguf.quants.gguf_file import quantize_gguf

    q8 = tmp_path / "drafter-Q8_0.gguf"
    quantize_gguf(RUNTIME / "drafter.gguf", q8, "q8_0")
    assert served_quant(q8) == "Q8_0"
    t, why = plan_stage3(TARGET, None, q8)
    assert t is None and "architecture" in why and "qwen3, llama" in why
