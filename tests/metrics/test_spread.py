"""Mean ± sd over runs and the >1σ rule."""
import math

import pytest

from dflash_gguf.metrics import Stat, beyond_sigma


def test_stat_is_the_sample_mean_and_sd():
    s = Stat.of([2.0, 4.0, 9.0])
    assert s.mean == pytest.approx(5.0)
    assert s.sd == pytest.approx(math.sqrt(((2 - 5) ** 2 + (4 - 5) ** 2 + (9 - 5) ** 2) / 2))
    assert Stat.of([3.0]).sd == 0.0


def test_a_difference_inside_the_spread_is_not_real():
    a, b = Stat.of([3.0, 3.4, 2.6]), Stat.of([3.2, 3.6, 2.8])  # sd 0.4 each, delta 0.2
    d = beyond_sigma(a, b)
    assert d["delta"] == pytest.approx(0.2) and d["sigma"] == pytest.approx(math.hypot(0.4, 0.4))
    assert d["real"] is False
    assert beyond_sigma(a, Stat.of([4.0, 4.4, 3.6]))["real"] is True


def test_without_spread_any_difference_is_real():
    assert beyond_sigma(Stat.of([1.0]), Stat.of([1.5]))["real"] is True
    assert beyond_sigma(Stat.of([1.0]), Stat.of([1.0]))["real"] is False
