"""Request-body sources of the Keystream client: bytes, binary files, paths and (async) iterables of bytes.

Each source becomes a chunk reader (an ``async`` callable returning the next chunk, ``b""`` at the end) plus
its length when it can be known without reading it (bytes, regular files), so the request carries a
Content-Length instead of chunked framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import stat
import threading
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from typing import IO, Any

from keystream_client._transport import ChunkReader

#: A path (``str`` or :class:`os.PathLike`), bytes, a binary file object, or an (async) iterable of bytes.
Source = (
    str
    | os.PathLike[str]
    | bytes
    | bytearray
    | memoryview
    | IO[bytes]
    | Iterable[bytes]
    | AsyncIterable[bytes]
)
#: Called with the number of request-body bytes just handed to the connection.
ProgressCallback = Callable[[int], None]
SourceParts = tuple[ChunkReader, int | None, Callable[[], int]]


class _Counter:
    def __init__(self, on_progress: ProgressCallback | None) -> None:
        self.total = 0
        self._on_progress = on_progress

    def add(self, chunk: bytes) -> bytes:
        self.total += len(chunk)
        if chunk and self._on_progress is not None:
            self._on_progress(len(chunk))
        return chunk

    def get(self) -> int:
        return self.total


def file_remaining(file: Any) -> int | None:
    """Bytes left to read in ``file`` when it is a regular file at a known position, else None."""
    try:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or not file.seekable():
            return None
        return max(0, info.st_size - int(file.tell()))
    except (AttributeError, OSError, ValueError):
        return None


def _check_type(source: object) -> None:
    if isinstance(source, str | os.PathLike | bytes | bytearray | memoryview):
        return
    if hasattr(source, "read") or isinstance(source, Iterable | AsyncIterable):
        return
    raise TypeError(
        f"source must be a path, bytes, a binary file or an iterable of bytes, not {type(source).__name__}"
    )


def _bytes_reader(data: bytes | bytearray | memoryview, chunk_size: int, counter: _Counter) -> ChunkReader:
    view = memoryview(data).cast("B")
    position = 0

    async def read() -> bytes:
        nonlocal position
        chunk = bytes(view[position : position + chunk_size])
        position += len(chunk)
        return counter.add(chunk)

    return read


class _ThreadedReader:
    """Runs blocking reads (a pipe, stdin, a generator) in a daemon thread, one chunk per call.

    The event loop keeps receiving the response while the source waits for input, so output is not held
    back by a slow producer. The thread is a daemon so a read blocked on stdin never delays interpreter exit
    (an executor's worker would be joined at exit).
    """

    def __init__(self, read: Callable[[], bytes], counter: _Counter) -> None:
        self._read = read
        self._counter = counter
        self._requests: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[bytes]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    async def __call__(self) -> bytes:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="keystream-source", daemon=True)
            self._thread.start()
        self._requests.put((loop, future))
        return self._counter.add(await future)

    def close(self) -> None:
        """Let the thread end after its current read."""
        self._requests.put(None)

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            loop, future = request
            try:
                data = self._read()
            except BaseException as exc:  # handed to the awaiting task, which fails the request
                self._deliver(loop, future, None, exc)
                return
            self._deliver(loop, future, data, None)
            if not data:
                return

    @staticmethod
    def _deliver(
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[bytes],
        data: bytes | None,
        error: BaseException | None,
    ) -> None:
        def settle() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(data or b"")

        with contextlib.suppress(RuntimeError):  # the loop was closed: the call was abandoned
            loop.call_soon_threadsafe(settle)


def _file_read(file: IO[bytes], chunk_size: int) -> Callable[[], bytes]:
    # read1 returns what a pipe has now instead of waiting for a full chunk: output keeps flowing.
    read = getattr(file, "read1", None) or file.read

    def read_chunk() -> bytes:
        return bytes(read(chunk_size) or b"")

    return read_chunk


def _iterator_read(source: Iterable[bytes]) -> Callable[[], bytes]:
    iterator = iter(source)

    def next_chunk() -> bytes:
        for chunk in iterator:
            if chunk:
                return bytes(chunk)
        return b""

    return next_chunk


@contextlib.contextmanager
def chunk_reader(
    source: Source, chunk_size: int, on_progress: ProgressCallback | None, *, async_client: bool
) -> Iterator[SourceParts]:
    """The request body for ``source``: a chunk reader, its length when known, and a bytes-sent getter.

    Regular files read inline on the sync client (its loop serves only this call); pipes, stdin, sync
    iterators, and every file on the async client read in a daemon thread.

    Raises:
        TypeError: ``source`` has an unsupported type (async iterables need the async client).
        OSError: a path source cannot be opened.
    """
    _check_type(source)
    counter = _Counter(on_progress)
    with contextlib.ExitStack() as stack:
        if isinstance(source, str | os.PathLike):
            source = stack.enter_context(open(source, "rb"))
        if isinstance(source, bytes | bytearray | memoryview):
            yield _bytes_reader(source, chunk_size, counter), memoryview(source).nbytes, counter.get
            return
        if isinstance(source, AsyncIterable) and not hasattr(source, "read"):
            if not async_client:
                raise TypeError("async iterables need AsyncKeystreamClient")
            async_iterator = aiter(source)

            async def read_async() -> bytes:
                async for chunk in async_iterator:
                    if chunk:
                        return counter.add(bytes(chunk))
                return b""

            yield read_async, None, counter.get
            return
        length: int | None = None
        if hasattr(source, "read"):
            file: IO[bytes] = source  # type: ignore[assignment]
            length = file_remaining(file)
            read = _file_read(file, chunk_size)
            if length is not None and not async_client:

                async def read_inline() -> bytes:
                    return counter.add(read())

                yield read_inline, length, counter.get
                return
        else:
            read = _iterator_read(source)  # type: ignore[arg-type]
        threaded = _ThreadedReader(read, counter)
        try:
            yield threaded, length, counter.get
        finally:
            threaded.close()
