"""The streaming pipeline: order, bounded buffering, overlap of the stages, errors and cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.services.pipeline import SEND_PIECE_BYTES, ByteChannel, pipeline


async def _source(chunks: list[bytes], log: list[str] | None = None) -> AsyncIterator[bytes]:
    for index, chunk in enumerate(chunks):
        if log is not None:
            log.append(f"read {index}")
        await asyncio.sleep(0)
        yield chunk


async def _upper(data: bytes) -> bytes:
    await asyncio.sleep(0)
    return data.upper()


async def _tail() -> bytes:
    return b"!"


async def test_output_is_the_transform_in_order() -> None:
    chunks = [bytes([97 + n % 26]) * (n + 1) for n in range(50)]
    out = [piece async for piece in pipeline(_source(chunks), _upper, _tail, limit=64)]
    assert b"".join(out) == b"".join(chunks).upper() + b"!"


async def test_big_output_is_sent_in_pieces() -> None:
    big = bytes(2 * SEND_PIECE_BYTES + 5)

    async def whole(data: bytes) -> bytes:
        return data

    out = [piece async for piece in pipeline(_source([big]), whole, _tail, limit=1 << 20)]
    assert [len(piece) for piece in out] == [SEND_PIECE_BYTES, SEND_PIECE_BYTES, 5, 1]
    assert b"".join(out) == big + b"!"


async def test_receiving_continues_while_a_transform_runs() -> None:
    log: list[str] = []
    release = asyncio.Event()

    async def slow(data: bytes) -> bytes:
        log.append(f"transform {data[0]}")
        if data[0] == 0:
            await release.wait()  # e.g. a segment's HMAC in a worker thread
        return data

    stream = pipeline(_source([bytes([n]) for n in range(6)], log), slow, _tail, limit=2)
    first = asyncio.ensure_future(anext(stream))
    for _ in range(20):
        await asyncio.sleep(0)
    # Chunk 0 is still in the transform, and chunks 1 to 3 were read meanwhile (1 and 2 wait in the 2-byte
    # channel; the reader holds 3 until there is room).
    assert "transform 0" in log and "transform 1" not in log
    assert {"read 1", "read 2", "read 3"} <= set(log) and "read 4" not in log
    release.set()
    assert await first == b"\x00"
    assert [piece async for piece in stream] == [bytes([n]) for n in range(1, 6)] + [b"!"]


async def test_an_error_comes_after_the_output_before_it() -> None:
    async def failing(data: bytes) -> bytes:
        if data == b"bad":
            raise ValueError("segment 2 failed")
        return data

    out: list[bytes] = []
    with pytest.raises(ValueError, match="segment 2 failed"):
        async for piece in pipeline(_source([b"a", b"b", b"bad", b"c"]), failing, _tail, limit=8):
            out.append(piece)
    assert out == [b"a", b"b"]


async def test_a_source_error_is_raised_after_the_chunks_before_it() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"x"
        raise ConnectionResetError("client went away")

    out: list[bytes] = []
    with pytest.raises(ConnectionResetError):
        async for piece in pipeline(broken(), _upper, _tail, limit=8):
            out.append(piece)
    assert out == [b"X"]


async def test_closing_early_cancels_both_stages() -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0)
            yield b"data"

    before = len(asyncio.all_tasks())
    stream = pipeline(endless(), _upper, _tail, limit=16)
    assert await anext(stream) == b"DATA"
    assert len(asyncio.all_tasks()) == before + 2
    await stream.aclose()
    assert len(asyncio.all_tasks()) == before


async def test_channel_bounds_bytes_but_always_takes_one_chunk() -> None:
    channel = ByteChannel(limit=4)
    await channel.put(b"123456")  # bigger than the limit, but the channel is empty
    blocked = asyncio.ensure_future(channel.put(b"7"))
    await asyncio.sleep(0)
    assert not blocked.done()
    assert await channel.get() == b"123456"
    await blocked
    channel.close()
    assert await channel.get() == b"7"
    assert await channel.get() is None
