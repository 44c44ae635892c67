"""The streaming pump: request body in, transformed body out, through a
:class:`~app.services.crypto_step.CryptoStep`.

A small body (Content-Length up to ``small_body_max_bytes``, 64 KiB by default) is read whole and transformed
in one call: for 1 KiB messages the streaming machinery costs more than the crypto. Any other body is never
buffered whole. Work that leaves the event loop (sealed segments, slow backends) runs in a three-stage
:func:`~app.services.pipeline.pipeline` (receive, transform in a worker thread, send), each stage holding
about one segment; inline work (raw AES-NI) transforms each chunk before the next is read. Either way memory
stays flat and backpressure reaches the client through TCP.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message, Receive

from app.api.errors import error_response
from app.api.params import CryptoParams
from app.api.streaming import DuplexStreamingResponse, OctetsResponse, StreamAbortedError
from app.errors import KeystreamError
from app.services.crypto_step import CryptoStep
from app.services.pipeline import pipeline, send_pieces


async def pump(
    step: CryptoStep, chunks: AsyncGenerator[bytes, None], ready: list[bytes], finished: bool
) -> AsyncIterator[bytes]:
    """Yield ``ready`` output, then transform the rest of the request body chunk by chunk.

    A client disconnect ends the generator quietly (no state survives it); a crypto or format error after the
    response started becomes :class:`~app.api.streaming.StreamAbortedError` so the server drops the
    connection.

    Raises:
        StreamAbortedError: the transform failed after output was sent.
    """
    try:
        for chunk in ready:
            yield chunk
        ready.clear()
        if finished:
            return
        if step.offloads:
            # Receive, transform (in a worker thread) and send overlap: see pipeline().
            staged = pipeline(chunks, step.update, step.finalize, step.pipeline_bytes)
            async with contextlib.aclosing(staged) as outputs:
                async for out in outputs:
                    yield out
            return
        async for chunk in chunks:
            for piece in send_pieces(await step.update(chunk)):
                yield piece
        for piece in send_pieces(await step.finalize()):
            yield piece
    except ClientDisconnect:
        return
    except KeystreamError as exc:
        raise StreamAbortedError(f"{exc.code}: {exc.message}") from exc
    finally:
        await chunks.aclose()


async def small_body(receive: Receive, message: Message) -> bytes:
    """The whole body of a request whose first body message is ``message``: it and the messages after it.

    The server frames a small body by Content-Length, so it arrives in a message or a few (the first
    ``receive()`` answers ``Expect: 100-continue``); :func:`respond` takes a body that came whole in its
    first message without this coroutine.

    Raises:
        ClientDisconnect: the client went away while the body was read.
    """
    # = await request.body(), without its async generator.
    chunks: list[bytes] = []
    while True:
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        message = await receive()


def disconnected() -> Response:
    """The answer to a client that closed the connection before its body was read (nobody will see it)."""
    return error_response(400, "client_disconnected", "the client closed the connection")


async def respond(
    request: Request,
    params: CryptoParams,
    headers: dict[str, str],
    limit: int,
    stream: Callable[[], CryptoStep],
    *,
    whole: Callable[[bytes], bytes | Awaitable[bytes]] | None = None,
    key_version: Callable[[], int | None] | None = None,
    length: Callable[[int], int] | None = None,
) -> Response:
    """Transform the body: in one call when small, else as a stream that starts once the first output exists.

    Everything before this call (token, parameters, key) is checked without touching the body, so a refused
    ``Expect: 100-continue`` request gets its final answer at once; the first body read sends
    ``100 Continue``.

    Args:
        request, params: the request and its parsed parameters (``params.content_length`` says how big).
        headers: the response's headers.
        limit: the most bytes a small body has (``small_body_max_bytes``).
        stream: makes the crypto step for a body that is not small (called only then).
        whole: transforms a small body in one call, returning the output or an awaitable of it; by default
            the step's :meth:`CryptoStep.run_whole`.
        key_version: the key version that produced the output, asked once the first output exists (a
            sealed decrypt learns it from the segment that verified); it becomes ``Keystream-Key-Version``.
        length: the output's length for a body of the given length (a sealed message's is a function of its
            plaintext's and back): a streamed body that declares its Content-Length gets an answer that
            declares its own, which the server sends as it comes instead of framing each piece as a chunk
            (a copy of every piece). Raises before the body is read when no output can have that length.

    Raises:
        KeystreamError: a small body or the stream's first output failed to transform, or ``length``
            refused the declared length (a clean 4xx; nothing was sent).
    """
    if params.content_length is not None and params.content_length <= limit:
        # A small body: read whole and transformed in one call, without the streaming machinery (read-ahead
        # task, chunked response), which costs more than the crypto of a 1 KiB message.
        receive = request.receive
        message = await receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            body = message.get("body", b"")  # all of it in one message (the usual case): no coroutine
        else:
            try:
                body = await small_body(receive, message)
            except ClientDisconnect:
                return disconnected()
        # ``whole`` answers at once when its crypto runs on the event loop, else with an awaitable.
        output = whole(body) if whole is not None else stream().run_whole(body)
        if not isinstance(output, bytes):
            output = await output
        _name_version(headers, key_version)
        return OctetsResponse(output, headers)
    if length is not None and params.content_length is not None:
        # The server checks it: a stream that ends short of it is aborted, as a failed one is.
        headers["Content-Length"] = str(length(params.content_length))
    step = stream()
    # Read before the response starts: the server answers ``Expect: 100-continue`` only when the body is
    # asked for and forgets it once a response has started (curl then waits 1 s before every upload).
    chunks = request.stream()
    started = await first_output(step, chunks)  # a sealed decrypt's bad first segment is a clean 400
    if started is None:
        return disconnected()
    ready, finished = started
    _name_version(headers, key_version)
    return DuplexStreamingResponse(pump(step, chunks, ready, finished), headers=headers)


def _name_version(headers: dict[str, str], key_version: Callable[[], int | None] | None) -> None:
    """Set ``Keystream-Key-Version`` from ``key_version`` when it names one."""
    version = key_version() if key_version is not None else None
    if version is not None:
        headers["Keystream-Key-Version"] = str(version)


async def first_output(
    step: CryptoStep, chunks: AsyncGenerator[bytes, None]
) -> tuple[list[bytes], bool] | None:
    """Read until the step produced output (a sealed decrypt: the first segment verified) or the body ended.

    Returns ``(ready output, finished)``, or ``None`` when the client disconnected (``chunks`` is closed).
    So a bad first segment is a clean 400 before any response starts.

    Raises:
        KeystreamError: the transform failed (``chunks`` is closed).
    """
    ready: list[bytes] = []
    try:
        async for chunk in chunks:
            ready += send_pieces(await step.update(chunk))
            if ready:
                return ready, False
        ready += send_pieces(await step.finalize())
        return ready, True
    except ClientDisconnect:
        await chunks.aclose()
        return None
    except BaseException:
        await chunks.aclose()
        raise
