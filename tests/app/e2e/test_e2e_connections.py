"""Unauthenticated connection exhaustion (issue 11 item 1) against a real server with a 256-fd limit.

Before the limits, 1,100 idle connections under a 1024-fd limit took the service down until they closed:
``accept`` failed for want of a descriptor and ``/healthz`` went unanswered, and nothing was logged.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from bench.service_process import Server, start_server, stop_server

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # 1 s timeouts measured to the half second: alone
OPEN_FILES = 256  # the server's fd limit: max_connections defaults to 256 - 64
TIMEOUT = 1.0  # idle, header and body timeouts of the test server (max_connections: the default)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("limits")
    server = start_server(
        base / "data",
        base / "server.log",
        open_files=OPEN_FILES,
        KEYSTREAM_IDLE_TIMEOUT=str(TIMEOUT),
        KEYSTREAM_HEADER_TIMEOUT=str(TIMEOUT),
        KEYSTREAM_BODY_TIMEOUT=str(TIMEOUT),
    )
    try:
        with server.client() as client:
            assert client.post("/v1/keys", json={"name": "k"}).status_code == 201
        yield server
    finally:
        stop_server(server)


def _healthz_seconds(server: Server) -> float:
    start = time.perf_counter()
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
    return time.perf_counter() - start


def _closed_after(sock: socket.socket, limit: float) -> tuple[bytes, float]:
    """Read until the server closes (or ``limit`` seconds pass: socket.timeout); return data and time."""
    start = time.perf_counter()
    sock.settimeout(limit)
    received = b""
    try:
        while data := sock.recv(65536):
            received += data
    except ConnectionResetError:
        pass
    return received, time.perf_counter() - start


def test_more_idle_connections_than_fds_leave_healthz_answering(limited: Server) -> None:
    idle = [socket.create_connection((limited.host, limited.port)) for _ in range(2 * OPEN_FILES)]
    try:
        time.sleep(0.3)  # the server accepts (and evicts) the flood
        latencies = [_healthz_seconds(limited) for _ in range(20)]
        assert max(latencies) < 0.5, latencies  # before: connect succeeded, no answer (EMFILE on accept)
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.2)
    assert "connection limits: " in limited.log.read_text()  # the rate-limited warning
    assert "idle evicted at max_connections" in limited.log.read_text()


def test_idle_connection_is_closed_before_and_between_requests(limited: Server) -> None:
    with socket.create_connection((limited.host, limited.port)) as sock:
        received, seconds = _closed_after(sock, TIMEOUT + 3)
        assert received == b"" and seconds < TIMEOUT + 1.5
    with socket.create_connection((limited.host, limited.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        received, seconds = _closed_after(sock, TIMEOUT + 3)
        assert received.startswith(b"HTTP/1.1 200 ") and seconds < TIMEOUT + 1.5


def test_slow_request_head_gets_408_in_time(limited: Server) -> None:
    with socket.create_connection((limited.host, limited.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + TIMEOUT + 3
        try:
            while time.monotonic() < deadline:  # one header byte every 0.2 s, never finishing
                sock.sendall(b"X")
                time.sleep(0.2)
        except OSError:
            pass
        received, _ = _closed_after(sock, 3)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received[:200]
    assert json.loads(body)["error"]["code"] == "request_timeout"


@pytest.mark.parametrize("route", ["decrypt", "encrypt?format=raw"])
def test_stalled_upload_is_dropped_in_time(limited: Server, route: str) -> None:
    """Sealed decrypt: no output before a verified segment, so a 408. Raw encrypt: output started, so an
    abort (a truncated chunked body)."""
    with socket.create_connection((limited.host, limited.port)) as sock:
        sock.sendall(
            f"POST /v1/keys/k/{route} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: {limited.auth['Authorization']}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {1 << 20}\r\n\r\n".encode()
            + b"\x28"  # a sealed header's length byte for an aes256 key: the first segment is then awaited
            + bytes(999)
        )
        received, seconds = _closed_after(sock, TIMEOUT + 4)  # before: socket.timeout (never dropped)
    assert seconds < TIMEOUT + 2
    if route == "decrypt":
        assert received.startswith(b"HTTP/1.1 408 "), received[:200]
    else:
        assert received.startswith(b"HTTP/1.1 200 ") and not received.endswith(b"0\r\n\r\n")


def test_slow_but_steady_upload_is_not_dropped(limited: Server) -> None:
    """A body that keeps coming (a piece every half timeout) is served, however long it takes."""
    size = 5 * 4096
    with socket.create_connection((limited.host, limited.port)) as sock:
        sock.sendall(
            f"POST /v1/keys/k/encrypt?format=raw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            f"Authorization: {limited.auth['Authorization']}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {size}\r\n\r\n".encode()
        )
        for _ in range(5):
            sock.sendall(bytes(4096))
            time.sleep(TIMEOUT / 2)
        received, _ = _closed_after(sock, 10)
    assert received.startswith(b"HTTP/1.1 200 "), received[:200]


def test_answered_before_its_body_a_trickling_connection_is_closed(limited: Server) -> None:
    """An unauthenticated upload gets its 401 at once; its body then trickled on, each byte restarting the
    idle clock, so the connection stayed open as long as the client liked (1,919 held for 50 s+)."""
    with socket.create_connection((limited.host, limited.port)) as sock:
        sock.sendall(
            b"POST /v1/keys/k/encrypt HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: 1000000\r\n\r\n" + bytes(100)
        )
        sock.settimeout(5)
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
        answered = time.perf_counter()
        sock.settimeout(0.2)
        closed_after = None
        while time.perf_counter() - answered < TIMEOUT + 4:
            try:
                sock.sendall(b"x")  # one body byte every 0.2 s, well inside the idle timeout
                if sock.recv(65536) == b"":
                    closed_after = time.perf_counter() - answered
                    break
            except TimeoutError:
                continue
            except OSError:  # reset: closed too
                closed_after = time.perf_counter() - answered
                break
    assert closed_after is not None, "still open while the body trickles"  # before: open until the end
    assert closed_after < TIMEOUT + 1.5, closed_after


def test_answered_before_its_body_the_connection_still_serves_once_the_body_ends(limited: Server) -> None:
    """Closing only the trickling ones: a client that finishes its body keeps its keep-alive connection."""
    with socket.create_connection((limited.host, limited.port)) as sock:
        sock.sendall(
            b"POST /v1/keys/k/encrypt HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: 1000\r\n\r\n" + bytes(100)
        )
        sock.settimeout(5)
        assert _response(sock).startswith(b"HTTP/1.1 401 ")
        sock.sendall(bytes(900) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(sock).startswith(b"HTTP/1.1 200 ")


def _response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length body (head and body may arrive in separate reads)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = int(next(line for line in lines if line.lower().startswith(b"content-length:"))[15:])
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body
