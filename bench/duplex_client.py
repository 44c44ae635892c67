"""A minimal full-duplex HTTP/1.1 client for streaming through Keystream (benchmarks and end-to-end tests).

httpx (h11) sends the whole request body before it reads the response; a server that answers while it
reads (encrypt streams ciphertext as plaintext arrives) then fills the socket buffers both ways and both
sides wait. This client writes the body from one task and reads the response in another over one socket.
It speaks just enough HTTP/1.1: Content-Length or chunked requests, Content-Length or chunked responses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from dataclasses import dataclass, field


class IncompleteResponseError(Exception):
    """The server closed the connection before the response body ended (an aborted stream)."""


@dataclass
class DuplexResult:
    status: int
    headers: dict[str, str]
    received: int
    sent: int
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list, repr=False)


Sink = Callable[[bytes], Awaitable[None] | None]


async def _feed(source: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterable[bytes]:
    if isinstance(source, AsyncIterable):
        async for chunk in source:
            yield chunk
    else:
        for chunk in source:
            yield chunk


async def duplex_request(
    host: str,
    port: int,
    method: str,
    target: str,
    headers: dict[str, str],
    body: AsyncIterable[bytes] | Iterable[bytes] | bytes = b"",
    content_length: int | None = None,
    sink: Sink | None = None,
    keep_body: bool = False,
    timeout: float = 120.0,
) -> DuplexResult:
    """Send one request on a fresh connection while reading its response.

    ``body`` bytes are sent with a Content-Length; an iterable is sent with ``content_length`` when given,
    else chunked. ``sink`` receives each response body piece (it may be async); ``keep_body`` collects it.

    Raises:
        IncompleteResponseError: the connection ended inside the response body.
        TimeoutError: nothing happened for ``timeout`` seconds.
    """
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    if isinstance(body, bytes | bytearray | memoryview):
        content_length = len(body)
        source: AsyncIterable[bytes] | Iterable[bytes] = [bytes(body)]
    else:
        source = body
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(
        f"Content-Length: {content_length}" if content_length is not None else "Transfer-Encoding: chunked"
    )
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    sent = 0

    async def send_body() -> None:
        nonlocal sent
        async for chunk in _feed(source):
            if not chunk:
                continue
            if content_length is None:
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            else:
                writer.write(chunk)
            sent += len(chunk)
            await writer.drain()
        if content_length is None:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    sender = asyncio.create_task(send_body())
    try:
        result = await asyncio.wait_for(_read_response(reader, sink, keep_body), timeout)
        result.sent = sent
        if not sender.done():
            # The server answered before consuming the body (an early error): stop sending.
            sender.cancel()
        try:
            await sender
        except (asyncio.CancelledError, ConnectionError):
            pass
        result.sent = sent
        return result
    finally:
        if not sender.done():
            sender.cancel()
            try:
                await sender
            except (asyncio.CancelledError, ConnectionError):
                pass
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass


async def _read_response(reader: asyncio.StreamReader, sink: Sink | None, keep_body: bool) -> DuplexResult:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise IncompleteResponseError("connection closed before the response head") from exc
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    result = DuplexResult(status=status, headers=headers, received=0, sent=0)

    async def deliver(piece: bytes) -> None:
        result.received += len(piece)
        if keep_body:
            result.chunks.append(piece)
        if sink is not None:
            outcome = sink(piece)
            if outcome is not None:
                await outcome

    try:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                await deliver(await reader.readexactly(size))
                await reader.readexactly(2)
        elif "content-length" in headers:
            remaining = int(headers["content-length"])
            while remaining:
                piece = await reader.read(min(remaining, 1 << 20))
                if not piece:
                    raise IncompleteResponseError("connection closed inside the response body")
                remaining -= len(piece)
                await deliver(piece)
        else:
            while piece := await reader.read(1 << 20):
                await deliver(piece)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise IncompleteResponseError("connection closed inside the response body") from exc
    if keep_body:
        result.body = b"".join(result.chunks)
        result.chunks = []
    return result
