"""The protocol's own ``on_header`` (the head limit's count, then uvicorn's work written out) hands the app
the same headers as uvicorn's httptools protocol, and notes ``Expect: 100-continue`` as uvicorn does."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from uvicorn import Config, Server
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.serving.protocol import BoundedHttpToolsProtocol

#: A head with mixed-case names, a repeated header, an empty value and ``Expect: 100-continue``.
REQUEST = (
    b"POST /v1/x?q=1 HTTP/1.1\r\n"
    b"Host: example.test\r\n"
    b"X-Mixed-Case: Value With Case\r\n"
    b"accept: a/b\r\n"
    b"Accept: c/d\r\n"
    b"X-Empty: \r\n"
    b"EXPECT: 100-Continue\r\n"
    b"Content-Length: 3\r\n"
    b"\r\n"
    b"abc"
)


async def _serve_once(protocol: type[HttpToolsProtocol]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The scope's headers the app saw and the raw bytes answered, for :data:`REQUEST` via ``protocol``."""
    seen: list[tuple[bytes, bytes]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        seen.extend(scope["headers"])
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = Server(Config(app, http=protocol, log_level="warning", lifespan="off", date_header=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        writer.write(REQUEST)
        await writer.drain()
        answer = b""
        while not answer.endswith(b"ok"):
            piece = await asyncio.wait_for(reader.read(4096), 10)
            if not piece:
                break
            answer += piece
        writer.close()
    finally:
        server.should_exit = True
        await task
        sock.close()
    return seen, answer


@pytest.mark.parametrize("protocol", [HttpToolsProtocol, BoundedHttpToolsProtocol])
async def test_headers_reach_the_app_lower_cased_in_order_with_repeats(
    protocol: type[HttpToolsProtocol],
) -> None:
    seen, answer = await _serve_once(protocol)
    assert seen == [
        (b"host", b"example.test"),
        (b"x-mixed-case", b"Value With Case"),
        (b"accept", b"a/b"),
        (b"accept", b"c/d"),
        (b"x-empty", b""),
        (b"expect", b"100-Continue"),
        (b"content-length", b"3"),
    ]
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")


async def test_the_protocol_answers_as_uvicorns_own() -> None:
    assert await _serve_once(BoundedHttpToolsProtocol) == await _serve_once(HttpToolsProtocol)
