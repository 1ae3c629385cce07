"""``quantize``'s worker processes (the numpy path of a large job, ``quants/workers.py``) never
outlive it: killed by any signal, SIGKILL included (no clean-up runs in the parent), or stopped
by an error, the workers are gone within seconds. Before, a SIGKILLed quantize left its workers
blocked for ever on the task pipe (and multiprocessing's resource tracker with them)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dflash_gguf.errors import Interrupted, QuantizationError
from dflash_gguf.quants import workers
from tests.redteam.harness import CLI, assert_bounded, assert_one_line_error, fingerprint, leftovers, run_cli

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc")


def big_gguf(path: Path, nan_first: bool = False) -> Path:
    """One BF16 ffn_up tensor of exactly ``workers.MIN_VALUES`` values (Q4_K under q4_k_m: a
    search type, so the job goes to worker processes), its data a hole: 64 MiB of zeros that
    cost no disk. ``nan_first``: the first value is a NaN (the first task fails)."""
    from gguf import GGMLQuantizationType, GGUFWriter

    cols = 8192
    rows = workers.MIN_VALUES // cols
    w = GGUFWriter(path, "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_tensor_info("blk.0.ffn_up.weight", (rows, cols), np.dtype(np.uint16), rows * cols * 2,
                      raw_dtype=GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    start = -(-path.stat().st_size // 32) * 32  # general.alignment's default
    with open(path, "r+b") as f:
        f.truncate(start + rows * cols * 2)
        if nan_first:
            f.seek(start)
            f.write(np.array([0x7FC0], np.uint16).tobytes())
    return path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[19])


def _children(pid: int) -> dict[int, int]:
    """Direct children of ``pid``: pid -> start time (to tell a reused pid apart)."""
    kids: dict[int, int] = {}
    for f in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            ids = f.read_text().split()
        except OSError:
            continue
        for k in map(int, ids):
            st = _stat(k)
            if st is not None:
                kids[k] = st[1]
    return kids


def _alive(procs: dict[int, int]) -> list[int]:
    """The processes of ``procs`` still running (a zombie has ended: where no init reaps the
    orphans it re-parented, it stays listed)."""
    out = []
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[1] == start and st[0] not in "ZX":
            out.append(pid)
    return out


def _gone_within(procs: dict[int, int], seconds: float) -> float:
    """Wait until none of ``procs`` runs (at most ``seconds``); how long that took."""
    t0 = time.monotonic()
    while _alive(procs) and time.monotonic() - t0 < seconds:
        time.sleep(0.02)
    return time.monotonic() - t0


def _reap(procs: dict[int, int], parent: subprocess.Popen) -> None:
    """Whatever a failed test left running: killed by pid, never by name."""
    for k in _alive(procs):
        os.kill(k, signal.SIGKILL)
    if parent.poll() is None:
        parent.kill()
        parent.wait()


def _reading(pid: int, src: Path) -> bool:
    try:
        return any(os.readlink(fd) == str(src) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _quantize(src: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "DFLASH_GGUF_NUMBA": "0"}  # the numpy path: the one with worker processes
    env.pop("DFLASH_DEBUG", None)
    return subprocess.Popen([*CLI, "quantize", str(src), str(out), "q4_k_m", "--threads", "2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_die_with_a_killed_quantize(tmp_path, sig):
    src = big_gguf(tmp_path / "big.gguf")
    out = tmp_path / "q.gguf"
    before = fingerprint([src])
    p = _quantize(src, out)
    kids: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and p.poll() is None:
            kids = _children(p.pid)
            busy = [k for k in kids if _reading(k, src)]
            if len(busy) >= 2:  # both workers started and quantizing (they open the input themselves)
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"quantize never started two worker processes (exit {p.poll()}, children {kids})")
        kids = _children(p.pid)  # the workers and multiprocessing's resource tracker
        p.send_signal(sig)
        p.wait(timeout=10)
        _gone_within(kids, 5)
        left = _alive(kids)
        assert left == [], f"processes of the {sig.name}ed quantize still running after 5 s: {left}"
    finally:
        _reap(kids, p)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    assert fingerprint([src]) == before
    assert "Traceback" not in err, err
    if sig == signal.SIGTERM:  # unwinds like Ctrl-C: one line, partial output removed
        assert p.returncode == Interrupted.exit_code, err
        assert [ln for ln in err.splitlines() if ln.startswith("error:")] and not out.exists(), err
        assert leftovers(tmp_path) == []


def test_a_failing_job_stops_its_workers_without_waiting_out_the_file(tmp_path):
    """The first task finds a NaN: one line, exit 8, well before the 32 Mi values are quantized,
    and no worker left running."""
    src = big_gguf(tmp_path / "nan.gguf", nan_first=True)
    out = tmp_path / "q.gguf"
    before = fingerprint([src])
    run = run_cli(["quantize", src, out, "q4_k_m", "--threads", "2"], env={"DFLASH_GGUF_NUMBA": "0"}, timeout=60)
    assert_one_line_error(run, QuantizationError.exit_code)
    assert "blk.0.ffn_up.weight" in run.stderr, str(run)
    assert not out.exists() and leftovers(tmp_path) == [] and fingerprint([src]) == before
    assert_bounded(run, rss_mib=600, wall_s=30)


_ORPHAN = """
import os, sys, time
from dflash_gguf.quants import workers
if sys.argv[1] == "poll":
    del os.pidfd_open  # the fallback: getppid() polled
workers._init_worker(int(sys.argv[2]))
print("watching", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["pidfd", "poll"])
def test_a_worker_whose_parent_is_gone_exits(how):
    """The watch itself, both ways it waits: a middle process starts a "worker" and dies by
    SIGKILL; the worker is gone within a second or so. And a worker whose parent is already gone
    when it starts (the race before the watch is set up) exits at once."""
    if how == "pidfd" and not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open here")
    middle = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        f"w = subprocess.Popen([sys.executable, '-c', {_ORPHAN!r}, {how!r}, str(os.getpid())], stdout=subprocess.PIPE)\n"
        "assert w.stdout.readline() == b'watching\\n'\n"
        "print(w.pid, flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, start_new_session=True)
    worker = {}
    try:
        pid = int(middle.stdout.readline())
        worker = {pid: _stat(pid)[1]}
        assert _alive(worker) == [pid]
        middle.kill()
        middle.wait()
        took = _gone_within(worker, 5)
        assert _alive(worker) == [] and took < 2, f"the worker outlived its parent by {took:.1f} s"
    finally:
        _reap(worker, middle)
        middle.stdout.close()
    # started by this test's process, but told its parent is the (dead) middle one: it exits at once
    r = subprocess.run([sys.executable, "-c", _ORPHAN, how, str(middle.pid)], capture_output=True, timeout=30)
    assert r.returncode == 1 and r.stdout == b"", r
