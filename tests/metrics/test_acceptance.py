"""Acceptance statistics counted the way llama-server counts them."""
import pytest

from dflash_gguf.metrics import Acceptance


def test_counts_as_llama_server_does():
    # llama-server: rate = accepted / drafted; mean len = 1 + accepted / verification steps
    a = Acceptance.of([[(15, 3), (15, 15), (15, 0)], [(15, 7)]], n_draft=15)
    assert (a.drafted, a.accepted, len(a.steps)) == (60, 25, 4)
    assert a.rate == pytest.approx(25 / 60)
    assert a.mean_length == pytest.approx(1 + 25 / 4)


def test_per_position_and_histogram_agree_with_the_steps():
    a = Acceptance.of([[(4, 0), (4, 2), (4, 4), (3, 3)]], n_draft=4)
    # position i is reached by the steps that accepted more than i drafts
    assert a.per_position() == [0.75, 0.75, 0.5, 0.25]
    assert a.histogram() == [1, 0, 1, 1, 1]
    assert sum(a.histogram()) == len(a.steps)
    # the first position's share times the steps, summed over positions, is the accepted count
    assert sum(p * len(a.steps) for p in a.per_position()) == pytest.approx(a.accepted)


def test_drift_compares_each_requests_first_and_last_half():
    a = Acceptance.of([[(4, 4), (4, 4), (4, 1), (4, 0), (4, 0)], [(4, 2), (4, 0)]])
    d = a.drift()
    assert d["first"] == pytest.approx((4 + 4 + 2) / 12)  # steps 0-1 of request 0, step 0 of request 1
    assert d["last"] == pytest.approx((0 + 0 + 0) / 12)  # steps 3-4 and step 1; the middle step is in neither
    assert d["delta"] == pytest.approx(d["last"] - d["first"])


def test_the_widest_step_sets_the_positions_when_none_is_given():
    assert Acceptance.of([[(2, 1), (5, 5)]]).n_draft == 5


def test_no_steps_reads_as_nothing_accepted():
    a = Acceptance.of([[]], n_draft=3)
    assert (a.rate, a.mean_length, a.per_position(), a.histogram()) == (0.0, 1.0, [0.0] * 3, [0] * 4)


@pytest.mark.parametrize("step", [(3, 4), (-1, 0), (2, -1)])
def test_impossible_counts_are_refused(step):
    with pytest.raises(ValueError, match="accepted"):
        Acceptance.of([[step]])
