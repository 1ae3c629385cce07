"""Launching and stopping llama-server (the fake here): one-line errors, and no process left behind."""
import os
import socket
import stat

import pytest

from dflash_gguf.bench import server as srv_mod
from dflash_gguf.bench.server import LlamaServer, ServerSpec, find_server_bin, live_pids
from dflash_gguf.errors import ServerError
from tests.bench.conftest import TARGET, pid_gone


def spec(fake_bin, **kw):
    return ServerSpec(bin=fake_bin, target=TARGET, startup_timeout=kw.pop("startup_timeout", 20), **kw)


def test_find_server_bin_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(srv_mod.ENV_BIN, raising=False)
    with pytest.raises(ServerError, match="no such file"):
        find_server_bin(tmp_path / "nope")
    with pytest.raises(ServerError, match="is a directory"):
        find_server_bin(tmp_path)
    f = tmp_path / "llama-server"
    f.write_text("#!/bin/sh\n")
    with pytest.raises(ServerError, match="not executable"):
        find_server_bin(f)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ServerError, match="not found on PATH") as e:
        find_server_bin(None)
    assert "\n" not in str(e.value)


def test_find_server_bin_from_env_then_path(tmp_path, monkeypatch, fake_bin):
    monkeypatch.setenv(srv_mod.ENV_BIN, str(fake_bin))
    assert find_server_bin(None) == fake_bin.resolve()
    monkeypatch.delenv(srv_mod.ENV_BIN)
    monkeypatch.setenv("PATH", str(fake_bin.parent))
    assert find_server_bin(None) == fake_bin


def test_start_healthy_then_stop_leaves_nothing(fake_bin, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_LOAD_S", "0.3")  # /health says 503 while "loading"
    with LlamaServer(spec(fake_bin)) as s:
        pid = s.pid
        assert s.alive() and pid in live_pids()
        assert "listening" in s.read_log()
        assert "LLAMA_TRACE = 1" in s.read_log()  # bench always turns the step trace on
        log_dir = s.log_path.parent
    assert pid_gone(pid) and pid not in live_pids()
    assert not log_dir.exists()


def test_exit_before_ready_quotes_the_log(fake_bin, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_EXIT_AT_START", "3")
    with pytest.raises(ServerError) as e:
        LlamaServer(spec(fake_bin)).start()
    msg = str(e.value)
    assert "exited (exit code 3) before it was ready" in msg and "failed to load model" in msg and "\n" not in msg
    assert not live_pids()


def test_never_healthy_times_out_and_is_stopped(fake_bin, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_NEVER_HEALTHY", "1")
    with pytest.raises(ServerError, match="not healthy after 1 s"):
        LlamaServer(spec(fake_bin, startup_timeout=1)).start()
    assert pid_gone(int(fake_env.read_text()))


def test_port_in_use_is_refused_before_launching(fake_bin, fake_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is in use") as e:
            LlamaServer(spec(fake_bin, port=port)).start()
    assert "--port" in str(e.value) and not fake_env.exists()


def test_bind_failure_reported_by_the_server_itself(fake_bin, fake_env, monkeypatch):
    # the race: the port was free when checked, taken when the server binds
    monkeypatch.setattr(srv_mod, "port_in_use", lambda port: False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerError, match=f"could not bind 127.0.0.1:{port}"):
            LlamaServer(spec(fake_bin, port=port)).start()


def test_sigterm_ignored_escalates_to_sigkill(fake_bin, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_IGNORE_TERM", "1")
    monkeypatch.setattr(srv_mod, "STOP_GRACE_S", 0.5)
    with LlamaServer(spec(fake_bin)) as s:
        pid = s.pid
    assert pid_gone(pid)


def test_binary_that_cannot_exec(tmp_path, fake_env):
    bad = tmp_path / "llama-server"
    bad.write_bytes(b"\x7fELF garbage")
    bad.chmod(bad.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ServerError, match="cannot run") as e:
        LlamaServer(ServerSpec(bin=bad, target=TARGET)).start()
    assert "\n" not in str(e.value)


def test_died_error_after_a_crash(fake_bin, fake_env):
    with LlamaServer(spec(fake_bin)) as s:
        assert s.died_error("now") is None
        os.kill(s.pid, 9)
        err = s.died_error("during request 3")
        assert err is not None and "died during request 3 (killed by SIGKILL)" in str(err)
