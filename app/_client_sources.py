"""Request-body sources of the Keystream client: bytes, binary files, paths and (async) iterables of bytes.

Each source becomes a chunk reader (an ``async`` callable returning the next chunk, ``b""`` at the end) plus
its length when it can be known without reading it (bytes, regular files), so the request carries a
Content-Length instead of chunked framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import IO, Any

from app._client_transport import ChunkReader

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


@contextlib.contextmanager
def sync_chunk_reader(
    source: Source, chunk_size: int, on_progress: ProgressCallback | None
) -> Iterator[SourceParts]:
    """Chunk reader for the sync client: reads block the private event loop, which only serves this call.

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
        if hasattr(source, "read"):
            file: IO[bytes] = source  # type: ignore[assignment]

            async def read_file() -> bytes:
                return counter.add(file.read(chunk_size) or b"")

            yield read_file, file_remaining(file), counter.get
            return
        if isinstance(source, AsyncIterable):
            raise TypeError("async iterables need AsyncKeystreamClient")
        iterator = iter(source)

        async def read_iterable() -> bytes:
            for chunk in iterator:
                if chunk:
                    return counter.add(bytes(chunk))
            return b""

        yield read_iterable, None, counter.get


@contextlib.asynccontextmanager
async def async_chunk_reader(
    source: Source, chunk_size: int, on_progress: ProgressCallback | None
) -> AsyncIterator[SourceParts]:
    """Chunk reader for the async client: file and sync-iterator reads run in a worker thread.

    Raises:
        TypeError: ``source`` has an unsupported type.
        OSError: a path source cannot be opened.
    """
    _check_type(source)
    counter = _Counter(on_progress)
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(source, str | os.PathLike):
            opened: IO[bytes] = await asyncio.to_thread(open, source, "rb")
            stack.push_async_callback(asyncio.to_thread, opened.close)
            source = opened
        if isinstance(source, bytes | bytearray | memoryview):
            yield _bytes_reader(source, chunk_size, counter), memoryview(source).nbytes, counter.get
            return
        if hasattr(source, "read"):
            file: IO[bytes] = source  # type: ignore[assignment]

            async def read_file() -> bytes:
                return counter.add(await asyncio.to_thread(file.read, chunk_size) or b"")

            yield read_file, file_remaining(file), counter.get
            return
        if isinstance(source, AsyncIterable):
            async_iterator = aiter(source)

            async def read_async() -> bytes:
                async for chunk in async_iterator:
                    if chunk:
                        return counter.add(bytes(chunk))
                return b""

            yield read_async, None, counter.get
            return
        iterator = iter(source)

        def next_chunk() -> bytes:
            for chunk in iterator:
                if chunk:
                    return bytes(chunk)
            return b""

        async def read_iterable() -> bytes:
            return counter.add(await asyncio.to_thread(next_chunk))

        yield read_iterable, None, counter.get
