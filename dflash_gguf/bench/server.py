"""Find, start, watch and stop a ``llama-server`` for ``bench``, and never leave one behind.

The server runs in its own session (process group), so a Ctrl-C in the terminal reaches only
us and we stop it in order: SIGTERM to the group (llama-server shuts down gracefully), then
SIGKILL after a grace period. Three nets catch the paths where our ``with`` block cannot run:
SIGTERM/SIGHUP to us are turned into KeyboardInterrupt while a server is up (so the ``with``
unwinds), ``atexit`` stops whatever is still registered, and on Linux the child asks the kernel
to SIGKILL it if we die without cleaning up (``PR_SET_PDEATHSIG``: even a SIGKILL of bench does
not leave a model holding gigabytes of memory).

Everything the server prints (stdout and stderr, which llama.cpp splits by log level) goes to
one log file; ``LLAMA_TRACE=1`` makes it log every verification step, which ``trace`` parses.
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ServerError
from .trace import read_tail
from .transport import RequestFailed, fetch

ENV_BIN = "DFLASH_LLAMA_SERVER"
HOST = "127.0.0.1"
STOP_GRACE_S = 10.0
# What llama-server prints when its HTTP socket is taken (tools/server/server.cpp, cpp-httplib).
_BIND_FAILURES = ("couldn't bind", "could not bind", "address already in use", "failed to bind")


def find_server_bin(given: str | os.PathLike[str] | None = None) -> Path:
    """The llama-server to run: ``given``, else ``$DFLASH_LLAMA_SERVER``, else ``llama-server`` on PATH.

    Raises:
        ServerError: the binary does not exist or is not executable.
    """
    source = "--server-bin"
    if given is None and os.environ.get(ENV_BIN):
        given, source = os.environ[ENV_BIN], f"${ENV_BIN}"
    if given is None:
        found = shutil.which("llama-server")
        if found is None:
            raise ServerError("llama-server not found on PATH: build llama.cpp's server (cmake --build ... --target "
                              f"llama-server) and pass --server-bin PATH, or set {ENV_BIN}")
        return Path(found)
    p = Path(given).expanduser()
    if p.is_dir():
        raise ServerError(f"{source} {p}: is a directory; pass the llama-server binary itself (e.g. {p}/llama-server)")
    if not p.exists():
        raise ServerError(f"{source} {p}: no such file; pass the path of a built llama-server")
    if not os.access(p, os.X_OK):
        raise ServerError(f"{source} {p}: not executable (chmod +x it, or pass the right binary)")
    return p.resolve()


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick; a race with another process is possible,
    and a bind failure at start-up is retried on a new port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


@dataclass(frozen=True)
class ServerSpec:
    """One llama-server configuration: the target, optionally a drafter, and the flags."""

    bin: Path
    target: Path
    drafter: Path | None = None
    spec_type: str | None = None  # "draft-dflash" / "draft-dspark"; None lets the runtime infer it
    port: int | None = None       # None: pick a free one
    ctx_size: int | None = None
    threads: int | None = None
    extra_args: tuple[str, ...] = ()
    startup_timeout: float = 300.0
    env: tuple[tuple[str, str], ...] = ()

    def argv(self, port: int) -> list[str]:
        # -np 1: one slot, so requests run one at a time and every trace line of a task is ours.
        a = [str(self.bin), "-m", str(self.target), "--host", HOST, "--port", str(port), "-np", "1"]
        if self.drafter is not None:
            a += ["-md", str(self.drafter)]
            if self.spec_type:
                a += ["--spec-type", self.spec_type]
        if self.ctx_size:
            a += ["-c", str(self.ctx_size)]
        if self.threads:
            a += ["-t", str(self.threads)]
        return a + list(self.extra_args)


@dataclass
class LlamaServer:
    """A running llama-server; use as a context manager (``with LlamaServer(spec) as srv:``)."""

    spec: ServerSpec
    proc: subprocess.Popen | None = None
    port: int = 0
    log_path: Path | None = None
    _log_dir: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def __enter__(self) -> "LlamaServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- start -------------------------------------------------------------------------

    def start(self) -> None:
        """Launch and wait until ``/health`` answers 200.

        Raises:
            ServerError: the port is taken, the binary cannot run, or the server exits (or
                stays unhealthy past ``startup_timeout``) before it is ready; the message
                quotes its last log lines.
        """
        try:
            self._start()
        except BaseException:  # Ctrl-C while loading included: __exit__ does not run when __enter__ fails
            self.stop()
            raise

    def _start(self) -> None:
        given = self.spec.port
        if given is not None and port_in_use(given):
            raise ServerError(f"port {given} on {HOST} is in use (another llama-server?): pass a free --port, "
                              "or leave --port out to pick one")
        for attempt in range(3):  # a picked port can be taken between our check and the bind
            self.port = given if given is not None else free_port()
            self._launch()
            try:
                self._wait_healthy()
                return
            except ServerError:
                bind = self._bind_failed()
                self.stop()
                if bind and given is None and attempt < 2:
                    continue
                if bind:
                    raise ServerError(f"llama-server could not bind {HOST}:{self.port} (port in use): pass a free "
                                      "--port, or leave --port out to pick one") from None
                raise

    def _launch(self) -> None:
        self._log_dir = tempfile.mkdtemp(prefix="dflash-bench-")
        self.log_path = Path(self._log_dir) / "llama-server.log"
        env = {**os.environ, "LLAMA_TRACE": "1", **dict(self.spec.env)}
        # The shared libraries of a build tree sit beside the binary (bin/libllama.so).
        lib = str(self.spec.bin.parent)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [lib, env.get("LD_LIBRARY_PATH")]))
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(self.spec.argv(self.port), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                         preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        except OSError as exc:
            self._cleanup_log()
            raise ServerError(f"cannot run {self.spec.bin}: {exc.strerror or exc}; pass a working llama-server "
                              "with --server-bin") from None
        finally:
            log.close()
        _register(self)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.spec.startup_timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerError(f"llama-server exited ({_exit_text(code)}) before it was ready: "
                                  f"{self.log_tail()}")
            try:  # each probe has a wall-clock deadline: a server dribbling bytes cannot hold us
                fetch(self.url, "/health", timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                return
            except RequestFailed:  # not listening yet, or 503 while the model loads
                pass
            if time.monotonic() > deadline:
                raise ServerError(f"llama-server not healthy after {self.spec.startup_timeout:.0f} s on {self.url}: "
                                  f"{self.log_tail()} (raise --startup-timeout for a large model)")
            time.sleep(0.1)

    def _bind_failed(self) -> bool:
        text = self.read_log().lower()
        return any(s in text for s in _BIND_FAILURES)

    # --- watch -------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died_error(self, during: str) -> ServerError | None:
        """A one-line error when the server is gone (after a failed request), else None."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout=1.0)  # a crash is usually a moment behind the broken socket
        except subprocess.TimeoutExpired:
            return None
        return ServerError(f"llama-server (pid {self.proc.pid}) died {during} ({_exit_text(code)}): "
                           f"{self.log_tail()}")

    def read_log(self) -> str:
        """The end of the log (``trace.LOG_TAIL_BYTES``): start-up errors and the last lines."""
        return "" if self.log_path is None else read_tail(self.log_path).decode("utf-8", errors="replace")

    def log_tail(self, n: int = 3) -> str:
        """The last ``n`` meaningful log lines joined on one line (for an error message)."""
        lines = [ln.strip() for ln in self.read_log().splitlines() if ln.strip()]
        if not lines:
            return "(no log output)"
        tail = " | ".join(lines[-n:])
        return "last log lines: " + (tail if len(tail) <= 600 else "…" + tail[-600:])

    # --- stop --------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``STOP_GRACE_S``; idempotent."""
        proc, self.proc = self.proc, None
        try:
            if proc is not None:
                _terminate_group(proc)
        except KeyboardInterrupt:  # a second Ctrl-C while it shuts down: no more grace
            _signal_group(proc, signal.SIGKILL)
            raise
        finally:
            if proc is not None:
                _unregister(self)
            self._cleanup_log()

    def _cleanup_log(self) -> None:
        if self._log_dir and os.environ.get("DFLASH_BENCH_KEEP_LOGS") != "1":
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None


def _terminate_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        if not _signal_group(proc, sig):
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    _signal_group(proc, signal.SIGKILL)  # the leader is gone; anything it forked into its group goes too


def _signal_group(proc: subprocess.Popen, sig: int) -> bool:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    if sig == signal.SIGKILL:
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
    return True


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort; the other nets still hold
        pass


# --- every live server, for atexit and SIGTERM ----------------------------------------------

_LIVE: list[LlamaServer] = []
_SAVED: dict[int, object] = {}
_LOCK = threading.Lock()


def _register(srv: LlamaServer) -> None:
    with _LOCK:
        _LIVE.append(srv)
        if len(_LIVE) == 1 and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                _SAVED[sig] = signal.signal(sig, _as_interrupt)


def _unregister(srv: LlamaServer) -> None:
    with _LOCK:
        if srv in _LIVE:
            _LIVE.remove(srv)
        if not _LIVE and threading.current_thread() is threading.main_thread():
            for sig, old in _SAVED.items():
                signal.signal(sig, old)
            _SAVED.clear()


def _as_interrupt(signum, frame) -> None:
    # Unwind like Ctrl-C: every ``with LlamaServer`` stops its server on the way out.
    raise KeyboardInterrupt(f"signal {signum}")


@atexit.register
def _stop_all() -> None:
    for srv in list(_LIVE):
        srv.stop()


def live_pids() -> list[int]:
    """Pids of the servers this process has running (for tests and diagnostics)."""
    return [s.pid for s in _LIVE if s.pid is not None]

