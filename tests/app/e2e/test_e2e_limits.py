"""Security review H3 and L4 against a real uvicorn + httptools process (the session ``server``)."""

from __future__ import annotations

import os
import socket
import threading
import time

import httpx
import pytest

from bench.duplex_client import IncompleteResponseError, duplex_request
from bench.service_process import Server

MIB = 1 << 20
HEADER_LIMIT = 64 * 1024  # the default max_header_bytes


def _send_head(server: Server, pad: int, chunk: int = 64 * 1024) -> tuple[bytes, float]:
    """Send ``GET /healthz`` with an ``X-Pad`` header of ``pad`` bytes; return what came back and the time.

    The server may close (even reset) the connection while the head is still being sent: both end the send.
    """
    start = time.perf_counter()
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        head = b"GET /healthz HTTP/1.1\r\nHost: keystream.test\r\nX-Pad: " + b"a" * pad + b"\r\n\r\n"
        try:
            for offset in range(0, len(head), chunk):
                sock.sendall(head[offset : offset + chunk])
        except OSError:
            pass  # closed by the server mid-send
        received = b""
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                received += data
        except OSError:
            pass  # reset: the server closed with our unread bytes in its buffer
    return received, time.perf_counter() - start


@pytest.mark.serial  # a 2 s limit: alone
def test_huge_header_is_refused_quickly_and_healthz_stays_fast(server: Server) -> None:
    """H3: a 1 MiB header is cut off at the limit (431, connection closed) instead of stalling the loop."""
    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            while not stop.is_set():
                start = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - start)
                time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        for _ in range(3):
            received, elapsed = _send_head(server, MIB)
            assert elapsed < 2.0, f"1 MiB header took {elapsed:.2f} s"
            assert received == b"" or received.startswith(b"HTTP/1.1 431 "), received[:200]
            assert b"HTTP/1.1 200" not in received
        deadline = time.monotonic() + 5
        while len(latencies) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        prober.join(timeout=15)
    assert latencies and max(latencies) < 0.5, f"/healthz max {max(latencies or [0]):.3f} s"


def test_head_just_over_the_limit_gets_a_json_431(server: Server) -> None:
    received, _ = _send_head(server, HEADER_LIMIT + 1024, chunk=HEADER_LIMIT * 2)
    assert received.startswith(b"HTTP/1.1 431 "), received[:200]
    assert b"connection: close" in received.lower()
    assert b'"request_header_fields_too_large"' in received


def test_head_under_the_limit_is_served(server: Server) -> None:
    response = httpx.get(f"{server.url}/healthz", headers={"X-Pad": "a" * (HEADER_LIMIT // 2)}, timeout=10)
    assert response.status_code == 200


async def test_tampered_stream_logs_one_warning_without_traceback(server: Server) -> None:
    """L4: a decrypt that fails after the response started logs one WARNING line, not an ERROR traceback."""
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    data = os.urandom(MIB)
    encrypted = await duplex_request(
        server.host, server.port, "POST", "/v1/keys/small/encrypt", headers, data, keep_body=True
    )
    tampered = bytearray(encrypted.body)
    tampered[-50_000] ^= 1
    before = server.log.read_text(errors="replace")
    with pytest.raises(IncompleteResponseError):
        await duplex_request(
            server.host, server.port, "POST", "/v1/keys/small/decrypt", headers, bytes(tampered)
        )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        new = server.log.read_text(errors="replace")[len(before) :]
        if "aborted a response stream" in new:
            break
        time.sleep(0.05)
    lines = [line for line in new.splitlines() if line.strip()]
    aborted = [line for line in lines if "aborted a response stream" in line]
    assert len(aborted) == 1, new
    assert "WARNING" in aborted[0] and "segment" in aborted[0]
    assert "Traceback" not in new and "Exception in ASGI application" not in new
