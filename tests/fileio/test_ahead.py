"""ReadAhead: order, one item computed ahead on another thread, errors raised at their item,
and a clean stop (the item in progress finishes, nothing further is computed)."""
import threading

import pytest

from dflash_gguf.fileio.ahead import ReadAhead


def test_items_in_order_and_worker_stops():
    with ReadAhead(iter(range(1000))) as items:
        got = list(items)
    assert got == list(range(1000))
    assert not [t for t in threading.enumerate() if t.name == "dflash-read-ahead"]


def test_empty_iterator():
    with ReadAhead(iter(())) as items:
        assert list(items) == []


def test_next_item_is_computed_while_the_caller_holds_the_current_one():
    produced = threading.Event()
    where = []

    def gen():
        yield 0
        where.append(threading.current_thread().name)
        produced.set()
        yield 1

    with ReadAhead(gen()) as items:
        first = next(items)
        # Item 1 is computed without the caller asking for it: on the worker thread.
        assert produced.wait(10)
        assert first == 0 and list(items) == [1]
    assert where == ["dflash-read-ahead"]


def test_an_error_is_raised_at_its_item():
    def gen():
        yield "a"
        yield "b"
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        with ReadAhead(gen()) as items:
            for x in items:
                got.append(x)
    assert got == ["a", "b"]


def test_caller_error_waits_for_the_item_in_progress_and_stops():
    release = threading.Event()
    advanced = []

    def gen():
        for k in range(10):
            if k == 1:
                assert release.wait(10)
            advanced.append(k)
            yield k

    with pytest.raises(RuntimeError, match="write failed"):
        with ReadAhead(gen()) as items:
            for x in items:
                release.set()  # item 1 is in progress on the worker now
                raise RuntimeError("write failed")
    # Item 1 finished before the block was left; item 2 was never started.
    assert advanced == [0, 1]
    assert not [t for t in threading.enumerate() if t.name == "dflash-read-ahead"]
