"""The report from recorded requests: which source each number comes from, speed-up, the >1σ rule."""
from pathlib import Path

import pytest

from dflash_gguf.bench.report import build_report
from dflash_gguf.bench.run import BenchResult, ConfigResult, Mode, RequestRecord
from dflash_gguf.bench.suites import Prompt, Suite
from dflash_gguf.metrics.acceptance import Acceptance

SUITE = Suite("s", (Prompt("p0", "x"), Prompt("p1", "y")), "test")
MODE = Mode("raw", False, None)


def rec(run, pid, n, secs, text="t", **kw):
    return RequestRecord(suite="s", mode="raw", run=run, prompt_id=pid, text=text, prompt_n=4, predicted_n=n,
                         decode_s=secs, wall_s=secs * 2, drafted=kw.pop("drafted", None),
                         accepted=kw.pop("accepted", None), verify_steps=kw.pop("verify_steps", None), **kw)


def result(*configs, temperature=0.0):
    return BenchResult(settings={"temperature": temperature}, suites=[SUITE], modes=[MODE], configs=list(configs))


def baseline(tps=(100.0, 100.0)):
    c = ConfigResult("baseline", None, "u")
    c.records = [rec(r, p, 50, 50 / tps[r]) for r in range(len(tps)) for p in ("p0", "p1")]
    return c


def test_trace_steps_give_every_number_and_speedup_against_the_baseline_mean():
    d = ConfigResult("d", Path("d.gguf"), "u", n_draft=4)
    steps = {"p0": [(4, 4), (4, 1)], "p1": [(4, 0), (3, 3)]}
    d.records = [rec(r, p, 50, 50 / (200.0 * (1 + r)), drafted=sum(s[0] for s in steps[p]),
                     accepted=sum(s[1] for s in steps[p]), steps=steps[p]) for r in (0, 1) for p in ("p0", "p1")]
    rep = build_report(result(baseline(), d))
    row = next(r for r in rep.rows if r.config == "d")
    want = Acceptance.of([steps["p0"], steps["p1"]], 4)
    assert row.source == "trace" and row.acceptance_rate.mean == pytest.approx(want.rate)
    assert [s.mean for s in row.per_position] == pytest.approx(want.per_position())
    assert row.histogram == [2 * n for n in want.histogram()]
    assert row.tokens_per_s.values == pytest.approx([200.0, 400.0])
    assert row.speedup.values == pytest.approx([2.0, 4.0])  # each run over the baseline's mean (100 tok/s)
    assert row.same_as_baseline == (4, 4)


def test_vllm_style_counters_rebuild_the_histogram():
    d = ConfigResult("v", None, "u")
    # 5 steps, 3 positions: reached pos1 by 4 steps, pos2 by 2, pos3 by 1 -> exactly 0:1, 1:2, 2:1, 3:1
    d.records = [rec(0, "p0", 20, 1.0, drafted=15, accepted=7, verify_steps=5, per_position=[4, 2, 1])]
    row = build_report(result(d)).rows[0]
    assert row.source == "metrics" and row.histogram == [1, 2, 1, 1]
    assert row.mean_length.mean == pytest.approx(1 + 7 / 5) and row.acceptance_rate.mean == pytest.approx(7 / 15)
    assert row.drift is None


def test_totals_only_and_a_drafter_that_never_drafted():
    t = ConfigResult("t", None, "u")
    t.records = [rec(0, "p0", 20, 1.0, drafted=10, accepted=4)]
    row = build_report(result(t)).rows[0]
    assert row.source == "totals" and row.acceptance_rate.mean == 0.4 and row.mean_length is None
    idle = ConfigResult("idle", Path("i.gguf"), "u")
    idle.records = [rec(0, "p0", 20, 1.0, drafted=0, accepted=0, steps=[])]
    row = build_report(result(idle)).rows[0]
    assert row.source is None and any("drafted nothing" in n for n in row.notes)


def test_comparisons_apply_the_one_sigma_rule():
    def drafter(name, accepted_per_run):
        c = ConfigResult(name, Path(f"{name}.gguf"), "u", n_draft=4)
        c.records = [rec(r, "p0", 10, 1.0, drafted=8, accepted=a, steps=[(4, a // 2), (4, a - a // 2)])
                     for r, a in enumerate(accepted_per_run)]
        return c

    rep = build_report(result(drafter("a", [4, 6]), drafter("b", [5, 5]), drafter("c", [8, 8]), temperature=0.7))
    by = {(c["a"], c["b"]): c["mean_acceptance_length"] for c in rep.comparisons}
    assert not by[("a", "b")]["real"]  # same mean, a's spread
    assert by[("a", "c")]["real"] and by[("a", "c")]["delta"] == pytest.approx(1.5)
    doc = rep.to_json()
    assert doc["schema"] == "dflash-gguf.bench/1" and len(doc["requests"]) == 6
    assert doc["rows"][0]["per_position"][0] == {"mean": pytest.approx(1.0), "sd": 0.0, "values": [1.0, 1.0]}
