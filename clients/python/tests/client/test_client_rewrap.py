"""Rewrap (``rewrap``, ``rewrap_stream``, ``rewrap_file``, ``rewrap_batch``) through the sync and async
clients against a real server: a ciphertext of an old version comes back sealed under the latest version and
opens to the same plaintext; tampering fails as decrypt's does; the ``rewrap`` scope suffices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keystream_client import (
    AsyncKeystreamClient,
    BatchItem,
    KeystreamAPIError,
    KeystreamClient,
    KeystreamStreamError,
)
from keystream_server import RunningServer

SEGMENT = 4096
AD = b"bucket=photos;object=cat.jpg"


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_rewrap_seals_under_the_latest_version(client: KeystreamClient, key_name: str, scheme: str) -> None:
    client.create_key(key_name, segment_size=SEGMENT, scheme=scheme)
    plaintext = os.urandom(10 * SEGMENT + 3)
    old = client.encrypt(key_name, plaintext, associated_data=AD)
    client.rotate_key(key_name)
    rewrapped = client.rewrap(key_name, old.data, associated_data=AD)
    assert (old.key_version, rewrapped.key_version) == (1, 2)
    assert client.decrypt(key_name, rewrapped.data, associated_data=AD, key_version=2).data == plaintext
    with client.rewrap_stream(
        key_name, iter([old.data[:5000], old.data[5000:]]), associated_data=AD
    ) as stream:
        assert stream.key_version == 2
        assert client.decrypt(key_name, stream.read(), associated_data=AD).data == plaintext
    with pytest.raises(KeystreamAPIError) as refused:
        client.rewrap(key_name, old.data, associated_data=AD, key_version=2)
    assert (refused.value.status, refused.value.code) == (400, "decryption_failed")
    with pytest.raises(TypeError):
        client.rewrap(key_name, old.data, format="raw")


def test_rewrap_file_and_a_later_failure(client: KeystreamClient, key_name: str, tmp_path: Path) -> None:
    client.create_key(key_name, segment_size=SEGMENT)
    plaintext = os.urandom(200 * SEGMENT)
    sealed = tmp_path / "sealed"
    client.encrypt_file(key_name, plaintext, sealed)
    client.rotate_key(key_name)
    result = client.rewrap_file(key_name, sealed, tmp_path / "rewrapped")
    assert result.key_version == 2
    assert client.decrypt(key_name, (tmp_path / "rewrapped").read_bytes()).data == plaintext
    tampered = bytearray(sealed.read_bytes())
    tampered[150 * SEGMENT] ^= 1
    with pytest.raises(KeystreamStreamError):
        client.rewrap_file(key_name, bytes(tampered), tmp_path / "broken")
    assert not (tmp_path / "broken").exists()


def test_rewrap_batch(client: KeystreamClient, key_name: str) -> None:
    client.create_key(key_name, segment_size=SEGMENT)
    sealed = client.encrypt_batch(key_name, [b"one", BatchItem(b"two", AD, "second")])
    client.rotate_key(key_name)
    items = [BatchItem(sealed[0].data or b""), BatchItem(sealed[1].data or b"", AD, "second"), b"garbage"]
    results = client.rewrap_batch(key_name, items)
    assert [result.ok for result in results] == [True, True, False]
    assert [result.key_version for result in results[:2]] == [2, 2]
    assert results[1].reference == "second"
    assert results[2].error is not None and results[2].error.code == "decryption_failed"
    opened = client.decrypt_batch(
        key_name, [BatchItem(results[0].data or b""), BatchItem(results[1].data or b"", AD)], key_version=2
    )
    assert [result.data for result in opened] == [b"one", b"two"]


def test_the_rewrap_scope_suffices(client: KeystreamClient, server: RunningServer, key_name: str) -> None:
    client.create_key(key_name, segment_size=SEGMENT)
    old = client.encrypt(key_name, b"secret").data
    client.rotate_key(key_name)
    token = client.create_token(["rewrap"], [key_name])
    with KeystreamClient(server.url, token.token) as limited:
        rewrapped = limited.rewrap(key_name, old)
        assert rewrapped.key_version == 2
        with pytest.raises(KeystreamAPIError) as refused:
            limited.decrypt(key_name, rewrapped.data)
        assert refused.value.status == 403
    assert client.decrypt(key_name, rewrapped.data).data == b"secret"


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_async_rewrap(server: RunningServer, key_name: str, scheme: str) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        await ks.create_key(key_name, segment_size=SEGMENT, scheme=scheme)
        plaintext = os.urandom(5 * SEGMENT)
        old = await ks.encrypt(key_name, plaintext, associated_data=AD)
        await ks.rotate_key(key_name)
        rewrapped = await ks.rewrap(key_name, old.data, associated_data=AD)
        assert rewrapped.key_version == 2
        assert (await ks.decrypt(key_name, rewrapped.data, associated_data=AD)).data == plaintext
        async with ks.rewrap_stream(key_name, old.data, associated_data=AD) as stream:
            assert (await ks.decrypt(key_name, await stream.read(), associated_data=AD)).data == plaintext
        (batch,) = await ks.rewrap_batch(key_name, [BatchItem(old.data, AD)])
        assert batch.ok and batch.key_version == 2
        with pytest.raises(ValueError, match="sealed"):
            await ks.rewrap(key_name, old.data, format="raw")
