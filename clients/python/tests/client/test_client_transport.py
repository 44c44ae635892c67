"""Wire-level failures the real server produces only on tampering: a response that stops without its chunked
terminator, a short Content-Length body, a reset. A scripted socket server sends exactly those bytes (the
real-server tests cover the tampering path end to end)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from keystream_client import (
    AsyncKeystreamClient,
    KeystreamAPIError,
    KeystreamClient,
    KeystreamStreamError,
)

HEAD_OK_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nKeystream-Key-Version: 1\r\n\r\n"


def _drain_request(conn: socket.socket) -> None:
    """Read the request head and its Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    ]
    length = lengths[0] if lengths else 0
    while len(body) < length:
        body += conn.recv(65536)


@pytest.fixture
def scripted() -> Iterator[tuple[str, list[bytes]]]:
    """A one-connection-at-a-time server answering each request with the next scripted reply, then closing."""
    replies: list[bytes] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(10)
                _drain_request(conn)
                conn.sendall(replies.pop(0))
                conn.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", replies
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_missing_chunked_terminator_raises(scripted: tuple[str, list[bytes]]) -> None:
    url, replies = scripted
    replies.append(HEAD_OK_CHUNKED + b"5\r\nhello\r\n")  # no 0\r\n\r\n: the server dropped the connection
    with KeystreamClient(url, "t") as ks:
        received = bytearray()
        with (
            pytest.raises(KeystreamStreamError, match="the service stopped the stream after 5 bytes"),
            ks.decrypt_stream("k", b"x" * 10) as stream,
        ):
            for chunk in stream:
                received += chunk
        assert received == b"hello"  # what arrived was passed on, but iteration did not end cleanly


def test_short_content_length_body_raises(scripted: tuple[str, list[bytes]]) -> None:
    url, replies = scripted
    replies.append(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"a" * 60)
    with KeystreamClient(url, "t") as ks, pytest.raises(KeystreamStreamError):
        ks.decrypt("k", b"y" * 10)


def test_truncated_stream_to_a_file_removes_the_partial_file(
    scripted: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    url, replies = scripted
    replies.append(HEAD_OK_CHUNKED + b"4000\r\n" + b"p" * 0x4000 + b"\r\n")
    destination = tmp_path / "out.bin"
    with KeystreamClient(url, "t") as ks, pytest.raises(KeystreamStreamError):
        ks.decrypt_file("k", b"z" * 100, destination)
    assert list(tmp_path.iterdir()) == []


def test_raw_response_shorter_than_request_raises(scripted: tuple[str, list[bytes]]) -> None:
    url, replies = scripted
    replies.append(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nKeystream-IV: " + b"00" * 16 + b"\r\n\r\nabc")
    with KeystreamClient(url, "t") as ks, pytest.raises(KeystreamStreamError, match="raw response"):
        ks.encrypt("k", b"four", format="raw")


def test_non_json_error_body_still_raises_api_error(scripted: tuple[str, list[bytes]]) -> None:
    url, replies = scripted
    replies.append(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 11\r\n\r\nbad gateway")
    with KeystreamClient(url, "t") as ks, pytest.raises(KeystreamAPIError) as error:
        ks.encrypt("k", b"data")
    assert (error.value.status, error.value.code, error.value.message) == (502, "http_502", "bad gateway")


async def test_async_missing_terminator_raises(scripted: tuple[str, list[bytes]]) -> None:
    url, replies = scripted
    replies.append(HEAD_OK_CHUNKED + b"3\r\nabc\r\n")
    async with AsyncKeystreamClient(url, "t") as ks:
        with pytest.raises(KeystreamStreamError):
            await ks.decrypt("k", b"q" * 10)


def test_truncated_json_answer_is_a_stream_error(scripted: tuple[str, list[bytes]]) -> None:
    url, replies = scripted
    replies.append(
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"keys": ['
    )
    with KeystreamClient(url, "t") as ks, pytest.raises(KeystreamStreamError, match="cut short"):
        ks.list_keys()


async def test_leaving_a_stream_early_closes_even_when_the_server_stopped_reading() -> None:
    """Leaving a stream before its end (Ctrl-C, SIGTERM, an error in the caller) closes the connection at
    once, even with request bytes still queued for a server that no longer reads them: a graceful close
    would wait for those bytes to drain, which never happens (the CLI then hung on SIGTERM)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    accepted: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        accepted.append(conn)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        conn.sendall(HEAD_OK_CHUNKED + b"5\r\nhello\r\n")  # ... and read nothing more

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        async with AsyncKeystreamClient(f"http://127.0.0.1:{listener.getsockname()[1]}", "t") as ks:
            async with asyncio.timeout(10):
                async with ks.encrypt_stream("k", b"b" * (64 << 20)) as stream:
                    async for chunk in stream:
                        assert chunk == b"hello"
                        # Give the sender time to fill the socket buffers and queue bytes in the transport.
                        await asyncio.sleep(0.5)
                        break
    finally:
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        listener.close()
