"""quants/workers.py: the numpy path's quantize tasks in worker processes, same bytes as threads."""
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from gguf import GGMLQuantizationType as Q_

from dflash_gguf.quants import _numba, gguf_file, workers

from tests.quants.test_gguf_file import odd_gguf


@pytest.fixture
def numpy_path():
    prev = _numba.set_enabled(False)
    yield
    _numba.set_enabled(prev)


@pytest.fixture
def counted_pool(monkeypatch):
    """workers.start, with the tasks each pool was given counted (they run in the children)."""
    pools = []
    real_start = workers.start

    def start(n):
        pool = real_start(n)
        real_submit, count = pool.submit, [0]

        def submit(*a, **k):
            count[0] += 1
            return real_submit(*a, **k)

        pool.submit = submit
        pools.append((n, count))
        return pool

    monkeypatch.setattr(workers, "start", start)
    return pools


@pytest.mark.parametrize("ftype", ["q4_k_m", "q8_0"])
def test_processes_write_the_bytes_threads_write(tmp_path, monkeypatch, numpy_path, counted_pool, ftype):
    from dflash_gguf.quants.gguf_file import quantize_gguf

    src = odd_gguf(tmp_path / "odd.gguf")
    monkeypatch.setattr(gguf_file, "TASK_VALUES", 3 * 512)  # several tasks per tensor, uneven
    quantize_gguf(src, tmp_path / "threads.gguf", ftype, threads=2)
    assert counted_pool == []  # a small job: no processes started
    monkeypatch.setattr(workers, "MIN_VALUES", 0)
    quantize_gguf(src, tmp_path / "procs.gguf", ftype, threads=2)
    if ftype == "q8_0":  # Q8_0 and its Q5_0 fallback are one-pass quantizers: threads only
        assert counted_pool == []
    else:  # tasks of 3, 2 and 6 rows: ffn_up (Q4_K), ffn_down and attn_v (Q6_K); attn_q (Q5_0) on threads
        assert [n for n, _ in counted_pool] == [2] and counted_pool[0][1][0] == 13 + 15 + 7
    assert (tmp_path / "procs.gguf").read_bytes() == (tmp_path / "threads.gguf").read_bytes()


def test_a_workers_non_finite_error_reaches_the_cli(tmp_path, monkeypatch, numpy_path, counted_pool, cli):
    """The worker's QuantizationError comes back whole: the tensor, the index in the whole
    tensor, exit code 8, and no output file."""
    src = odd_gguf(tmp_path / "nan.gguf", nan_at=(20, 7))
    monkeypatch.setattr(workers, "MIN_VALUES", 0)
    monkeypatch.setattr(gguf_file, "TASK_VALUES", 3 * 512)  # row 20 is in the 7th task
    code, _, err = cli("quantize", src, tmp_path / "x.gguf", "q4_k_m", "--threads", "2")
    assert counted_pool and code == 8, err
    assert "blk.0.ffn_up.weight" in err and "(20, 7)" in err and "Traceback" not in err
    assert not (tmp_path / "x.gguf").exists()


def _die(*args):
    """A worker that dies as an OOM kill would leave it: no exception, no result."""
    os._exit(3)


def test_a_dead_worker_is_one_error_line_and_no_file(tmp_path, monkeypatch, numpy_path, cli):
    src = odd_gguf(tmp_path / "odd.gguf")
    monkeypatch.setattr(workers, "MIN_VALUES", 0)
    monkeypatch.setattr(workers, "quantize_rows", _die)  # pickled by name: the worker imports this module
    code, _, err = cli("quantize", src, tmp_path / "x.gguf", "q4_k_m", "--threads", "2")
    assert code == 8 and err.strip().splitlines() == [
        "error: a quantize worker process died (killed, or out of memory?); nothing was written. "
        "Re-run; --threads 1 quantizes in this process only"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.gguf"]


def test_worth_it_only_for_large_numpy_search_jobs(monkeypatch):
    def entries(qtype, quantized=True):
        return [SimpleNamespace(shape=(4096, 8192), ggml_type=qtype, quantized=quantized)] * 2  # 64 M values

    big = entries(Q_.Q4_K)
    prev = _numba.set_enabled(False)
    try:
        assert workers.worth_it(2, big) and workers.worth_it(2, entries(Q_.Q6_K))
        assert not workers.worth_it(1, big)
        assert not workers.worth_it(2, entries(Q_.Q4_K, quantized=False))  # copied: nothing to quantize
        assert not workers.worth_it(2, entries(Q_.Q8_0))  # a one-pass quantizer: threads
        assert not workers.worth_it(2, [SimpleNamespace(shape=(64, 64), ggml_type=Q_.Q4_K, quantized=True)])
        if _numba.AVAILABLE:
            _numba.set_enabled(True)
            assert not workers.worth_it(2, big)  # numba's kernels release the GIL: threads
    finally:
        _numba.set_enabled(prev)


def test_workers_leave_ctrl_c_to_the_parent():
    code = ("import signal; from dflash_gguf.quants import _numba, workers; workers._init_worker(); "
            "print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN, _numba.enabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]
