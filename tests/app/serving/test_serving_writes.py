"""A response's head and the start of its body leave in one write (one system call instead of two) at the end
of the event-loop iteration, a head whose body comes later leaves then on its own, and nothing is reordered
or lost: the protocol sends what is held before it closes a connection itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.serving.protocol import HELD_BODY_MAX_BYTES, BoundedHttpToolsProtocol, _HeadWithBody


class _Transport:
    """Records what reaches the transport, one entry per call (a write or writelines is one system call)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, pieces: Any) -> None:
        self.calls.append(("writelines", b"".join(pieces)))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0


async def test_head_and_body_leave_in_one_call_at_the_end_of_the_iteration() -> None:
    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    joined.write(b"HTTP/1.1 200 OK\r\n\r\n")
    joined.write(b"body")
    assert transport.calls == []  # the answers of one iteration leave together, after its work
    await asyncio.sleep(0)
    assert transport.calls == [("writelines", b"HTTP/1.1 200 OK\r\n\r\nbody")]
    joined.write(b"more")
    assert transport.calls[1:] == [("write", b"more")]


async def test_a_second_body_write_sends_what_is_held_with_it_at_once() -> None:
    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    joined.write(b"head|")
    joined.write(b"body|")
    joined.write(b"more")
    assert transport.calls == [("writelines", b"head|body|more")]  # never more than one piece held
    await asyncio.sleep(0)
    assert len(transport.calls) == 1


@pytest.mark.parametrize("kind", [bytearray, memoryview])
async def test_a_mutable_body_is_sent_at_once_not_held(kind: Any) -> None:
    """A writer may reuse its buffer as soon as ``write`` returns: it must not be read later."""
    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    buffer = bytearray(b"body")
    joined.write(b"head|")
    joined.write(kind(buffer))
    assert transport.calls == [("writelines", b"head|body")]
    buffer[:] = b"XXXX"
    await asyncio.sleep(0)
    assert transport.calls == [("writelines", b"head|body")]


async def test_a_large_body_piece_is_sent_with_its_head_at_once_not_held() -> None:
    """Holding helps small answers only; a large one goes at once, in one call with its head."""
    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    joined.write(b"head|")
    joined.write(b"x" * HELD_BODY_MAX_BYTES)  # the largest piece held
    assert transport.calls == []
    await asyncio.sleep(0)
    assert transport.calls == [("writelines", b"head|" + b"x" * HELD_BODY_MAX_BYTES)]
    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    joined.write(b"head|")
    joined.write(b"y" * (HELD_BODY_MAX_BYTES + 1))
    assert transport.calls == [("writelines", b"head|" + b"y" * (HELD_BODY_MAX_BYTES + 1))]
    await asyncio.sleep(0)
    assert len(transport.calls) == 1


async def test_a_head_alone_leaves_at_the_end_of_the_iteration_and_order_is_kept() -> None:
    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    joined.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert transport.calls == []
    await asyncio.sleep(0)
    assert transport.calls == [("write", b"HTTP/1.1 100 Continue\r\n\r\n")]
    joined.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert joined.get_write_buffer_size() == 0  # any other use sends the held head first
    joined.write(b"late body")
    assert transport.calls[1:] == [("write", b"HTTP/1.1 200 OK\r\n\r\n"), ("write", b"late body")]


async def test_close_sends_the_held_head_first_and_a_closing_transport_gets_nothing_new() -> None:
    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    joined.write(b"head")
    joined.close()
    assert transport.calls == [("write", b"head"), ("close", b"")]
    other = _Transport()
    held = _HeadWithBody(other, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"head")
    other.closing = True  # the connection was dropped before the iteration ended
    await asyncio.sleep(0)
    assert other.calls == []


@contextlib.asynccontextmanager
async def _serving(app: Any, protocol: type[BoundedHttpToolsProtocol]) -> AsyncIterator[str]:
    """uvicorn serving ``app`` with ``protocol`` on a free loopback port, for the block; yields its URL."""
    from uvicorn import Config, Server

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = Server(Config(app, http=protocol, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.mark.parametrize("size", [0, 1024, 300_000])
async def test_a_real_server_answers_with_one_write_per_small_response(size: int) -> None:
    """Through uvicorn on a real socket: what the client reads is the whole answer; small answers are one
    write on the server side (counted on the transport)."""

    body = os.urandom(size)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        headers = [(b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    writes: list[int] = []

    class Counting(BoundedHttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            original_write = transport.write

            def write(data: Any) -> None:
                writes.append(1)
                original_write(data)

            def writelines(pieces: Any) -> None:  # one send, as uvloop's writev
                writes.append(1)
                original_write(b"".join(pieces))

            transport.write = write  # type: ignore[method-assign]
            transport.writelines = writelines  # type: ignore[method-assign]
            super().connection_made(transport)

    async with _serving(app, Counting) as url:
        async with httpx.AsyncClient() as client:
            answer = await client.post(url + "/", content=b"x")
        assert answer.status_code == 200 and answer.content == body
        if size <= 1024:
            assert writes == [1]


class _Recording(_Transport):
    """Also records the calls that carry no data, to check that a held head leaves before them."""

    def abort(self) -> None:
        self.calls.append(("abort", b""))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        self.calls.append(("get_extra_info", name.encode()))
        return default


@pytest.mark.parametrize(
    ("call", "recorded"),
    [
        (lambda t: t.writelines([b"a", b"b"]), ("writelines", b"ab")),
        (lambda t: t.close(), ("close", b"")),
        (lambda t: t.abort(), ("abort", b"")),
        (lambda t: t.get_extra_info("peername"), ("get_extra_info", b"peername")),
    ],
)
async def test_every_other_call_sends_the_held_head_first(call: Any, recorded: tuple[str, bytes]) -> None:
    transport = _Recording()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    joined.write(b"head")
    call(joined)
    assert transport.calls == [("write", b"head"), recorded]
    assert joined.is_closing() is transport.closing


def test_the_cycle_uses_only_transport_methods_the_wrapper_has() -> None:
    """uvicorn's request cycle reaches its transport through these names; the wrapper has no ``__getattr__``
    (every attribute read would pay for it), so a name uvicorn starts using must be added to it."""
    import inspect
    import re

    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    used = set(re.findall(r"self\.transport\.(\w+)", inspect.getsource(RequestResponseCycle)))
    assert used, "the scan found no transport use: uvicorn's cycle changed shape"
    assert not hasattr(_HeadWithBody, "__getattr__")
    missing = {name for name in used if not callable(getattr(_HeadWithBody, name, None))}
    assert not missing, f"uvicorn's cycle calls {sorted(missing)} on its transport"


async def test_holding_a_head_asks_no_running_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrapper schedules its flush on the loop it was given: on Python 3.11 each
    ``asyncio.get_running_loop()`` is a ``getpid`` system call, once a response."""

    def refused() -> asyncio.AbstractEventLoop:
        raise AssertionError("get_running_loop called")

    transport = _Transport()
    joined = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    monkeypatch.setattr(asyncio, "get_running_loop", refused)
    joined.write(b"head")
    monkeypatch.undo()
    await asyncio.sleep(0)
    assert transport.calls == [("write", b"head")]


def _protocol_holding(answer: bytes) -> tuple[BoundedHttpToolsProtocol, _Recording]:
    """A protocol (built without a connection) whose current request's answer is held, on a recording
    transport."""
    from types import SimpleNamespace

    transport = _Recording()
    protocol = BoundedHttpToolsProtocol.__new__(BoundedHttpToolsProtocol)
    protocol.transport = transport  # type: ignore[assignment]
    protocol._http_started = True
    protocol.server_state = SimpleNamespace(default_headers=[])  # type: ignore[assignment]
    protocol.cycle = SimpleNamespace(response_complete=True, response_started=True)  # type: ignore[assignment]
    protocol.pipeline = deque()
    writes = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    protocol._answer_writers = deque([writes])
    writes.write(answer[:5])
    writes.write(answer[5:])
    assert transport.calls == []
    return protocol, transport


@pytest.mark.parametrize(
    "close",
    [
        lambda p: p.shutdown(),
        lambda p: p.drop("idle"),
        lambda p: p.drop("evicted"),
        lambda p: p._write_error_and_close(400, "bad_request", "malformed HTTP request: x"),
    ],
    ids=["shutdown", "idle", "evicted", "malformed"],
)
async def test_the_protocol_sends_a_held_answer_before_it_closes_the_connection(close: Any) -> None:
    """A complete answer waits for the end of the iteration; a close by the protocol in the meantime
    (graceful shutdown, a connection limit, malformed bytes after the request) must not lose it."""
    from app.serving.limits import Phase

    protocol, transport = _protocol_holding(b"HTTP/1.1 200 OK\r\n\r\nanswer")
    protocol.phase = Phase.IDLE
    close(protocol)
    assert transport.calls[0] == ("writelines", b"HTTP/1.1 200 OK\r\n\r\nanswer")
    assert transport.calls[-1][0] in ("close", "abort")


async def test_a_pipelined_requests_writer_does_not_hide_an_earlier_held_answer() -> None:
    """Request B, pipelined behind A, gets its writer while A's answer may still be held: a close by the
    protocol sends A's answer (then B's, in order), and writers that sent what they held are let go."""
    protocol, transport = _protocol_holding(b"HTTP/1.1 200 OK\r\n\r\nA")
    loop = asyncio.get_running_loop()
    later = _HeadWithBody(transport, loop)  # type: ignore[arg-type]
    protocol._answer_writers.append(later)
    later.write(b"HTTP/1.1 200 OK\r\n\r\n")
    later.write(b"B")
    protocol.shutdown()
    assert transport.calls == [
        ("writelines", b"HTTP/1.1 200 OK\r\n\r\nA"),
        ("writelines", b"HTTP/1.1 200 OK\r\n\r\nB"),
        ("close", b""),
    ]
    assert all(writer.settled for writer in protocol._answer_writers)


async def test_a_connection_keeps_only_writers_that_may_still_hold() -> None:
    """Through uvicorn on a real socket, many requests on one keep-alive connection: the writers of
    answered requests are let go (the list does not grow with the connection's requests)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    protocols: list[BoundedHttpToolsProtocol] = []

    class Kept(BoundedHttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            protocols.append(self)
            super().connection_made(transport)

    async with _serving(app, Kept) as url, httpx.AsyncClient(base_url=url) as client:
        for _ in range(50):
            assert (await client.post("/", content=b"x")).content == b"ok"
    assert len(protocols) == 1 and len(protocols[0]._answer_writers) <= 2
