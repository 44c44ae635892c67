"""Bounded, overlapping stages for transforming a stream: receive, transform, send (plain asyncio, no web).

:func:`pipeline` runs the stages as tasks joined by :class:`ByteChannel` s, each holding about one segment, so
memory stays flat whatever the stream's length; :func:`send_pieces` cuts output into pieces the HTTP layer
sends one by one.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable


class ByteChannel:
    """A FIFO of byte chunks between two tasks, bounded by bytes; ends with :meth:`close` or :meth:`fail`.

    ``put`` waits while the held bytes exceed ``limit`` (a single chunk always fits, however big), so memory
    per stream stays near ``limit`` plus one chunk.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: collections.deque[bytes] = collections.deque()
        self._held = 0
        self._end: BaseException | None = None
        self._closed = False
        self._changed = asyncio.Event()

    async def put(self, chunk: bytes) -> None:
        """Append ``chunk``, first waiting for room."""
        while self._items and self._held + len(chunk) > self._limit:
            self._changed.clear()
            await self._changed.wait()
        self._items.append(chunk)
        self._held += len(chunk)
        self._changed.set()

    def close(self) -> None:
        """No more chunks: :meth:`get` returns ``None`` once the held ones are taken."""
        self._closed = True
        self._changed.set()

    def fail(self, error: BaseException) -> None:
        """The producer failed: :meth:`get` raises ``error`` once the held chunks are taken."""
        self._end, self._closed = error, True
        self._changed.set()

    async def get(self) -> bytes | None:
        """The next chunk, or ``None`` at the end.

        Raises:
            BaseException: whatever the producer passed to :meth:`fail`.
        """
        while not self._items:
            if self._closed:
                if self._end is not None:
                    raise self._end
                return None
            self._changed.clear()
            await self._changed.wait()
        chunk = self._items.popleft()
        self._held -= len(chunk)
        self._changed.set()
        return chunk


#: Output is sent in pieces of at most this many bytes. A whole 1 MiB sealed segment as one HTTP chunk
#: tripled the benchmark client's CPU per MiB (a client that reads chunk by chunk buffers all of it); 256 KiB
#: pieces cost the server one more slice per piece.
SEND_PIECE_BYTES = 256 * 1024


#: Output of a transform: one ``bytes``, or pieces to send in order (e.g. a sealed segment and its tag).
Pieces = bytes | list[bytes]


def send_pieces(data: Pieces) -> list[bytes]:
    """``data`` as non-empty pieces of at most :data:`SEND_PIECE_BYTES` (bigger ones are cut, with a copy)."""
    if isinstance(data, bytes):
        if len(data) <= SEND_PIECE_BYTES:
            return [data] if data else []
        return [data[start : start + SEND_PIECE_BYTES] for start in range(0, len(data), SEND_PIECE_BYTES)]
    if all(0 < len(piece) <= SEND_PIECE_BYTES for piece in data):
        return data
    return [piece for part in data for piece in send_pieces(part)]


async def _put_pieces(channel: ByteChannel, data: Pieces) -> None:
    for piece in send_pieces(data):
        await channel.put(piece)


async def pipeline(
    source: AsyncIterable[bytes],
    update: Callable[[bytes], Awaitable[Pieces]],
    finalize: Callable[[], Awaitable[Pieces]],
    limit: int,
) -> AsyncGenerator[bytes, None]:
    """Transform ``source`` in three overlapping stages: receive, transform, send.

    One task reads ``source`` into a :class:`ByteChannel`, a second runs ``update`` over each chunk (then
    ``finalize``) into another, and the caller iterates the output (the response sends it). So while a
    transform runs in a worker thread, the event loop keeps receiving the next chunks and sending earlier
    output; run one after the other, each stage waits for the others and the socket buffers drain in between.
    Each channel holds about ``limit`` bytes, so memory stays bounded whatever the stream's length.

    Errors of either task (a client disconnect, a failed segment) are raised here, in order, after the output
    produced before them. Closing the iterator cancels both tasks and waits for them.
    """
    inbox, outbox = ByteChannel(limit), ByteChannel(limit)

    async def receive() -> None:
        try:
            async for chunk in source:
                await inbox.put(chunk)
        except Exception as exc:
            inbox.fail(exc)
        else:
            inbox.close()

    async def transform() -> None:
        try:
            while (chunk := await inbox.get()) is not None:
                await _put_pieces(outbox, await update(chunk))
            await _put_pieces(outbox, await finalize())
        except Exception as exc:
            outbox.fail(exc)
        else:
            outbox.close()

    tasks = [asyncio.create_task(receive()), asyncio.create_task(transform())]
    try:
        while (out := await outbox.get()) is not None:
            yield out
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
