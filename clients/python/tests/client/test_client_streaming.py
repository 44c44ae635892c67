"""Encrypt/decrypt through the client against a real server: every format, every source and destination kind,
tampered and truncated ciphertexts, batch calls, and the async client."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from keystream_client import (
    AsyncKeystreamClient,
    BatchItem,
    KeystreamAPIError,
    KeystreamClient,
    KeystreamClientError,
    KeystreamStreamError,
)
from keystream_server import RunningServer

SEGMENT = 4096
HEADER = 1 + 32 + 7  # aes256: length byte, salt, nonce prefix
TAG = 32
FIRST_PLAINTEXT = SEGMENT - TAG - HEADER
PLAINTEXT_PER_SEGMENT = SEGMENT - TAG


def _sealed_length(n: int) -> int:
    """Ciphertext length of the sealed format for n plaintext bytes (aes256, 4 KiB segments)."""
    if n <= FIRST_PLAINTEXT:
        return HEADER + n + TAG
    rest = n - FIRST_PLAINTEXT
    segments = 1 + -(-rest // PLAINTEXT_PER_SEGMENT)
    return HEADER + n + segments * TAG


@pytest.fixture
def small_key(client: KeystreamClient, key_name: str) -> str:
    client.create_key(key_name, segment_size=SEGMENT)
    return key_name


@pytest.mark.parametrize(
    "size",
    [
        0,
        1,
        FIRST_PLAINTEXT - 1,
        FIRST_PLAINTEXT,
        FIRST_PLAINTEXT + 1,
        FIRST_PLAINTEXT + PLAINTEXT_PER_SEGMENT,
        300_001,
    ],
)
def test_sealed_round_trip_sizes(client: KeystreamClient, small_key: str, size: int) -> None:
    plaintext = os.urandom(size)
    sealed = client.encrypt(small_key, plaintext, associated_data=b"context")
    assert sealed.key_version == 1 and sealed.iv is None and sealed.format == "sealed"
    assert len(sealed.data) == _sealed_length(size)
    opened = client.decrypt(small_key, sealed.data, associated_data=b"context")
    assert opened.data == plaintext and opened.key_version == 1


def test_sealed_wrong_associated_data_is_rejected(client: KeystreamClient, small_key: str) -> None:
    sealed = client.encrypt(small_key, b"secret", associated_data=b"right")
    with pytest.raises(KeystreamAPIError) as error:
        client.decrypt(small_key, sealed.data, associated_data=b"wrong")
    assert (error.value.status, error.value.code) == (400, "decryption_failed")


def test_sealed_after_rotation_old_versions_decrypt(client: KeystreamClient, small_key: str) -> None:
    old = client.encrypt(small_key, b"old message")
    client.rotate_key(small_key)
    new = client.encrypt(small_key, b"new message")
    assert (old.key_version, new.key_version) == (1, 2)
    assert client.decrypt(small_key, old.data).key_version == 1
    assert client.decrypt(small_key, old.data, key_version=1).data == b"old message"
    assert client.decrypt(small_key, new.data).data == b"new message"
    client.configure_key(small_key, min_decryption_version=2)
    with pytest.raises(KeystreamAPIError) as error:
        client.decrypt(small_key, old.data)
    assert error.value.status == 400


def test_raw_round_trip_with_generated_iv(client: KeystreamClient, small_key: str) -> None:
    plaintext = os.urandom(100_000)
    raw = client.encrypt(small_key, plaintext, format="raw")
    assert raw.iv is not None and len(raw.iv) == 16 and len(raw.data) == len(plaintext)
    assert raw.data != plaintext
    opened = client.decrypt(small_key, raw.data, format="raw", iv=raw.iv, key_version=raw.key_version)
    assert opened.data == plaintext


def test_raw_random_access_with_offset(client: KeystreamClient, small_key: str) -> None:
    plaintext = os.urandom(50_000)
    iv = os.urandom(16)
    whole = client.encrypt(small_key, plaintext, format="raw", iv=iv.hex())
    assert whole.iv == iv
    # Any slice decrypts on its own when its offset is given, including unaligned ones.
    for start, end in ((0, 16), (17, 1000), (12_345, 50_000)):
        part = client.decrypt(
            small_key, whole.data[start:end], format="raw", iv=iv, offset=start, key_version=1
        )
        assert part.data == plaintext[start:end]
    tail = client.encrypt(small_key, plaintext[777:], format="raw", iv=iv, offset=777)
    assert tail.data == whole.data[777:]


def test_raw_decrypt_needs_iv_and_version(client: KeystreamClient, small_key: str) -> None:
    with pytest.raises(ValueError, match="iv"):
        client.decrypt(small_key, b"x", format="raw")
    with pytest.raises(ValueError, match="raw format only"):
        client.encrypt(small_key, b"x", iv=bytes(16))


def test_sources_and_destinations(client: KeystreamClient, small_key: str, tmp_path: Path) -> None:
    plaintext = os.urandom(1_000_003)
    source = tmp_path / "plain.bin"
    source.write_bytes(plaintext)
    progress: list[int] = []

    # Path in, path out; the progress callback sees every byte.
    result = client.encrypt_file(small_key, source, tmp_path / "sealed.bin", on_progress=progress.append)
    assert sum(progress) == len(plaintext) == result.bytes_sent
    assert result.bytes_received == (tmp_path / "sealed.bin").stat().st_size == _sealed_length(len(plaintext))

    # File object in (Content-Length known), file object out.
    out = io.BytesIO()
    with (tmp_path / "sealed.bin").open("rb") as sealed:
        client.decrypt_file(small_key, sealed, out)
    assert out.getvalue() == plaintext

    # An iterator of chunks (sent chunked, length unknown) streams the same way.
    def chunks() -> Iterator[bytes]:
        for start in range(0, len(plaintext), 65_537):
            yield plaintext[start : start + 65_537]

    with client.encrypt_stream(small_key, chunks()) as stream:
        assert stream.key_version == 1
        sealed_again = b"".join(stream)
    assert client.decrypt(small_key, sealed_again).data == plaintext
    assert not list(tmp_path.glob(".*partial"))


def test_tampered_first_segment_is_an_api_error(client: KeystreamClient, small_key: str) -> None:
    sealed = bytearray(client.encrypt(small_key, os.urandom(20_000)).data)
    sealed[HEADER + 10] ^= 0x01
    with pytest.raises(KeystreamAPIError) as error:
        client.decrypt(small_key, bytes(sealed))
    assert error.value.code == "decryption_failed"


def _late_tamper(client: KeystreamClient, key: str, tmp_path: Path) -> tuple[bytes, Path]:
    plaintext = os.urandom(6 << 20)
    sealed_path = tmp_path / "sealed.bin"
    client.encrypt_file(key, plaintext, sealed_path)
    data = bytearray(sealed_path.read_bytes())
    data[len(data) - 5000] ^= 0x80  # a segment near the end: the response has long started
    sealed_path.write_bytes(bytes(data))
    return plaintext, sealed_path


def test_tampered_late_segment_aborts_the_stream(
    client: KeystreamClient, small_key: str, tmp_path: Path
) -> None:
    plaintext, sealed_path = _late_tamper(client, small_key, tmp_path)
    received = bytearray()
    with (
        pytest.raises(KeystreamStreamError) as caught,
        client.decrypt_stream(small_key, sealed_path) as stream,
    ):
        for chunk in stream:
            received += chunk
    # Everything released before the failure was verified plaintext, but the whole is never returned.
    assert 0 < len(received) < len(plaintext)
    assert plaintext.startswith(bytes(received))
    _assert_says_a_later_segment_failed(caught.value, len(received), "verified plaintext")


def _assert_says_a_later_segment_failed(error: Exception, received: int, output: str) -> None:
    """The words for a stream the service stopped: not the socket's ("Connection reset by peer", "incomplete
    chunked read"), which read like a network fault."""
    message = str(error)
    assert message.startswith(f"the service stopped the stream after {received} bytes of {output}"), message
    assert "a later segment of the ciphertext that failed authentication" in message
    assert "the service log names the segment" in message
    assert "reset" not in message.lower() and "chunked" not in message, message


@pytest.mark.parametrize("where", [0.5, 0.9])
def test_tampered_middle_segment_says_the_service_stopped_the_stream(
    client: KeystreamClient, small_key: str, where: float
) -> None:
    """Tampered while much of the request is still unread: the service's abort then reaches the client as a
    reset (the words were "Connection reset by peer")."""
    plaintext = os.urandom(24 << 20)
    sealed = bytearray(client.encrypt(small_key, plaintext).data)
    sealed[int(len(sealed) * where)] ^= 0x01
    received = bytearray()
    with (
        pytest.raises(KeystreamStreamError) as caught,
        client.decrypt_stream(small_key, bytes(sealed)) as stream,
    ):
        for chunk in stream:
            received += chunk
    assert plaintext.startswith(bytes(received))
    _assert_says_a_later_segment_failed(caught.value, len(received), "verified plaintext")
    with pytest.raises(KeystreamStreamError) as rewrapped:
        client.rewrap(small_key, bytes(sealed))
    assert "the service stopped the stream after" in str(rewrapped.value)
    assert "bytes of output (rewrapped verified plaintext)" in str(rewrapped.value)


def test_tampered_file_leaves_no_output(client: KeystreamClient, small_key: str, tmp_path: Path) -> None:
    _, sealed_path = _late_tamper(client, small_key, tmp_path)
    destination = tmp_path / "plain.out"
    with pytest.raises(KeystreamStreamError):
        client.decrypt_file(small_key, sealed_path, destination)
    assert not destination.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sealed.bin"]


def test_truncated_ciphertext_never_decrypts(client: KeystreamClient, small_key: str) -> None:
    sealed = client.encrypt(small_key, os.urandom(2 << 20)).data
    for cut in (sealed[:-1], sealed[: len(sealed) // 2], sealed[:SEGMENT]):
        with pytest.raises((KeystreamStreamError, KeystreamAPIError)):
            client.decrypt(small_key, cut)


def test_batch_round_trip_and_item_errors(client: KeystreamClient, small_key: str) -> None:
    items = [BatchItem(b"first", b"ad-1", "r1"), b"second", BatchItem(b"", None, "empty")]
    sealed = client.encrypt_batch(small_key, items)
    assert [r.ok for r in sealed] == [True, True, True]
    assert [r.reference for r in sealed] == ["r1", None, "empty"]
    assert all(r.key_version == 1 for r in sealed)
    assert all(r.data is not None for r in sealed)
    opened = client.decrypt_batch(
        small_key,
        [
            BatchItem(sealed[0].data or b"", b"ad-1", "r1"),
            BatchItem(sealed[1].data or b"", b"wrong", "bad-ad"),
            BatchItem(sealed[2].data or b"", None, "empty"),
        ],
    )
    assert opened[0].data == b"first" and opened[2].data == b""
    assert not opened[1].ok and opened[1].error is not None
    assert opened[1].error.code == "decryption_failed" and opened[1].reference == "bad-ad"
    with pytest.raises(KeystreamAPIError) as missing:
        client.encrypt_batch("no-such-key-anywhere", [b"x"])
    assert missing.value.status == 404


async def test_async_streaming_round_trips(server: RunningServer, small_key: str, tmp_path: Path) -> None:
    plaintext = os.urandom(3 << 20)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(plaintext), 100_000):
            await asyncio.sleep(0)
            yield plaintext[start : start + 100_000]

    async with AsyncKeystreamClient(server.url, server.token) as ks:
        async with ks.encrypt_stream(small_key, chunks(), associated_data=b"a") as stream:
            sealed = await stream.read()
        assert stream.key_version == 1
        assert (await ks.decrypt(small_key, sealed, associated_data=b"a")).data == plaintext

        raw = await ks.encrypt(small_key, plaintext, format="raw")
        path = tmp_path / "raw.bin"
        path.write_bytes(raw.data)
        result = await ks.decrypt_file(
            small_key, path, tmp_path / "plain.bin", format="raw", iv=raw.iv, key_version=raw.key_version
        )
        assert result.bytes_received == len(plaintext)
        assert (tmp_path / "plain.bin").read_bytes() == plaintext

        # Concurrent round trips on one client are all exact.
        messages = [os.urandom(200_000 + i) for i in range(8)]
        sealed_all = await asyncio.gather(*(ks.encrypt(small_key, m) for m in messages))
        opened_all = await asyncio.gather(*(ks.decrypt(small_key, s.data) for s in sealed_all))
        assert [o.data for o in opened_all] == messages

        with pytest.raises(KeystreamAPIError):
            await ks.decrypt(small_key, sealed[:-1] + bytes([sealed[-1] ^ 1]))


async def test_async_tampered_file_leaves_no_output(
    server: RunningServer, client: KeystreamClient, small_key: str, tmp_path: Path
) -> None:
    _, sealed_path = _late_tamper(client, small_key, tmp_path)
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        with pytest.raises(KeystreamStreamError) as caught:
            await ks.decrypt_file(small_key, sealed_path, tmp_path / "out.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sealed.bin"]
    assert "the service stopped the stream after" in str(caught.value)
    assert "a later segment of the ciphertext that failed authentication" in str(caught.value)


def test_large_stream_is_not_buffered(client: KeystreamClient, small_key: str) -> None:
    """64 MiB through encrypt and decrypt with both directions streaming (a half-duplex client stalls)."""
    size = 64 << 20
    block = os.urandom(1 << 20)
    expected = hashlib.sha256()
    for _ in range(size >> 20):
        expected.update(block)

    def source() -> Iterator[bytes]:
        for _ in range(size >> 20):
            yield block

    sealed = io.BytesIO()
    client.encrypt_file(small_key, source(), sealed)
    sealed.seek(0)
    digest = hashlib.sha256()
    with client.decrypt_stream(small_key, sealed) as stream:
        for chunk in stream:
            digest.update(chunk)
    assert digest.hexdigest() == expected.hexdigest()


def test_output_flows_while_the_source_waits(client: KeystreamClient, small_key: str) -> None:
    """A source that blocks until output arrives (like an interactive pipe) does not stall the transfer."""
    output_seen = threading.Event()

    def source() -> Iterator[bytes]:
        yield os.urandom(64 * 1024)
        assert output_seen.wait(timeout=20), "no output while the source was waiting"
        yield os.urandom(1000)

    start = time.monotonic()
    received = bytearray()
    with client.encrypt_stream(small_key, source()) as stream:
        for chunk in stream:
            received += chunk
            output_seen.set()
    assert time.monotonic() - start < 10
    assert len(received) == _sealed_length(64 * 1024 + 1000)


@pytest.mark.parametrize("fail_after", [0, 3])
def test_failing_source_aborts_the_request(client: KeystreamClient, small_key: str, fail_after: int) -> None:
    """A source that raises ends the call with the source's error and drops the connection (no hang)."""

    def source() -> Iterator[bytes]:
        for _ in range(fail_after):
            yield os.urandom(100_000)
        raise OSError("disk on fire")

    start = time.monotonic()
    with (
        pytest.raises(KeystreamClientError, match="disk on fire"),
        client.encrypt_stream(small_key, source()) as s,
    ):
        b"".join(s)
    assert time.monotonic() - start < 10
    # The service is fine afterwards.
    assert client.decrypt(small_key, client.encrypt(small_key, b"still here").data).data == b"still here"


def test_error_answer_to_a_large_upload_is_prompt(client: KeystreamClient) -> None:
    """The service refuses before reading the body: the client raises at once and stops uploading."""
    block = bytes(1 << 20)
    sent = []

    def source() -> Iterator[bytes]:
        for _ in range(1024):  # 1 GiB if it were all sent
            sent.append(1)
            yield block

    start = time.monotonic()
    with pytest.raises(KeystreamAPIError) as error:
        client.encrypt("no-such-key-for-upload", source())
    assert error.value.status == 404
    assert time.monotonic() - start < 3
    assert len(sent) < 1024
