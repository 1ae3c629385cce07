"""Ctrl-C or SIGTERM to a running `dflash-gguf bench`: the server it started is stopped, exit 130,
one error line. Run as a real subprocess so the signal arrives the way a terminal sends it."""
import signal
import time

import pytest

from tests.bench.conftest import TARGET, bench_subprocess, pid_gone


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_signal_stops_the_server_and_exits_130(tmp_path, fake_bin, drafters, sig):
    pidfile = tmp_path / "server.pid"
    proc = bench_subprocess("--server-bin", fake_bin, "--target", TARGET, "--drafter", drafters["good"],
                            "--suite", "code", "--n-predict", 8,
                            env={"FAKE_PIDFILE": str(pidfile), "FAKE_DELAY": "0.3"})
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pidfile.exists(), "the fake server never started"
        time.sleep(1.5)  # healthy, warmed up, inside a request
        proc.send_signal(sig)
        so, se = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, se
    lines = se.strip().splitlines()
    assert lines[-1].startswith("error: interrupted: the server bench started was stopped")
    assert sum(ln.startswith("error:") for ln in lines) == 1 and "Traceback" not in se
    assert pid_gone(int(pidfile.read_text()))
