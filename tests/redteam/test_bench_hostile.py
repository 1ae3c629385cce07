"""`bench` against a server, flags, a log and suite files that cannot be trusted.

A small hostile HTTP server runs in a thread of this process on 127.0.0.1 and answers each
engine's endpoints (llama-server, vLLM, SGLang) well, except the one a test makes bad: invalid
UTF-8, a 5,000-digit integer, deep nesting, a list where an object belongs, wrong types,
negative or inconsistent counters, a body dribbled one byte at a time, a body of 200 MB. Every
case runs the CLI as a whole process (tests/redteam/harness.py) and asserts the documented exit
code, one ``error:`` line and no traceback, bounded memory and wall time.
"""
from __future__ import annotations

import json
import os
import socket
import socketserver
import stat
import sys
import threading
from pathlib import Path

import pytest

from tests.redteam.harness import assert_bounded, assert_one_line_error, run_cli

TARGET = Path(__file__).resolve().parents[2] / "fixtures" / "guards" / "qwen3-8b.gguf"
RSS_MIB = 200          # the CLI alone is ~50 MiB; a 200 MB body must not come near this
AS_MIB = 2048          # address space of a bench process here (no numba or torch in it)
SERVER_ERROR, USAGE = 40, 2
LOOP_LIMIT = 400       # every loop of the hostile server ends (bytes dribbled, chunks sent)


def http(body: bytes, status: int = 200, ctype: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def js(obj) -> bytes:
    return json.dumps(obj).encode()


METRICS = "\n".join([
    'vllm:spec_decode_num_drafts_total{engine="0"} 2.0',
    'vllm:spec_decode_num_draft_tokens_total{engine="0"} 6.0',
    'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 3.0',
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 2.0']) + "\n"

GOOD = {
    "llama.cpp": {
        "/props": js({"chat_template": "", "build_info": "hostile-0"}),
        "/completion": js({"content": "hi", "timings": {"prompt_n": 3, "predicted_n": 4, "predicted_ms": 10.0,
                                                        "draft_n": 6, "draft_n_accepted": 3}}),
    },
    "vllm": {
        "/v1/models": js({"data": [{"id": "m"}]}),
        "/metrics": METRICS.encode(),
        "/v1/completions": js({"choices": [{"text": "hi"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
    },
    "sglang": {
        "/generate": js({"text": "hi", "meta_info": {
            "prompt_tokens": 3, "completion_tokens": 4, "e2e_latency": 0.01, "spec_verify_ct": 2,
            "spec_accept_token_num": 3, "spec_draft_token_num": 6, "spec_accept_histogram": [0, 1, 1]}}),
    },
}
MAIN = {"llama.cpp": "/completion", "vllm": "/v1/completions", "sglang": "/generate"}


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        try:
            _method, path, _ = self.rfile.readline(8192).decode("latin-1").split(" ", 2)
            length = 0
            for _ in range(100):
                line = self.rfile.readline(8192)
                if line in (b"\r\n", b"\n", b""):
                    break
                key, _, value = line.decode("latin-1").partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value)
            self.rfile.read(length)
            answer = self.server.routes.get(path, http(js({"status": "ok"})))
            if callable(answer):
                answer(self.wfile, self.server.stop)
            else:
                self.wfile.write(answer)
        except (OSError, ValueError):
            pass


class Hostile(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, routes: dict) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes, self.stop = routes, threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def serve():
    """``serve(engine, {path: raw answer | callable(wfile, stop)})`` -> URL of a hostile server."""
    servers = []

    def start(engine: str, bad: dict | None = None) -> str:
        routes = {p: http(b, ctype="text/plain" if p == "/metrics" else "application/json")
                  for p, b in GOOD[engine].items()}
        routes.update(bad or {})
        s = Hostile(routes)
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(s)
        return s.url

    yield start
    for s in servers:
        s.stop.set()
        s.shutdown()
        s.server_close()


def slow_loris(wfile, stop) -> None:
    """Headers promising a megabyte, then one byte every 0.2 s (each read is quick; the whole never ends)."""
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
    for _ in range(LOOP_LIMIT):
        if stop.wait(0.2):
            return
        wfile.write(b" ")
        wfile.flush()


def endless(wfile, stop, total: int = 200 << 20) -> None:
    """A 200 MB body with no Content-Length (ends when the connection closes), from a generator."""
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[")
    chunk = b"1," * (1 << 19)
    for _ in range(min(total // len(chunk), LOOP_LIMIT)):
        if stop.is_set():
            return
        wfile.write(chunk)


def bench(url: str, engine: str, suite: Path, *extra, timeout: float = 30):
    # RLIMIT_AS: a regression fails as a MemoryError, it does not take the machine's memory with it
    return run_cli(["bench", "--server", url, "--engine", engine, "--raw", "--suite", suite, "--limit", 1,
                    "--n-predict", 4, "--warmup", 0, *extra], timeout=timeout, address_space_mib=AS_MIB)


@pytest.fixture
def suite(tmp_path) -> Path:
    f = tmp_path / "s.jsonl"
    f.write_text('{"prompt": "hello"}\n')
    return f


def _measurable(rss_mib: float) -> float:
    """The child's ru_maxrss also holds what it had between fork and exec (Linux keeps the old
    memory's high-water mark across exec): this test process's resident size. A bound below that
    cannot be seen; in a long pytest session this process can be larger than a bench run."""
    try:
        status = Path("/proc/self/status").read_text()
        here = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS:"))) / 1024
    except (OSError, StopIteration, ValueError):
        here = 0.0
    return max(rss_mib, here + 16)


def check(run, code: int, *, wall_s: float = 10, rss_mib: float = RSS_MIB, says: str | None = None) -> None:
    assert_one_line_error(run, code)
    assert_bounded(run, rss_mib=_measurable(rss_mib), wall_s=wall_s)
    if says is not None:
        assert says in run.stderr, str(run)


# --- the hostile server -----------------------------------------------------------------------

@pytest.mark.parametrize("engine", list(GOOD))
def test_a_good_server_passes(serve, suite, engine):
    check(bench(serve(engine), engine, suite), 0)


GENERIC = {
    "invalid-utf8": b'{"content": "\xff\xfe", "text": "\xff"}',
    "5000-digit-int": b'{"content": "x", "text": "x", "n": ' + b"7" * 5000 + b"}",
    "deep-nesting": b"[" * 100_000 + b"]" * 100_000,
    "list-not-object": b"[1, 2]",
    "string-not-object": b'"hello"',
}


@pytest.mark.parametrize("engine", list(GOOD))
@pytest.mark.parametrize("kind", list(GENERIC))
def test_unusable_answers(serve, suite, engine, kind):
    check(bench(serve(engine, {MAIN[engine]: http(GENERIC[kind])}), engine, suite), SERVER_ERROR)


def _metrics(*lines: str) -> bytes:
    return http(("\n".join(lines) + "\n").encode(), ctype="text/plain")


SPECIFIC = {
    "llama-timings-string": ("llama.cpp", {"/completion": http(js({"content": "x", "timings": "predicted_n"}))}),
    "llama-predicted-n-list": ("llama.cpp", {"/completion": http(js({"timings": {"predicted_n": [4]}}))}),
    "llama-predicted-ms-nan": ("llama.cpp", {"/completion": http(b'{"timings": {"predicted_n": 4, "predicted_ms": NaN}}')}),
    "llama-negative-draft-n": ("llama.cpp", {"/completion": http(js({"timings": {
        "predicted_n": 4, "draft_n": -3, "draft_n_accepted": 1}}))}),
    "llama-accepted-over-drafted": ("llama.cpp", {"/completion": http(js({"timings": {
        "predicted_n": 4, "draft_n": 2, "draft_n_accepted": 5}}))}),
    "llama-props-list": ("llama.cpp", {"/props": http(b"[]")}),
    "llama-props-template-number": ("llama.cpp", {"/props": http(js({"chat_template": 5}))}),
    "vllm-models-string": ("vllm", {"/v1/models": http(js({"data": "abc"}))}),
    "vllm-models-id-number": ("vllm", {"/v1/models": http(js({"data": [{"id": 5}]}))}),
    "vllm-usage-string": ("vllm", {"/v1/completions": http(js({"choices": [{"text": "x"}],
                                                               "usage": {"completion_tokens": "many"}}))}),
    "vllm-choices-object": ("vllm", {"/v1/completions": http(js({"choices": {"text": "x"}}))}),
    "vllm-metrics-negative": ("vllm", {"/metrics": _metrics("vllm:spec_decode_num_drafts_total -5")}),
    "vllm-metrics-nan": ("vllm", {"/metrics": _metrics("vllm:spec_decode_num_draft_tokens_total NaN")}),
    "vllm-metrics-position-word": ("vllm", {"/metrics": _metrics(
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="abc"} 1')}),
    "vllm-metrics-position-huge": ("vllm", {"/metrics": _metrics(
        'vllm:spec_decode_num_drafts_total 1', 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="99999999"} 1')}),
    "vllm-metrics-invalid-utf8": ("vllm", {"/metrics": http(b"vllm:spec_decode_num_drafts_total \xff1\n")}),
    "sglang-meta-list": ("sglang", {"/generate": http(js({"text": "x", "meta_info": [1]}))}),
    "sglang-verify-word": ("sglang", {"/generate": http(js({"text": "x", "meta_info": {"spec_verify_ct": "three"}}))}),
    "sglang-negative-accepted": ("sglang", {"/generate": http(js({"text": "x", "meta_info": {
        "completion_tokens": 4, "spec_verify_ct": 2, "spec_accept_token_num": -1, "spec_draft_token_num": 6}}))}),
    "sglang-histogram-huge": ("sglang", {"/generate": http(js({"text": "x", "meta_info": {
        "completion_tokens": 4, "spec_verify_ct": 2, "spec_accept_token_num": 1, "spec_draft_token_num": 6,
        "spec_accept_histogram": [10 ** 15, 1]}}))}),
    "sglang-empty-list": ("sglang", {"/generate": http(b"[]")}),
}


@pytest.mark.parametrize("case", list(SPECIFIC))
def test_wrong_types_and_counters(serve, suite, case):
    engine, bad = SPECIFIC[case]
    check(bench(serve(engine, bad), engine, suite), SERVER_ERROR)


def test_vllm_counters_that_go_down(serve, suite):
    pages = iter([10, 4, 4, 4])

    def shrinking(wfile, stop) -> None:
        wfile.write(_metrics(f"vllm:spec_decode_num_drafts_total {next(pages, 4)}"))

    check(bench(serve("vllm", {"/metrics": shrinking}), "vllm", suite), SERVER_ERROR, says="went down")


@pytest.mark.parametrize("engine,path", [("llama.cpp", "/completion"), ("vllm", "/metrics"), ("sglang", "/generate")])
def test_slow_loris_meets_the_request_deadline(serve, suite, engine, path):
    r = bench(serve(engine, {path: slow_loris}), engine, suite, "--request-timeout", 2)
    check(r, SERVER_ERROR, wall_s=2 + 4, says="within 2 s")


def test_a_200_mb_body_is_cut_at_the_cap(serve, suite):
    # ~40 MiB for the CLI + the 64 MiB cap read once; reading it all took > 400 MiB
    check(bench(serve("llama.cpp", {"/completion": endless}), "llama.cpp", suite), SERVER_ERROR, says="MiB",
          rss_mib=140)


def test_an_announced_huge_body_is_refused_unread(serve, suite):
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n{"
    check(bench(serve("sglang", {"/generate": head}), "sglang", suite), SERVER_ERROR, says="announces")


def test_health_wait_of_a_launched_server_has_a_deadline(tmp_path, suite):
    """A llama-server that dribbles its /health answer: bench gives up at --startup-timeout."""
    script = tmp_path / "loris.py"
    script.write_text(
        "import socket, sys, time\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', port)); s.listen(8)\n"
        "c, _ = s.accept(); c.recv(4096)\n"
        "c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 1000\\r\\n')\n"
        f"for _ in range({LOOP_LIMIT}):\n"
        "    time.sleep(0.2); c.sendall(b'X')\n")
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    r = run_cli(["bench", "--server-bin", binary, "--target", TARGET, "--suite", suite, "--startup-timeout", 2,
                 "--max-memory", "inf"], timeout=30, address_space_mib=AS_MIB)
    check(r, SERVER_ERROR, wall_s=2 + 12, says="not healthy after 2 s")


# --- flags ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,says", [
    (["--target", TARGET, "--server-args", '-ngl "99'], "--server-args"),
    (["--target", TARGET, "--port", "70000"], "--port 70000"),
    (["--target", TARGET, "--port", "0"], "--port 0"),
    (["--target", TARGET, "--max-memory", "nan"], "--max-memory nan"),
    (["--target", TARGET, "--max-memory", "-1"], "--max-memory -1"),
    (["--target", TARGET, "--request-timeout", "nan"], "--request-timeout"),
    (["--target", TARGET, "--startup-timeout", "0"], "--startup-timeout"),
    (["--target", TARGET, "--temperature", "inf"], "--temperature"),
    (["--server", "http://[::1"], "--server"),
    (["--server", "http://127.0.0.1:99999"], "--server"),
    (["--server", "http://127.0.0.1:8080", "--baseline-server", "ftp://x"], "--baseline-server"),
])
def test_bad_flag_values_are_usage_errors_before_anything_starts(tmp_path, args, says):
    pidfile = tmp_path / "started"
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\ntouch {pidfile}\nexit 1\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    r = run_cli(["bench", *(["--server-bin", binary] if "--target" in args else []), *args], timeout=30,
                address_space_mib=AS_MIB)
    check(r, USAGE, says=says)
    assert not pidfile.exists()


# --- the server log ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "missing"])
def test_server_log_must_be_a_regular_file(serve, suite, tmp_path, kind):
    log = {"fifo": tmp_path / "fifo", "dev-zero": Path("/dev/zero"), "directory": tmp_path,
           "missing": tmp_path / "nope.log"}[kind]
    if kind == "fifo":
        os.mkfifo(log)
    r = bench(serve("llama.cpp"), "llama.cpp", suite, "--server-log", log, timeout=15)
    check(r, USAGE, says="--server-log")


# --- suite files ------------------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    '{"prompt_ids": [' + "7" * 5000 + "]}",
    '{"prompt": "x", "n": ' + "7" * 5000 + "}",
    '{"prompt": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"prompt": "x", "deep": ' + "[" * 200 + "]" * 200 + "}",
], ids=["5000-digit-token-id", "5000-digit-field", "nested-100000", "nested-200"])
def test_hostile_suite_lines_name_file_and_line(tmp_path, line):
    f = tmp_path / "h.jsonl"
    f.write_text('{"prompt": "fine"}\n' + line + "\n")
    r = run_cli(["bench", "--server", f"http://127.0.0.1:{_closed_port()}", "--suite", f], timeout=30,
                address_space_mib=AS_MIB)
    check(r, USAGE, says=f"{f}:2:")


def test_a_raw_line_separator_inside_a_prompt_is_text(serve, tmp_path):
    f = tmp_path / "u2028.jsonl"
    f.write_text('{"prompt": "one\u2028two"}\n', encoding="utf-8")  # U+2028 unescaped, as JSON allows
    check(bench(serve("llama.cpp"), "llama.cpp", f), 0)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

