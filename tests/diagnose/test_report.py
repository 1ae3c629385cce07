"""The verdict and the recommendation of a diagnose report (diagnose/report.py) on constructed
numbers: each stage's loss attributed to it, the 1σ rule, no stage when nothing is lost, and
the smallest file within 1σ of the full-precision one."""
import json

import pytest

from dflash_gguf.diagnose.report import DiagnoseReport, Lane, StageValue, change
from dflash_gguf.diagnose.verdict import judge, recommend
from dflash_gguf.metrics.spread import Stat


def v(*runs: float) -> StageValue:
    """A stage value whose runs had these mean acceptance lengths."""
    return StageValue(Stat.of(runs), Stat.of([(x - 1) / 15 for x in runs]))


def checkpoint(**stages) -> Lane:
    return Lane("checkpoint", None, "checkpoint", values=_stages(stages))


def gguf(name: str, quant: str = "BF16", size: int = 300, origin: str = "given", **stages) -> Lane:
    return Lane(name, f"/m/{name}", origin, quant, size, values=_stages(stages))


def _stages(kw) -> dict:
    return {k.replace("_", "-"): val for k, val in kw.items()}  # runtime_semantics -> runtime-semantics


def report(*lanes: Lane, **settings) -> DiagnoseReport:
    return DiagnoseReport({"target_quant": "Q4_K_M", "emulate": "llama.cpp", **settings}, [], list(lanes))


def test_a_wrong_conversion_is_the_conversion_stage():
    r = report(checkpoint(reference=v(15.75)),
               gguf("good.gguf", conversion=v(15.75), runtime_semantics=v(15.75)),
               gguf("theta.gguf", conversion=v(1.05), runtime_semantics=v(1.05)))
    verdict = judge(r)
    assert verdict.stage == "conversion" and verdict.drafter == "theta.gguf"
    assert verdict.loss == pytest.approx(14.7)
    assert any("full-precision file loses it" in f for f in verdict.facts)


def test_a_quantized_file_that_loses_blames_the_quantization_when_the_full_precision_one_keeps_it():
    r = report(checkpoint(reference=v(10)),
               gguf("d-BF16.gguf", conversion=v(10)),
               gguf("d-Q2_K.gguf", "Q2_K", 90, "quantized", conversion=v(6)))
    verdict = judge(r)
    assert (verdict.stage, verdict.drafter) == ("conversion", "d-Q2_K.gguf")
    assert any("the loss is the quantization to Q2_K" in f for f in verdict.facts)


def test_the_quantized_target_is_the_target_stage():
    r = report(checkpoint(reference=v(10), target=v(8), runtime_semantics=v(8)),
               gguf("d.gguf", conversion=v(10), target=v(8), runtime_semantics=v(8)))
    verdict = judge(r)
    assert verdict.stage == "target"
    assert any("round-tripped through Q4_K_M" in f for f in verdict.facts)
    assert any("the checkpoint drafter loses" in f for f in verdict.facts) or verdict.drafter == "checkpoint"


def test_the_emulated_rules_are_the_runtime_semantics_stage():
    ck, lane = checkpoint(reference=v(10), runtime_semantics=v(7)), gguf("d.gguf", conversion=v(10), runtime_semantics=v(7))
    for x in (ck, lane):
        x.values["runtime-semantics"].notes = ["all layers non-causal (the reference makes sliding layers causal)"]
    verdict = judge(report(ck, lane))
    assert verdict.stage == "runtime-semantics"
    assert any("non-causal" in f for f in verdict.facts)


def test_a_runtime_that_loses_what_its_emulated_rules_keep_is_a_runtime_bug():
    r = report(checkpoint(reference=v(10), runtime_semantics=v(10)),
               gguf("d.gguf", conversion=v(10), runtime_semantics=v(10), runtime=v(6)))
    r.server = {"build_info": "b1234"}
    verdict = judge(r)
    assert verdict.stage == "runtime" and verdict.loss == pytest.approx(4)
    assert any("runtime bug, not your file" in f for f in verdict.facts)
    assert any("b1234" in f for f in verdict.facts)


def test_server_flags_stage_4_does_not_model_are_named_instead_of_a_runtime_bug():
    """With --server-args, a runtime that loses (or fails on) what stage 4 keeps points at the
    flags; without them, at the runtime."""
    lost = report(checkpoint(reference=v(10), runtime_semantics=v(10)),
                  gguf("d.gguf", conversion=v(10), runtime_semantics=v(10), runtime=v(6)),
                  server_args=("--spec-draft-p-min", "0.99"))
    crashed = report(checkpoint(reference=v(10), runtime_semantics=v(10)),
                     gguf("d.gguf", conversion=v(10), runtime_semantics=v(10)), server_args=("-ctkd", "q4_0"))
    crashed.lanes[1].failed["runtime"] = "llama-server exited (exit code 1) before it was ready"
    for r, flags in ((lost, "--spec-draft-p-min 0.99"), (crashed, "-ctkd q4_0")):
        verdict = judge(r)
        assert verdict.stage == "runtime"
        assert not any(f.startswith("runtime bug") for f in verdict.facts)
        assert any(f.startswith("not your file: ") and f"llama-server ran with --server-args '{flags}', which stage 4 "
                   "does not model: rerun without them to tell them from a runtime bug" in f for f in verdict.facts)
    crashed.settings["server_args"] = ()
    assert any(f.startswith("runtime bug, not your file: the emulated runtime semantics run d.gguf (10.000 at stage 4)")
               for f in judge(crashed).facts)


def test_the_largest_real_loss_names_the_stage_and_the_others_are_listed():
    r = report(checkpoint(reference=v(10)),
               gguf("d.gguf", conversion=v(9), runtime_semantics=v(9), runtime=v(6)))
    verdict = judge(r)
    assert verdict.stage == "runtime"
    assert set(verdict.losses) == {"conversion", "runtime"}
    assert any("also lost at stage 2 (conversion)" in f for f in verdict.facts)


def test_a_change_within_1_sigma_is_not_a_loss():
    # sd 1.0 over three runs: a 0.5 drop is noise; the larger of the two sds is the σ
    r = report(checkpoint(reference=v(9, 10, 11)), gguf("d.gguf", conversion=v(9.5, 9.5, 9.5)))
    (d,) = r.deltas()
    assert d.sigma == pytest.approx(1.0) and not d.real and d.loss == 0
    assert judge(r).stage is None


def test_with_one_run_any_change_counts():
    sigma, real = change(Stat.of([10.0]), Stat.of([9.999]))
    assert sigma == 0 and real
    assert not change(Stat.of([10.0]), Stat.of([10.0]))[1]
    assert judge(report(checkpoint(reference=v(10)), gguf("d.gguf", conversion=v(9.999)))).stage == "conversion"


def test_no_stage_when_nothing_is_lost_and_gains_are_not_losses():
    r = report(checkpoint(reference=v(10)), gguf("d.gguf", conversion=v(10), runtime_semantics=v(10.5), runtime=v(11)),
               expect=12.0)
    r.expect = 12.0
    verdict = judge(r)
    assert verdict.stage is None and verdict.loss == 0 and verdict.drafter is None
    assert any("upstream of every stage" in f for f in verdict.facts)  # --expect: the reference is below it


def test_the_recommendation_is_the_smallest_file_within_1_sigma_of_the_full_precision_one():
    r = report(checkpoint(reference=v(10, 10, 10)),
               gguf("d-BF16.gguf", size=300, conversion=v(9.5, 10.0, 10.5)),     # 10.0 ± 0.5
               gguf("d-Q8_0.gguf", "Q8_0", 160, "quantized", conversion=v(9.9, 9.9, 9.9)),
               gguf("d-Q4_K_M.gguf", "Q4_K_M", 110, "quantized", conversion=v(9.0, 9.0, 9.0)),  # −1.0: beyond 1σ
               gguf("d-Q5_K_M.gguf", "Q5_K_M", 120, "quantized", conversion=v(9.6, 9.6, 9.6)))  # −0.4: within
    rec = recommend(r)
    assert rec.stage == "conversion" and rec.baseline.name == "d-BF16.gguf"
    assert rec.drafter.name == "d-Q5_K_M.gguf"
    assert "within 1σ of the full-precision d-BF16.gguf" in rec.text


def test_the_recommendation_is_judged_at_the_last_stage_measured():
    r = report(checkpoint(reference=v(10)),
               gguf("d-BF16.gguf", size=300, conversion=v(10), runtime_semantics=v(10), runtime=v(9)),
               gguf("d-Q4.gguf", "Q4_K_M", 100, "quantized", conversion=v(10), runtime_semantics=v(10), runtime=v(8)))
    rec = recommend(r)
    # at stage 4 both keep 10; at stage 5, the last, only the BF16 file keeps its own acceptance
    assert rec.stage == "runtime" and rec.drafter.name == "d-BF16.gguf"
    assert "no smaller file keeps its acceptance" in rec.text


def test_without_a_full_precision_gguf_the_checkpoint_is_the_baseline():
    r = report(checkpoint(reference=v(10), runtime_semantics=v(10)),
               gguf("d-Q8_0.gguf", "Q8_0", 160, conversion=v(10), runtime_semantics=v(10)),
               gguf("d-Q4.gguf", "Q4_K_M", 100, conversion=v(9), runtime_semantics=v(9)))
    rec = recommend(r)
    assert rec.baseline.is_checkpoint and rec.baseline_stage == "runtime-semantics"
    assert rec.drafter.name == "d-Q8_0.gguf"


def test_nothing_to_recommend_without_a_gguf():
    r = report(checkpoint(reference=v(10)))
    assert recommend(r).drafter is None and judge(r).stage is None


def test_the_json_has_every_part():
    r = report(checkpoint(reference=v(10)), gguf("d.gguf", conversion=v(8)), expect=9.0)
    r.expect = 9.0
    doc = json.loads(json.dumps(r.to_json(judge(r), recommend(r))))
    assert doc["schema"] == "dflash-gguf.diagnose/1"
    assert doc["verdict"]["stage"] == "conversion" and doc["verdict"]["change"]["delta"] == pytest.approx(-2)
    assert doc["recommendation"]["drafter"]["name"] == "d.gguf"
    assert doc["drafters"][1]["stages"]["conversion"]["mean_acceptance_length"]["mean"] == 8
    assert doc["expect"]["published"] == 9.0 and doc["expect"]["best_at_last_stage"] == 8
