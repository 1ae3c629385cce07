"""metrics/kl.py against values worked by hand and llama-perplexity's summary rules."""
import math
import statistics

import numpy as np
import pytest

from dflash_gguf.metrics.kl import KLStats, per_position


def test_identical_logits_diverge_by_nothing():
    logits = np.random.default_rng(0).normal(size=(5, 32)) * 4
    kl = KLStats.of(logits, logits.copy())
    assert kl.values.tolist() == [0.0] * 5
    assert kl.same_top == 1.0 and kl.same_top_uncertainty == 0.0
    assert kl.to_json()["max"] == 0.0


def test_two_point_distribution_by_hand():
    # P = (1/2, 1/2), Q = (9/10, 1/10): KL(P‖Q) = ½ln(5/9) + ½ln(5) = ln(5/3); the other way round
    # KL(Q‖P) = 0.9 ln 1.8 + 0.1 ln 0.2: KL is not symmetric and P is the reference (first argument)
    p, q = np.log([[0.5, 0.5]]), np.log([[0.9, 0.1]])
    values, same = per_position(p, q)
    assert values[0] == pytest.approx(math.log(5 / 3), abs=1e-15)
    assert per_position(q, p)[0][0] == pytest.approx(0.9 * math.log(1.8) + 0.1 * math.log(0.2), abs=1e-15)
    # argmax: P's tie goes to the first index, like llama.cpp's strict ">" scan; Q's top is 0 too
    assert same.tolist() == [True]
    assert per_position([[0.0, 1.0]], [[1.0, 0.0]])[1].tolist() == [False]


def test_logits_are_shift_invariant_and_ruled_out_tokens_count():
    p = np.array([[1.0, 2.0, 3.0]])
    assert per_position(p, p + 100.0)[0][0] == pytest.approx(0.0, abs=1e-12)
    # P puts no mass on token 1: whatever Q says there adds nothing; KL = 1·(0 − ln ½) = ln 2
    values, _ = per_position([[0.0, -np.inf]], [[0.0, 0.0]])
    assert values[0] == pytest.approx(math.log(2), abs=1e-15)
    # Q rules out a token P may emit: infinite, and null in JSON rather than a non-standard Infinity
    kl = KLStats.of([[0.0, 0.0]], [[0.0, -np.inf]])
    assert kl.values[0] == math.inf and kl.to_json()["mean"] is None
    assert KLStats(np.array([1.0, math.inf, math.inf]), np.ones(3, bool)).percentile(0.9) == math.inf


def test_summary_follows_llama_perplexity():
    # 101 positions with KL 0, 1, …, 100: percentile f sits at f·100 exactly
    values = np.arange(101, dtype=float)
    same = np.arange(101) % 4 != 0  # 75 of 101 agree
    kl = KLStats(values, same).to_json()
    assert list(kl) == ["positions", "mean", "mean_uncertainty", "max", "p99_9", "p99", "p95", "p90", "median",
                        "p10", "p5", "p1", "p0_1", "min", "same_top", "same_top_uncertainty"]
    assert (kl["max"], kl["p99_9"], kl["p99"], kl["p95"], kl["p90"], kl["median"]) == pytest.approx(
        (100, 99.9, 99, 95, 90, 50))
    assert (kl["p10"], kl["p5"], kl["p1"], kl["p0_1"], kl["min"]) == pytest.approx((10, 5, 1, 0.1, 0))
    # standard error: sqrt((E[x²] − E[x]²) / (n − 1)) = sample sd / sqrt(n)
    assert kl["mean"] == 50.0
    assert kl["mean_uncertainty"] == pytest.approx(statistics.stdev(values) / math.sqrt(101))
    assert kl["same_top"] == pytest.approx(75 / 101)
    assert kl["same_top_uncertainty"] == pytest.approx(math.sqrt(75 / 101 * 26 / 101 / 100))


def test_percentiles_are_ordered_and_the_even_median_averages():
    rng = np.random.default_rng(1)
    p, q = rng.normal(size=(257, 50)), rng.normal(size=(257, 50))
    kl = KLStats.of(p, q).to_json()
    chain = [kl[k] for k in ("max", "p99_9", "p99", "p95", "p90", "median", "p10", "p5", "p1", "p0_1", "min")]
    assert chain == sorted(chain, reverse=True) and chain[-1] > 0
    assert KLStats(np.array([4.0, 1.0, 3.0, 2.0]), np.ones(4, bool)).percentile(0.5) == 2.5


def test_few_positions_have_no_uncertainty_and_pooling_concatenates():
    a = KLStats(np.array([1.0, 3.0]), np.array([True, False]))
    assert a.mean == 2.0 and a.mean_uncertainty == 0.0  # ≤ 10 positions: llama.cpp reports 0
    b = KLStats(np.arange(10, dtype=float), np.ones(10, bool))
    both = KLStats.pool([a, b])
    assert both.count == 12 and both.values.tolist()[:2] == [1.0, 3.0] and both.same.sum() == 11
    assert both.mean_uncertainty > 0
    assert KLStats.pool([]).to_json() == {"positions": 0}


def test_torch_tensors_and_shape_checks():
    torch = pytest.importorskip("torch")
    p = torch.tensor([[0.0, 0.0]], dtype=torch.bfloat16)
    q = torch.log(torch.tensor([[0.9, 0.1]]))
    assert per_position(p, q)[0][0] == pytest.approx(math.log(5 / 3), rel=1e-6)
    with pytest.raises(ValueError, match="same positions and vocabulary"):
        per_position(np.zeros((2, 3)), np.zeros((2, 4)))
