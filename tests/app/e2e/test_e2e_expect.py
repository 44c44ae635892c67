"""``Expect: 100-continue`` on the streaming routes (issue 14 item 1), against a real server.

The server writes ``100 Continue`` only when the app first asks for the body and never once a response has
started: a route that started its response before reading made curl wait its 1 s Expect timeout on every
upload over 1 MiB.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bench.service_process import ROOT_TOKEN, Server

pytestmark = pytest.mark.e2e
MIB = 1 << 20
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _head(path: str, length: int, authorization: str | None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: keystream.test", "Content-Type: application/octet-stream"]
    if authorization is not None:
        lines.append(f"Authorization: {authorization}")
    lines += [f"Content-Length: {length}", "Expect: 100-continue", "", ""]
    return "\r\n".join(lines).encode()


def _first_answer(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends (up to the end of a head) before we send any body byte."""
    sock.settimeout(timeout)
    received = b""
    while b"\r\n\r\n" not in received:
        data = sock.recv(65536)
        if not data:
            break
        received += data
    return received


@pytest.mark.parametrize(
    "path",
    [
        "/v1/keys/stream/encrypt",
        "/v1/keys/stream/encrypt?format=raw",
        "/v1/keys/small/decrypt?format=raw&key_version=1&iv=000102030405060708090a0b0c0d0e0f",
    ],
)
def test_streaming_routes_answer_100_continue_before_the_body(server: Server, path: str) -> None:
    size = 4 * MIB
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(_head(path, size, server.auth["Authorization"]))
        assert _first_answer(sock, 2.0) == CONTINUE  # before the fix: the 200 head, no 100
        sock.sendall(os.urandom(size))
        sock.settimeout(10)
        response = _whole_response(sock)
        assert response.startswith(b"HTTP/1.1 200 ")


def _whole_response(sock: socket.socket) -> bytes:
    """A response read to its end: Content-Length bytes after the head (a sealed encrypt declares its
    length when the request did), else up to the chunked terminator."""
    response = b""
    while True:
        data = sock.recv(1 << 20)
        assert data, response[:200]
        response += data
        head, separator, body = response.partition(b"\r\n\r\n")
        if not separator:
            continue
        declared = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
        if declared and len(body) >= int(declared[0].split(b":")[1]):
            return response
        if not declared and response.endswith(b"0\r\n\r\n"):
            return response


def test_rewrap_answers_100_continue_before_the_body(server: Server) -> None:
    with server.client() as client:
        sealed = client.post(
            "/v1/keys/stream/encrypt",
            content=os.urandom(3 * MIB),
            headers={"Content-Type": "application/octet-stream"},
        ).content
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(_head("/v1/keys/stream/rewrap", len(sealed), server.auth["Authorization"]))
        assert _first_answer(sock, 2.0) == CONTINUE
        sock.sendall(sealed)
        sock.settimeout(10)
        response = b""
        while not response.endswith(b"0\r\n\r\n"):
            data = sock.recv(1 << 20)
            assert data, response[:200]
            response += data
        assert response.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize(
    ("path", "authorization", "status"),
    [
        ("/v1/keys/stream/encrypt", None, b"401"),
        ("/v1/keys/stream/encrypt", f"Bearer {ROOT_TOKEN[:-1]}x", b"401"),
        ("/v1/keys/stream/encrypt?format=bogus", f"Bearer {ROOT_TOKEN}", b"422"),
        ("/v1/keys/stream/encrypt?format=raw&iv=zz", f"Bearer {ROOT_TOKEN}", b"400"),
        ("/v1/keys/missing/encrypt", f"Bearer {ROOT_TOKEN}", b"404"),
        ("/v1/keys/stream/rewrap", None, b"401"),
        ("/v1/keys/missing/rewrap", f"Bearer {ROOT_TOKEN}", b"404"),
        ("/v1/keys/stream/rewrap?format=raw", f"Bearer {ROOT_TOKEN}", b"400"),
        ("/v1/keys/stream/rewrap?key_version=99", f"Bearer {ROOT_TOKEN}", b"404"),
    ],
)
@pytest.mark.serial  # a 1 s limit: alone
def test_refused_expect_request_gets_its_error_without_sending_the_body(
    server: Server, path: str, authorization: str | None, status: bytes
) -> None:
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        start = time.perf_counter()
        sock.sendall(_head(path, 64 * MIB, authorization))
        answer = _first_answer(sock, 2.0)
        elapsed = time.perf_counter() - start
    assert answer.startswith(b"HTTP/1.1 " + status + b" "), answer[:200]
    assert elapsed < 1.0


def test_curl_defaults_16mib_upload_does_not_wait_for_the_expect_timeout(
    server: Server, tmp_path: Path
) -> None:
    """curl sends ``Expect: 100-continue`` for bodies over 1 MiB and waits 1 s for the answer."""
    assert shutil.which("curl"), "curl is missing: make tools (scripts/install-tools.sh) installs it"
    upload = tmp_path / "16mib"
    upload.write_bytes(os.urandom(16 * MIB))
    timings: list[float] = []
    for path in ("encrypt", "encrypt?format=raw") * 2:
        result = subprocess.run(
            [
                "curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{time_total}",
                "-H", f"Authorization: Bearer {ROOT_TOKEN}", "-H", "Content-Type: application/octet-stream",
                "--data-binary", f"@{upload}", f"{server.url}/v1/keys/stream/{path}",
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        timings.append(float(result.stdout))
    assert min(timings) < 0.5 and sorted(timings)[2] < 0.9, timings  # before the fix: all over 1 s
