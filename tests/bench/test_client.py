"""HTTP helpers and the engines' counters: Prometheus text, vLLM deltas, error messages."""
import pytest

from dflash_gguf.bench.client import RequestFailed, call, parse_prometheus, vllm_counters
from dflash_gguf.bench.server import free_port

METRICS = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 70.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 31.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.7e9
vllm:num_requests_running{engine="0",model_name="a,b"} 0.0
"""


def test_prometheus_samples_with_labels():
    s = parse_prometheus(METRICS)
    assert ("vllm:spec_decode_num_drafts_total", {"engine": "1", "model_name": "m"}, 2.0) in s
    assert ("vllm:num_requests_running", {"engine": "0", "model_name": "a,b"}, 0.0) in s  # comma inside quotes


def test_vllm_counters_sum_engines_and_positions():
    c = vllm_counters(METRICS)
    assert c["seen"] and c["drafts"] == 12 and c["draft_tokens"] == 70 and c["accepted"] == 31
    assert c["per_pos"] == {0: 9.0, 1: 8.0}


def test_vllm_counters_without_total_suffix_and_absent():
    assert vllm_counters("vllm:spec_decode_num_drafts 3\n")["drafts"] == 3
    assert not vllm_counters("vllm:num_requests_running 0\n")["seen"]


def test_connection_refused_is_a_lost_request():
    with pytest.raises(RequestFailed) as e:
        call(f"http://127.0.0.1:{free_port()}", "/health", timeout=2)
    assert e.value.lost


# --- transport: deadline, body cap, URLs ------------------------------------------------------

def _one_shot(answer) -> str:
    """A server for one connection: reads the request, then ``answer(conn)``; its URL."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(10)

    def run():
        try:
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                answer(conn)
        except OSError:
            pass
        finally:
            srv.close()

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}"


def test_a_dribbling_answer_meets_the_deadline():
    import time

    def dribble(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(100):  # header bytes, one every 0.1 s: no single read ever times out
            time.sleep(0.1)
            conn.sendall(b"X")

    t0 = time.monotonic()
    with pytest.raises(RequestFailed, match="within 1 s") as e:
        call(_one_shot(dribble), "/x", timeout=1)
    assert e.value.lost and time.monotonic() - t0 < 2


def test_the_body_cap(monkeypatch):
    from dflash_gguf.bench import transport

    monkeypatch.setattr(transport, "MAX_BODY_BYTES", 1000)
    with pytest.raises(RequestFailed, match="announces 5000 bytes"):
        call(_one_shot(lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")), "/x", timeout=5)
    body = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b" " * 5000
    with pytest.raises(RequestFailed, match="longer than"):
        call(_one_shot(lambda c: c.sendall(body)), "/x", timeout=5)
    ok = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"[" + b"1," * 400 + b"1]"
    assert len(call(_one_shot(lambda c: c.sendall(ok)), "/x", timeout=5)) == 401


def test_http_error_status_carries_the_servers_words():
    body = b'{"error": {"code": 503, "message": "Loading\\nmodel"}}'
    head = f"HTTP/1.1 503 X\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with pytest.raises(RequestFailed, match="HTTP 503: Loading model") as e:
        call(_one_shot(lambda c: c.sendall(head + body)), "/health", timeout=5)
    assert e.value.status == 503 and not e.value.lost


@pytest.mark.parametrize("url,ok", [
    ("http://127.0.0.1:8080", True), ("https://h/v1/", True), ("http://[::1]:80", True),
    ("http://[::1", False), ("http://h:70000", False), ("http://h:0", False), ("ftp://h", False),
    ("http://:80", False), ("http://h:80?x=1", False), ("http://h:port", False),
])
def test_parse_url(url, ok):
    from dflash_gguf.bench.transport import parse_url

    if ok:
        assert parse_url(url).port in (80, 443, 8080)
    else:
        with pytest.raises(ValueError):
            parse_url(url)
