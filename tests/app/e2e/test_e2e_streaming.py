"""End to end against a real uvicorn process: big streams, flat memory, concurrency, disconnects, aborts."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psutil
import pytest

from bench.duplex_client import DuplexResult, IncompleteResponseError, duplex_request
from bench.service_process import Server

pytestmark = pytest.mark.e2e
MIB = 1 << 20


def plaintext(size: int, seed: int, chunk: int = MIB) -> AsyncIterator[bytes]:
    """Deterministic pseudo-random chunks (cheap: one random block, stamped per chunk)."""
    block = hashlib.shake_256(seed.to_bytes(8, "big")).digest(chunk)

    async def chunks() -> AsyncIterator[bytes]:
        sent = 0
        index = 0
        while sent < size:
            piece = (index.to_bytes(8, "big") + block[8:])[: min(chunk, size - sent)]
            sent += len(piece)
            index += 1
            yield piece

    return chunks()


async def round_trip(
    server: Server, size: int, *, seed: int, fmt: str = "sealed", key: str = "stream", chunked: bool = False
) -> tuple[bool, DuplexResult, DuplexResult]:
    """Encrypt a stream and feed the ciphertext, as it arrives, into decrypt; True when the output matches."""
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    query = f"?format={fmt}"
    if fmt == "raw":
        iv = hashlib.sha256(str(seed).encode()).hexdigest()[:32]
        query += f"&iv={iv}&key_version=1"
    expected, actual = hashlib.sha256(), hashlib.sha256()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=8)

    async def source() -> AsyncIterator[bytes]:
        async for chunk in plaintext(size, seed):
            expected.update(chunk)
            yield chunk

    async def encrypt() -> DuplexResult:
        try:
            return await duplex_request(
                server.host,
                server.port,
                "POST",
                f"/v1/keys/{key}/encrypt{query}",
                headers,
                source(),
                content_length=None if chunked else size,
                sink=queue.put,
            )
        finally:
            await queue.put(None)

    async def ciphertext() -> AsyncIterator[bytes]:
        while (piece := await queue.get()) is not None:
            yield piece

    encrypted, decrypted = await asyncio.gather(
        encrypt(),
        duplex_request(
            server.host,
            server.port,
            "POST",
            f"/v1/keys/{key}/decrypt{query}",
            headers,
            ciphertext(),
            sink=actual.update,
        ),
    )
    ok = encrypted.status == 200 and decrypted.status == 200 and expected.digest() == actual.digest()
    return ok, encrypted, decrypted


def metric_value(text: str, prefix: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


async def test_64mib_round_trip_with_flat_memory(server: Server) -> None:
    process = psutil.Process(server.process.pid)
    baseline = process.memory_info().rss
    peak = baseline
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process.memory_info().rss)
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    try:
        ok, encrypted, decrypted = await round_trip(server, 96 * MIB, seed=1)
    finally:
        done.set()
        await sampler
    assert ok
    assert encrypted.received > 96 * MIB and decrypted.received == 96 * MIB
    growth = (peak - baseline) / MIB
    assert growth < 64, f"server RSS grew by {growth:.1f} MiB"


async def test_gcm_key_round_trip_through_uvicorn(server: Server) -> None:
    """1 MiB gcm segments leave the format as memoryview slices: a real server sends and reads them right."""
    for size, chunked in ((9 * MIB + 12345, False), (3 * MIB - 7, True), (0, False)):
        ok, encrypted, decrypted = await round_trip(
            server, size, seed=size, key="stream-gcm", chunked=chunked
        )
        assert ok, (size, encrypted.status, decrypted.status)
        segments = max(1, -(-(size + 40) // (MIB - 16)))
        assert encrypted.received == size + 40 + 16 * segments and decrypted.received == size


async def test_a_declared_length_gets_an_answer_of_declared_length(server: Server) -> None:
    """uvicorn checks a declared length (it aborts a stream that sends more or less): every sealed answer
    to a request with Content-Length declares its own and sends exactly that, encrypt and decrypt, at the
    1 MiB segments' edges; a chunked request still gets a chunked answer."""
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    for key, tag in (("stream", 32), ("stream-gcm", 16)):
        later = MIB - tag
        first = later - 40
        for size in (65537, first - 1, first, first + 1, first + later, first + later + 1, 3 * MIB + 5):
            data = os.urandom(size)
            pieces = [data[start : start + 300_000] for start in range(0, size, 300_000)]
            encrypted = await duplex_request(
                server.host,
                server.port,
                "POST",
                f"/v1/keys/{key}/encrypt",
                headers,
                pieces,
                content_length=size,
                keep_body=True,
            )
            assert encrypted.status == 200 and "transfer-encoding" not in encrypted.headers
            assert int(encrypted.headers["content-length"]) == len(encrypted.body), (key, size)
            decrypted = await duplex_request(
                server.host,
                server.port,
                "POST",
                f"/v1/keys/{key}/decrypt",
                headers,
                encrypted.body,
                keep_body=True,
            )
            assert decrypted.status == 200 and "transfer-encoding" not in decrypted.headers
            assert decrypted.headers["content-length"] == str(size) and decrypted.body == data, (key, size)
        ok, encrypted, decrypted = await round_trip(server, 3 * MIB + 5, seed=7, key=key, chunked=True)
        assert ok
        assert (
            encrypted.headers["transfer-encoding"] == "chunked" and "content-length" not in encrypted.headers
        )
        assert decrypted.headers["transfer-encoding"] == "chunked"


async def test_concurrent_round_trips_are_all_exact(server: Server) -> None:
    cases: list[dict[str, Any]] = []
    for index in range(24):
        cases.append(
            {
                "size": (index * 397_123) % (3 * MIB) + 1,
                "seed": 100 + index,
                "fmt": "raw" if index % 3 == 0 else "sealed",
                "key": "small" if index % 2 else "stream",
                "chunked": index % 4 == 1,
            }
        )
    results = await asyncio.wait_for(
        asyncio.gather(*(round_trip(server, **case) for case in cases)), timeout=120
    )
    failures = [case for case, (ok, _, _) in zip(cases, results, strict=True) if not ok]
    assert not failures, failures


def _open_upload(server: Server, path: str, declared: int) -> socket.socket:
    sock = socket.create_connection((server.host, server.port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {server.auth['Authorization']}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n"
    )
    sock.sendall(head.encode())
    return sock


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


def _server_resources(server: Server) -> tuple[int, int]:
    process = psutil.Process(server.process.pid)
    return process.num_threads(), process.num_fds()


async def _wait_idle(server: Server) -> None:
    """Until keystream_inflight_requests counts only the scrape itself."""
    deadline = time.monotonic() + 10
    async with httpx.AsyncClient(base_url=server.url) as client:
        while time.monotonic() < deadline:
            text = (await client.get("/metrics")).text
            if metric_value(text, "keystream_inflight_requests ") == 1:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("requests still in flight after the client disconnected")


async def test_disconnect_mid_stream_leaves_nothing_behind(server: Server) -> None:
    await _wait_idle(server)
    threads_before, fds_before = _server_resources(server)
    rss_before = psutil.Process(server.process.pid).memory_info().rss
    block = os.urandom(MIB)
    for round_index in range(6):
        path = ("/v1/keys/stream/encrypt", "/v1/keys/stream/decrypt", "/v1/keys/small/encrypt?format=raw")[
            round_index % 3
        ]
        sock = await asyncio.to_thread(_open_upload, server, path, 512 * MIB)
        for _ in range(6):
            await asyncio.to_thread(sock.sendall, block)
        if "decrypt" not in path:
            sock.settimeout(10)
            assert (await asyncio.to_thread(sock.recv, 65536)).startswith(b"HTTP/1.1 200")
        _reset(sock)
    await _wait_idle(server)
    deadline = time.monotonic() + 10  # the server closes a reset connection's socket shortly after
    while True:
        threads_after, fds_after = _server_resources(server)
        if fds_after <= fds_before or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert fds_after <= fds_before, (fds_before, fds_after)
    assert threads_after <= max(threads_before, 48)
    growth = (psutil.Process(server.process.pid).memory_info().rss - rss_before) / MIB
    assert growth < 32, f"RSS grew {growth:.1f} MiB"
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/healthz")).status_code == 200


async def test_failure_after_start_aborts_the_connection(server: Server) -> None:
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    data = os.urandom(2 * MIB)
    encrypted = await duplex_request(
        server.host, server.port, "POST", "/v1/keys/small/encrypt", headers, data, keep_body=True
    )
    tampered = bytearray(encrypted.body)
    tampered[-100_000] ^= 1
    received: list[bytes] = []
    with pytest.raises(IncompleteResponseError):
        await duplex_request(
            server.host,
            server.port,
            "POST",
            "/v1/keys/small/decrypt",
            headers,
            [bytes(tampered[i : i + 65536]) for i in range(0, len(tampered), 65536)],
            sink=received.append,
        )
    assert 0 < sum(map(len, received)) < len(data)
    # the first segment bad: a clean JSON 400 instead
    tampered = bytearray(encrypted.body)
    tampered[60] ^= 1
    refused = await duplex_request(
        server.host, server.port, "POST", "/v1/keys/small/decrypt", headers, bytes(tampered), keep_body=True
    )
    assert refused.status == 400
    assert b'"decryption_failed"' in refused.body
