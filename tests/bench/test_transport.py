"""bench/transport.py: HTTP with a wall-clock deadline, a body cap, one exception for every
failure, and server URLs parsed once. Real sockets: a one-connection server per test."""
import pytest

from dflash_gguf.bench.client import call
from dflash_gguf.bench.transport import Endpoint, RequestFailed, error_message, fetch, parse_url


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


def _read_request(conn) -> bytes:
    """One whole HTTP request: the head, then Content-Length bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def test_fetch_gets_and_posts_under_the_url_prefix():
    import socket
    import threading

    seen = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(2)
    srv.settimeout(10)

    def run():
        with srv:
            for _ in range(2):
                conn, _ = srv.accept()
                with conn:
                    seen.append(_read_request(conn))
                    body = b'{"ok": true}'
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    threading.Thread(target=run, daemon=True).start()
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/v1/"
    assert fetch(url, "/health", timeout=5) == bytearray(b'{"ok": true}')
    assert fetch(url, "/completion", {"prompt": "hi"}, timeout=5) == bytearray(b'{"ok": true}')
    assert seen[0].startswith(b"GET /v1/health HTTP/1.1\r\n")
    head, _, body = seen[1].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completion HTTP/1.1\r\n") and b"Content-Type: application/json" in head
    assert body == b'{"prompt": "hi"}'


def test_a_malformed_answer_is_a_lost_request():
    with pytest.raises(RequestFailed) as e:
        fetch(_one_shot(lambda c: c.sendall(b"HELLO\r\n\r\n")), "/x", timeout=5)
    assert e.value.lost and e.value.status is None and e.value.args[0].startswith("GET /x: ")


def test_a_bad_url_fails_before_connecting():
    with pytest.raises(RequestFailed, match=r"POST /x: ftp://h: expected http://HOST:PORT") as e:
        fetch("ftp://h", "/x", {"a": 1})
    assert not e.value.lost


def test_parse_url_parts():
    assert parse_url("http://h") == Endpoint("http", "h", 80, "")
    assert parse_url("https://h/") == Endpoint("https", "h", 443, "")
    assert parse_url("http://[::1]:8080/a/b/") == Endpoint("http", "::1", 8080, "/a/b")


@pytest.mark.parametrize("body,want", [
    (b'{"error": {"code": 500, "message": "out of\\nmemory"}}', "out of memory"),
    (b'{"error": "bad request"}', "bad request"),
    (b'{"detail": "x"}', '{"detail": "x"}'),
    (b"<html>\n<body>502 Bad Gateway</body>\n</html>", "<html> <body>502 Bad Gateway</body> </html>"),
    (b"", "(empty body)"),
    (b"\xff\xfe oops", "\ufffd\ufffd oops"),
])
def test_error_message_takes_the_servers_words(body, want):
    assert error_message(body) == want


def test_error_message_is_one_bounded_line():
    msg = error_message(b"word " * 10_000)
    assert len(msg) == 300 and "\n" not in msg
