"""HTTP for ``bench`` with bounds that a slow, broken or hostile server cannot stretch (stdlib only).

* **A wall-clock deadline per request.** A socket timeout alone bounds each read, so a server
  that sends one byte a second never times out. Every read here, status line and headers
  included, first sets the socket's timeout to what is left of the request's deadline and fails
  once nothing is left.
* **A cap on the body**, ``MAX_BODY_BYTES``, read incrementally (a Content-Length above it is
  refused before reading). Real answers (a completion with its timings, a ``/metrics`` page)
  are kilobytes to a few megabytes.
* **One exception**, ``RequestFailed``, for everything that can go wrong on the wire: ``lost``
  when no usable HTTP exchange happened (refused, reset, timed out, malformed HTTP), ``status``
  when the server answered with an HTTP error.

Server URLs are parsed once by ``parse_url`` (bench checks every ``--server`` up front with it).
"""
from __future__ import annotations

import http.client
import io
import json
import socket
import time
import urllib.parse
from dataclasses import dataclass
from functools import partial

MAX_BODY_BYTES = 64 << 20
_CHUNK = 1 << 16


class RequestFailed(Exception):
    """An HTTP exchange failed; ``lost`` when the connection broke or timed out (the server may
    have died), ``status`` when it answered with an HTTP error."""

    def __init__(self, message: str, lost: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.lost, self.status = lost, status


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    prefix: str  # a path the server is mounted under ("" for the root)


def parse_url(text: str) -> Endpoint:
    """``http[s]://HOST[:PORT][/PREFIX]``.

    Raises:
        ValueError: anything else (a one-line reason).
    """
    try:
        u = urllib.parse.urlsplit(text)
        port = u.port  # raises for a port out of 0..65535 or not a number
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError("expected http://HOST:PORT or https://HOST:PORT")
    if port == 0:
        raise ValueError("port 0: give the port the server listens on (1-65535)")
    if u.query or u.fragment or u.username is not None:
        raise ValueError("no query, fragment or user name: the server's base URL only")
    return Endpoint(u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80), u.path.rstrip("/"))


def fetch(url: str, path: str, body: dict | None = None, timeout: float = 600.0) -> bytearray:
    """GET (no body) or POST JSON; the answer's body, at most ``MAX_BODY_BYTES``, within ``timeout``
    seconds of wall-clock time all told.

    Raises:
        RequestFailed: an HTTP error status (with the server's message), a broken or malformed
            exchange, the deadline, or a body over the cap.
    """
    method = "GET" if body is None else "POST"
    what = f"{method} {path}"
    try:
        ep = parse_url(url)
    except ValueError as exc:
        raise RequestFailed(f"{what}: {url}: {exc}") from None
    deadline = time.monotonic() + timeout
    cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
    conn = cls(ep.host, ep.port, timeout=timeout)
    conn.response_class = partial(_DeadlineResponse, deadline=deadline)
    data = None if body is None else json.dumps(body).encode()
    try:
        conn.request(method, ep.prefix + path, body=data, headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        payload = _read_body(resp, what)
    except TimeoutError:
        raise RequestFailed(f"{what}: no complete answer within {timeout:g} s", lost=True) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise RequestFailed(f"{what}: {_one_line(str(exc)) or type(exc).__name__}", lost=True) from None
    finally:
        conn.close()
    if not 200 <= resp.status < 300:
        raise RequestFailed(f"{what}: HTTP {resp.status}: {error_message(payload)}", status=resp.status)
    return payload


def _read_body(resp: http.client.HTTPResponse, what: str) -> bytearray:
    if resp.length is not None and resp.length > MAX_BODY_BYTES:
        raise RequestFailed(f"{what}: the answer announces {resp.length} bytes, more than the "
                            f"{MAX_BODY_BYTES >> 20} MiB bench accepts")
    buf = bytearray()
    while chunk := resp.read(_CHUNK):
        buf += chunk
        if len(buf) > MAX_BODY_BYTES:
            raise RequestFailed(f"{what}: the answer is longer than the {MAX_BODY_BYTES >> 20} MiB bench accepts")
    return buf  # not copied into bytes: a large answer is held once


class _DeadlineIO(io.RawIOBase):
    """The socket's reads, each given only what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._raw, self._deadline = sock, sock.makefile("rb", buffering=0), deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)
        return self._raw.readinto(b)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args, deadline: float, **kwargs) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()
        self.fp = io.BufferedReader(_DeadlineIO(sock, deadline))


def error_message(payload: bytes | bytearray) -> str:
    """The server's own words from an error body (llama-server / OpenAI style ``{"error": ...}``)."""
    from ..fileio.prompts_jsonl import loads_bounded

    text = payload[:4096].decode("utf-8", errors="replace")
    try:
        err = loads_bounded(text)
        err = err.get("error", err) if isinstance(err, dict) else err
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            err = err["message"]
        if isinstance(err, str):
            text = err
    except ValueError:
        pass
    return _one_line(text)[:300] or "(empty body)"


def _one_line(text: str) -> str:
    return " ".join(text.split())
