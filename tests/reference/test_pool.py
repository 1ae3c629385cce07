"""Prompts on threads: same results as one after another, in order, errors surfaced, threads restored."""
from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from dflash_gguf.reference import generate  # noqa: E402
from dflash_gguf.quants import default_threads  # noqa: E402
from dflash_gguf.reference.pool import map_prompts, prompt_jobs, torch_threads  # noqa: E402
from tests.reference.test_loop import models  # noqa: E402,F401  (the loop tests' tiny target and drafter, vocab 8)

PROMPTS = [[1, 2, 3, 4, 5], [7, 6, 5], [1, 3, 0, 2, 2, 6, 1], [5], [4, 4, 4, 7]]


def _run(models, prompt, temperature=0.0):
    drafter, target = models
    r = generate(drafter, target, prompt, 24, temperature=temperature, seed=7, record=True, divergence=True)
    return r.output_ids, [s.draft_logits for s in r.steps if s.draft_logits is not None]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_threads_give_what_one_thread_gives_bit_for_bit(models, temperature):
    with torch_threads(1):
        serial = [_run(models, p, temperature) for p in PROMPTS]
    parallel = map_prompts(lambda p: _run(models, p, temperature), PROMPTS, 3)
    assert [ids for ids, _ in parallel] == [ids for ids, _ in serial]
    for (_, got), (_, want) in zip(parallel, serial):
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            assert torch.equal(g, w)  # the same bits, not merely close


def test_results_keep_the_items_order_whatever_finishes_first():
    def slow_first(i):
        time.sleep(0.05 if i == 0 else 0)
        return i * i

    assert map_prompts(slow_first, list(range(6)), 3) == [0, 1, 4, 9, 16, 25]


def test_items_run_at_once_on_one_torch_thread_each():
    seen, barrier = [], threading.Barrier(2, timeout=10)

    def item(i):
        barrier.wait()  # both items must be in flight together, or this times out
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return i

    before = torch.get_num_threads()
    assert map_prompts(item, [0, 1], 2) == [0, 1]
    assert {n for _, n in seen} == {1} and len({name for name, _ in seen}) == 2
    assert torch.get_num_threads() == before


def test_the_first_failing_item_is_raised_and_later_ones_do_not_start():
    started = []

    def item(i):
        started.append(i)
        if i == 1:
            raise ValueError("prompt 1 is bad")
        if i == 0:
            time.sleep(0.05)  # still running when 1 fails: it finishes, its result is dropped
        return i

    before = torch.get_num_threads()
    with pytest.raises(ValueError, match="prompt 1 is bad"):
        map_prompts(item, list(range(8)), 2)
    assert sorted(started) == [0, 1]  # the two in flight; the other six were never started
    assert torch.get_num_threads() == before


def test_one_job_runs_inline_in_the_caller():
    assert map_prompts(lambda i: threading.current_thread().name, [0, 1], 1) == [threading.current_thread().name] * 2


def test_how_many_jobs():
    assert prompt_jobs(0, "cpu", 100) == default_threads()
    assert prompt_jobs(0, "cpu", 1) == 1
    assert prompt_jobs(5, "cpu", 3) == 3
    assert prompt_jobs(2, "cpu", 3) == 2
    assert prompt_jobs(4, "cuda", 8) == 1  # one device: prompts in turn
    assert prompt_jobs(0, torch.device("cpu"), 2) == min(2, default_threads())
    with pytest.raises(ValueError, match="jobs must be >= 0"):
        prompt_jobs(-1, "cpu", 2)
