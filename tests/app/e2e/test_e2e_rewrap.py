"""Streaming rewrap against a real server (issue 12 item 4, "done when"): a 1 GiB stream sealed under
version 1 of a ``gcm`` key is rewrapped under version 2, whose material was given through ``import_version``,
and Google Tink, given only that material, decrypts the output: AesGcmHkdfStreaming byte for byte. The
server's RSS stays flat all along. And a rotation through one replica reaches another replica's rewrap, on
SQLite and on PostgreSQL.

Nothing of the 1 GiB is held anywhere: the plaintext is generated chunk by chunk into an encrypt request
(``key_version=1``), whose output feeds the rewrap request as it arrives, whose output goes through an OS
pipe into Tink's decrypting stream in a thread; the test compares SHA-256 digests. Timings on a 2-core host
shared with other jobs: about 20-40 s.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest
from tink import streaming_aead

from bench.duplex_client import duplex_request
from bench.service_process import Server, start_server, started_servers, stop_server
from tests.app.e2e.test_e2e_streaming import plaintext
from tests.app.formats.conftest import tink_keyset_handle

pytestmark = pytest.mark.e2e
MIB = 1 << 20
GIB = 1 << 30
AD = b"bucket=archive;object=1gib"
OCTETS = {"Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def import_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("rewrap")
    running = start_server(base / "data", base / "server.log", KEYSTREAM_ALLOW_KEY_IMPORT="true")
    try:
        yield running
    finally:
        stop_server(running)


def _tink_digest(read_fd: int, material: bytes) -> tuple[bytes, int]:
    """SHA-256 and length of what Tink decrypts from the pipe (read in this thread until EOF)."""
    primitive = tink_keyset_handle([(7, material)], 32, MIB, "gcm").primitive(streaming_aead.StreamingAead)
    digest, total = hashlib.sha256(), 0
    with open(read_fd, "rb") as source, primitive.new_decrypting_stream(source, AD) as stream:
        while block := stream.read(MIB):
            digest.update(block)
            total += len(block)
    return digest.digest(), total


async def test_1gib_rewrap_opens_with_tink_under_the_imported_material_and_memory_stays_flat(
    import_server: Server,
) -> None:
    streaming_aead.register()
    server = import_server
    material = os.urandom(32)
    with server.client() as client:
        created = client.post("/v1/keys", json={"name": "archive", "scheme": "gcm", "segment_size": MIB})
        assert created.status_code == 201, created.text
        imported = client.post(
            "/v1/keys/archive/import_version", json={"key": base64.b64encode(material).decode()}
        )
        assert imported.status_code == 200, imported.text
        assert imported.json()["latest_version"] == 2
    headers = {
        **server.auth,
        "Content-Type": "application/octet-stream",
        "Keystream-Associated-Data": base64.b64encode(AD).decode(),
    }
    expected = hashlib.sha256()
    sealed: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=8)
    read_fd, write_fd = os.pipe()
    tink = asyncio.create_task(asyncio.to_thread(_tink_digest, read_fd, material))
    pipe = open(write_fd, "wb")  # closed below, so that Tink sees the end

    async def source() -> AsyncIterator[bytes]:
        async for chunk in plaintext(GIB, seed=12):
            expected.update(chunk)
            yield chunk

    async def encrypt_v1() -> int:
        try:
            result = await duplex_request(
                server.host, server.port, "POST", "/v1/keys/archive/encrypt?key_version=1", headers,
                source(), content_length=GIB, sink=sealed.put, timeout=600,
            )  # fmt: skip
            assert result.headers["keystream-key-version"] == "1"
            return result.status
        finally:
            await sealed.put(None)

    async def ciphertext() -> AsyncIterator[bytes]:
        while (piece := await sealed.get()) is not None:
            yield piece

    async def to_tink(piece: bytes) -> None:
        await asyncio.to_thread(pipe.write, piece)

    process = psutil.Process(server.process.pid)
    baseline = peak = process.memory_info().rss
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process.memory_info().rss)
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        encrypted, rewrapped = await asyncio.gather(
            encrypt_v1(),
            duplex_request(
                server.host,
                server.port,
                "POST",
                "/v1/keys/archive/rewrap",
                headers,
                ciphertext(),
                sink=to_tink,
                timeout=600,
            ),
        )
    finally:
        done.set()
        await sampler
        await asyncio.to_thread(pipe.close)
    digest, length = await tink
    assert encrypted == 200
    assert rewrapped.status == 200
    assert rewrapped.headers["keystream-key-version"] == "2"
    segments = -(-(GIB + 40) // (MIB - 16))
    assert rewrapped.received == GIB + 40 + 16 * segments
    assert length == GIB
    assert digest == expected.digest()
    growth = (peak - baseline) / MIB
    print(f"rewrap 1 GiB: server RSS {baseline / MIB:.0f} MiB before, peak growth {growth:.1f} MiB")
    assert growth < 64, f"server RSS grew by {growth:.1f} MiB while rewrapping 1 GiB"


@pytest.fixture(params=["sqlite", "postgres"])
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    env = {"KEYSTREAM_CHANGE_POLL_INTERVAL": "0.1"}
    if request.param == "postgres":
        env["KEYSTREAM_DATABASE_URL"] = request.getfixturevalue("pg_url")
    with started_servers(2, tmp_path / "data", tmp_path, **env) as (first, second):
        yield first, second


def test_rewrap_through_another_replica_seals_under_the_rotated_version(
    replicas: tuple[Server, Server],
) -> None:
    """A rotation through one replica reaches the other's rewrap (whose cache held the key): SQLite and
    PostgreSQL."""
    first, second = replicas
    plaintext = os.urandom(3 * 4096 + 5)
    with first.client() as one, second.client() as two:
        created = one.post("/v1/keys", json={"name": "moving", "segment_size": 4096})
        assert created.status_code == 201, created.text
        old = two.post("/v1/keys/moving/encrypt", content=plaintext, headers=OCTETS)
        assert old.headers["Keystream-Key-Version"] == "1"
        assert two.post("/v1/keys/moving/rewrap", content=old.content, headers=OCTETS).status_code == 200
        assert one.post("/v1/keys/moving/rotate").status_code == 200
        deadline = time.monotonic() + 10
        while (rewrapped := two.post("/v1/keys/moving/rewrap", content=old.content, headers=OCTETS)).headers[
            "Keystream-Key-Version"
        ] != "2":
            assert rewrapped.status_code == 200, rewrapped.text
            assert time.monotonic() < deadline, "the rotation never reached the second replica's rewrap"
            time.sleep(0.05)
        opened = one.post("/v1/keys/moving/decrypt?key_version=2", content=rewrapped.content, headers=OCTETS)
        assert opened.status_code == 200, opened.text
        assert opened.content == plaintext
