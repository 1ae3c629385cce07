"""diagnose's stages run for real (diagnose/stages.py) on the trained pair of fixtures/runtime: a
GGUF with a planted wrong RoPE theta is attributed to the conversion, a --quants file is made
and judged, the quantized target runs as stage 3, every GGUF runs with llama.cpp's rules as
stage 4, a draft context shorter than the prompt is attributed to the runtime's semantics, and
stage 5 runs in a real llama-server when one is built (with the served target quantized)."""
import json

import pytest

from dflash_gguf.diagnose.verdict import judge, recommend
from tests.conftest import RUNTIME
from tests.diagnose import plant_target, plant_theta

pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")

# one prompt of the fixture's file, few tokens: the whole module runs the stages once
N_NEW = 32


def _first_prompt(n: int = 1) -> list[list[int]]:
    from dflash_gguf.parity import read_prompts_file

    return read_prompts_file(RUNTIME / "prompts.jsonl", RUNTIME / "target")[1:1 + n]


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    from dflash_gguf.diagnose import DiagnoseOptions, run_diagnose

    tmp = tmp_path_factory.mktemp("diagnose")
    theta = plant_theta(tmp / "theta.gguf")
    # a quantized served target too: --target-quant wins, stage 3 round-trips --target
    opts = DiagnoseOptions(max_new_tokens=N_NEW, device="cpu", jobs=1, quants=("q8_0",), target_quant="q2_k",
                           target_gguf=plant_target(tmp / "target-Q4_0.gguf"))
    return run_diagnose(RUNTIME / "target", RUNTIME / "drafter", _first_prompt(),
                        drafter_ggufs=[RUNTIME / "drafter.gguf", theta], options=opts)


def lane(report, name):
    return next(x for x in report.lanes if x.name == name)


def test_a_wrong_rope_theta_is_attributed_to_the_conversion(diagnosed):
    verdict = judge(diagnosed)
    assert (verdict.stage, verdict.drafter) == ("conversion", "theta.gguf")
    ref = lane(diagnosed, "checkpoint").values["reference"].mean_acceptance_length.mean
    bad = lane(diagnosed, "theta.gguf").values["conversion"]
    assert ref > 5 and bad.mean_acceptance_length.mean < 2  # the trained pair: ~15 and ~1
    assert any("rope_theta is 10000.0 in the GGUF" in f for f in verdict.facts)
    assert bad.logit_parity["top1"] < 0.9 and any("does not compute what the checkpoint computes" in f
                                                   for f in verdict.facts)


def test_the_good_gguf_and_its_quantized_copy_keep_the_reference(diagnosed):
    ref = lane(diagnosed, "checkpoint").values["reference"].mean_acceptance_length.mean
    good = lane(diagnosed, "drafter.gguf")
    assert good.quant == "BF16" and good.full_precision
    assert good.values["conversion"].mean_acceptance_length.mean == pytest.approx(ref)
    q8 = lane(diagnosed, "drafter-Q8_0.gguf")
    assert (q8.origin, q8.quant) == ("quantized", "Q8_0") and q8.file_size < good.file_size
    assert q8.path is None  # made in a temp dir that is gone


def test_stage_3_runs_and_is_blamed_only_if_it_loses(diagnosed):
    assert diagnosed.stage("target").ran
    assert diagnosed.stage("target").notes[0] == "the target's weights round-tripped through Q2_K (--target-quant)"
    assert "the served target-Q4_0.gguf (Q4_0) is stage 5's target only" in diagnosed.stage("target").notes[1]
    assert diagnosed.settings["target_stage3"]["source"] == "target-quant"
    assert all("target" in x.values for x in diagnosed.lanes)
    # without the planted file, what does the quantized target do to the good drafters?
    sub = type(diagnosed)(diagnosed.settings, diagnosed.stages,
                          [x for x in diagnosed.lanes if x.name != "theta.gguf"])
    lost = [d for d in sub.deltas() if d.stage == "target" and d.loss > 0]
    verdict = judge(sub)
    if lost:
        assert "target" in verdict.losses
    else:
        assert verdict.stage != "target"


def test_stage_4_runs_every_gguf_with_the_runtime_rules(diagnosed):
    assert diagnosed.stage("runtime-semantics").ran
    for x in diagnosed.lanes:
        v = x.values["runtime-semantics"]
        assert any("draft context capped" in n for n in v.notes), x.name


def test_stage_5_says_why_it_did_not_run_and_the_recommendation_is_at_stage_4(diagnosed):
    assert diagnosed.stage("runtime").why == "no --server-bin/--server"
    rec = recommend(diagnosed)
    assert rec.stage == "runtime-semantics" and rec.baseline.name == "drafter.gguf"
    base = rec.baseline.values["runtime-semantics"].mean_acceptance_length.mean
    keep = [x for x in diagnosed.lanes if not x.is_checkpoint
            and x.values["runtime-semantics"].mean_acceptance_length.mean >= base]  # one run: sd 0
    assert rec.drafter.file_size == min(x.file_size for x in keep)
    json.dumps(diagnosed.to_json(judge(diagnosed), recommend(diagnosed)))


def test_a_draft_context_shorter_than_the_prompt_is_the_runtime_semantics_stage():
    from dflash_gguf.diagnose import DiagnoseOptions, run_diagnose

    # the prompt has 49 tokens: with 16 of them as its context the drafter loses the target
    opts = DiagnoseOptions(max_new_tokens=24, device="cpu", jobs=1, draft_context=16)
    r = run_diagnose(RUNTIME / "target", RUNTIME / "drafter", _first_prompt(), drafter_ggufs=[RUNTIME / "drafter.gguf"],
                     options=opts)
    verdict = judge(r)
    assert verdict.stage == "runtime-semantics", verdict.text
    assert "conversion" not in verdict.losses  # the GGUF keeps the checkpoint's acceptance
    assert any("draft context capped at the last 16 positions (set explicitly" in f for f in verdict.facts)
    for x in r.lanes:  # the checkpoint (parity's emulation) and the GGUF (ours) both lose it
        assert x.values["runtime-semantics"].mean_acceptance_length.mean < x.values[
            "reference" if x.is_checkpoint else "conversion"].mean_acceptance_length.mean
        assert any("capped at the last 16" in n for n in x.values["runtime-semantics"].notes)
    assert r.stage("target").why == "no --target-quant, and no quantized --target-gguf"


def test_stage_5_in_a_real_llama_server_with_the_served_target_quantized(llama_server_bin, tmp_path):
    from dflash_gguf.diagnose import DiagnoseOptions, run_diagnose

    served = plant_target(tmp_path / "target-Q4_0.gguf")  # stage 3's target and llama-server's -m
    opts = DiagnoseOptions(max_new_tokens=16, device="cpu", jobs=1, server_bin=llama_server_bin, target_gguf=served)
    r = run_diagnose(RUNTIME / "target", RUNTIME / "drafter", _first_prompt(), drafter_ggufs=[RUNTIME / "drafter.gguf"],
                     options=opts)
    good = lane(r, "drafter.gguf")
    assert r.stage("target").ran and r.stage("target").notes == ["target as served: target-Q4_0.gguf (Q4_0)"]
    assert r.stage("runtime").ran, good.skipped
    assert good.values["runtime"].mean_acceptance_length.mean >= 1
    assert any(d.stage == "runtime" and d.since == "runtime-semantics" for d in r.deltas())


def _served(llama_server_bin, server_args=()):
    """The trained pair through stages 2, 4 and 5 (the f32 target.gguf served as it is)."""
    from dflash_gguf.diagnose import DiagnoseOptions, run_diagnose

    opts = DiagnoseOptions(max_new_tokens=32, device="cpu", jobs=1, server_bin=llama_server_bin,
                           target_gguf=RUNTIME / "target.gguf", server_args=tuple(server_args))
    return run_diagnose(RUNTIME / "target", RUNTIME / "drafter", _first_prompt(),
                        drafter_ggufs=[RUNTIME / "drafter.gguf"], options=opts)


def test_a_healthy_pair_loses_nothing_and_the_server_equals_its_emulation(llama_server_bin):
    """Greedy, the f32 target served as it is: llama-server accepts exactly what the emulated
    llama.cpp semantics accept (bench and parity --emulate agree on this pair), so no stage loses."""
    r = _served(llama_server_bin)
    good = lane(r, "drafter.gguf")
    assert r.stage("runtime").ran, good.skipped or good.failed
    at = {s: v.mean_acceptance_length.mean for s, v in good.values.items()}
    assert at["runtime"] == at["runtime-semantics"] == at["conversion"] > 5, at
    assert judge(r).stage is None and not [d for d in r.deltas() if d.loss > 0]


def test_server_flags_the_emulation_does_not_model_are_the_runtime_stage(llama_server_bin):
    """A high --spec-draft-p-min makes llama-server stop drafting at the first unsure token: stage 4
    keeps the acceptance, stage 5 loses it, and the verdict names the flags, not the file."""
    r = _served(llama_server_bin, ("--spec-draft-p-min", "0.99"))
    verdict = judge(r)
    assert (verdict.stage, verdict.drafter) == ("runtime", "drafter.gguf"), verdict.text
    assert set(verdict.losses) == {"runtime"}
    assert any("--server-args '--spec-draft-p-min 0.99', which stage 4 does not model" in f for f in verdict.facts)
    assert r.stage("runtime").notes[0].endswith("--spec-draft-p-min 0.99; the prompts sent as token ids")
    assert r.settings["server_args"] == ("--spec-draft-p-min", "0.99")


def test_server_args_need_a_server_diagnose_starts():
    from dflash_gguf.diagnose import DiagnoseOptions
    from dflash_gguf.errors import UsageError

    with pytest.raises(UsageError, match="--server-args are flags for the llama-server diagnose starts"):
        DiagnoseOptions(server_args=("-ngl", "99"), servers=((None, "http://127.0.0.1:8080"),))


@pytest.mark.slow
def test_a_device_mapped_transformers_target_runs_the_stages_alike():
    """Large targets: --target-backend transformers --device-map auto (accelerate places the
    target; here on the CPU) gives every stage the built-in target's numbers."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from dflash_gguf.diagnose import DiagnoseOptions, run_diagnose

    got = []
    for backend in ({}, {"target_backend": "transformers", "device_map": "auto"}):
        opts = DiagnoseOptions(max_new_tokens=16, device="cpu", jobs=1, **backend)
        r = run_diagnose(RUNTIME / "target", RUNTIME / "drafter", _first_prompt(),
                         drafter_ggufs=[RUNTIME / "drafter.gguf"], options=opts)
        got.append({(x.name, s): v.mean_acceptance_length.mean for x in r.lanes for s, v in x.values.items()})
    assert got[0] == got[1] and len(got[0]) == 4, got
    assert r.settings["device_map"] == "auto"


def test_an_aggressive_quant_is_the_conversion_stage_and_the_recommendation_avoids_it():
    """Greedy over the fixture's five prompts: Q2_K loses acceptance that Q3_K_S keeps (runs
    repeat exactly, so any loss is beyond 1σ). The verdict blames the quantization, not the
    converter (the full-precision file keeps it), and the smallest file within 1σ of it is the
    Q3_K_S one, though the Q2_K file is smaller."""
    from dflash_gguf.diagnose import DiagnoseOptions, run_diagnose
    from dflash_gguf.parity import read_prompts_file

    opts = DiagnoseOptions(device="cpu", jobs=1, quants=("q2_k", "q3_k_s"))
    r = run_diagnose(RUNTIME / "target", RUNTIME / "drafter", read_prompts_file(RUNTIME / "prompts.jsonl", RUNTIME / "target"),
                     drafter_ggufs=[RUNTIME / "drafter.gguf"], options=opts)
    at = {x.name: x.values["conversion"].mean_acceptance_length.mean for x in r.lanes if not x.is_checkpoint}
    assert at["drafter-Q2_K.gguf"] < at["drafter-Q3_K_S.gguf"] == at["drafter.gguf"], at
    verdict = judge(r)
    assert (verdict.stage, verdict.drafter) == ("conversion", "drafter-Q2_K.gguf"), verdict.text
    assert "the full-precision drafter.gguf keeps it (15.750): the loss is the quantization to Q2_K" in verdict.facts
    q2, q3 = lane(r, "drafter-Q2_K.gguf"), lane(r, "drafter-Q3_K_S.gguf")
    assert q2.file_size < q3.file_size
    assert recommend(r).drafter.name == "drafter-Q3_K_S.gguf"


def test_sliding_layers_trained_causal_run_non_causal_are_the_runtime_semantics_stage():
    """The second trained drafter (fixtures/runtime/drafter-swa: a causal, windowed sliding layer
    and a full layer): its GGUF keeps the checkpoint's acceptance, and llama.cpp's one non-causal
    flag for every layer loses it at stage 4, for the checkpoint and the file alike. The file is
    not blamed: mainline's format cannot carry per-layer causality."""
    from dflash_gguf.diagnose import DiagnoseOptions, run_diagnose
    from dflash_gguf.parity import read_prompts_file

    r = run_diagnose(RUNTIME / "target", RUNTIME / "drafter-swa",
                     read_prompts_file(RUNTIME / "prompts.jsonl", RUNTIME / "target"),
                     drafter_ggufs=[RUNTIME / "drafter-swa.gguf"], options=DiagnoseOptions(device="cpu", jobs=1))
    verdict = judge(r)
    assert verdict.stage == "runtime-semantics", verdict.text
    assert set(verdict.losses) == {"runtime-semantics"}
    assert "llama.cpp semantics: all layers non-causal (the reference makes sliding layers causal)" in verdict.facts
    for x in r.lanes:
        before = x.values["reference" if x.is_checkpoint else "conversion"].mean_acceptance_length.mean
        after = x.values["runtime-semantics"].mean_acceptance_length.mean
        assert before > 15 and after < 0.7 * before, (x.name, before, after)
