"""Malformed HTTP against a real uvicorn + httptools server (issue 11 items 5 and 6), with raw sockets.

Where an answer is still possible it is the service's JSON 400 and the connection closes; once a streamed
response has started, a framing error in the upload aborts the connection instead of writing a second
response into the first one's body.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from bench.service_process import Server

pytestmark = pytest.mark.e2e
MIB = 1 << 20


def _exchange(server: Server, first: bytes, later: bytes = b"", timeout: float = 5.0) -> bytes:
    """Send ``first`` (then ``later`` after a pause) and read until the server closes."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        sock.sendall(first)
        if later:
            time.sleep(0.3)
            sock.sendall(later)
        received = b""
        try:
            while data := sock.recv(1 << 20):
                received += data
        except ConnectionResetError:
            pass
        return received


def _encrypt_head(server: Server, framing: str, path: str = "/v1/keys/stream/encrypt?format=raw") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: keystream.test\r\nAuthorization: {server.auth['Authorization']}\r\n"
        f"Content-Type: application/octet-stream\r\n{framing}\r\n"
    ).encode()


@pytest.mark.parametrize(
    "case",
    ["bad chunk size", "CL+TE", "negative CL", "duplicate CL", "NUL in header", "8-bit path"],
)
def test_malformed_http_gets_the_json_error_shape(server: Server, case: str) -> None:
    requests = {
        "bad chunk size": _encrypt_head(server, "Transfer-Encoding: chunked\r\n") + b"zz\r\nabc\r\n",
        "CL+TE": _encrypt_head(server, "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n",
        "negative CL": _encrypt_head(server, "Content-Length: -5\r\n"),
        "duplicate CL": _encrypt_head(server, "Content-Length: 5\r\nContent-Length: 6\r\n") + b"hello!",
        "NUL in header": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Note: a\x00b\r\n\r\n",
        "8-bit path": b"GET /healthz\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
    }
    answer = _exchange(server, requests[case])
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert b"content-type: application/json" in head.lower()
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "bad_request"
    assert error["message"].startswith("malformed HTTP request")


def test_framing_error_after_the_response_started_aborts_without_a_second_response(server: Server) -> None:
    head = _encrypt_head(server, "Transfer-Encoding: chunked\r\n")
    first_chunk = b"%x\r\n" % MIB + os.urandom(MIB) + b"\r\n"
    answer = _exchange(server, head + first_chunk, later=b"zz\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1, answer[-300:]  # before: "HTTP/1.1 400 ..." inside the body
    assert not answer.endswith(b"0\r\n\r\n")  # no clean end: the client sees a truncated body
    assert len(answer) > MIB  # the first chunk's output was sent


def test_server_still_serves_after_malformed_requests(server: Server) -> None:
    answer = _exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ")
