"""``hmac``, ``verify_hmac``, ``random_bytes`` and ``hash`` through the sync and async clients against a real
server: tags verify and tampering does not, versions after a rotation, scopes, and bad arguments refused."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from keystream_client import AsyncKeystreamClient, KeystreamAPIError, KeystreamClient
from keystream_server import RunningServer


@pytest.mark.parametrize("algorithm", ["sha2-256", "sha2-384", "sha2-512"])
def test_hmac_verifies_and_tampering_does_not(client: KeystreamClient, key_name: str, algorithm: str) -> None:
    client.create_key(key_name, segment_size=4096)
    tag = client.hmac(key_name, b"order 42 paid", algorithm=algorithm)
    assert tag.startswith("ks:v1:")
    assert client.verify_hmac(key_name, b"order 42 paid", tag, algorithm=algorithm) is True
    assert client.verify_hmac(key_name, b"order 42 paid!", tag, algorithm=algorithm) is False
    client.rotate_key(key_name)
    assert client.hmac(key_name, b"x").startswith("ks:v2:")
    assert client.hmac(key_name, b"x", key_version=1).startswith("ks:v1:")
    assert client.verify_hmac(key_name, b"order 42 paid", tag, algorithm=algorithm) is True  # still version 1
    with pytest.raises(ValueError, match="sha2-256"):
        client.hmac(key_name, b"x", algorithm="md5")
    with pytest.raises(KeystreamAPIError) as malformed:
        client.verify_hmac(key_name, b"x", "vault:v1:AAAA")
    assert malformed.value.status == 400


def test_scopes(client: KeystreamClient, server: RunningServer, key_name: str) -> None:
    client.create_key(key_name, segment_size=4096)
    tag = client.hmac(key_name, b"webhook")
    checker = client.create_token(["verify"], [key_name])
    with KeystreamClient(server.url, checker.token) as limited:
        assert limited.verify_hmac(key_name, b"webhook", tag)
        with pytest.raises(KeystreamAPIError) as refused:
            limited.hmac(key_name, b"webhook")
        assert (refused.value.status, refused.value.code) == (403, "forbidden")


def test_random_and_hash(client: KeystreamClient) -> None:
    first, second = client.random_bytes(), client.random_bytes(64)
    assert len(first) == 32 and len(second) == 64 and first != second[:32]
    assert client.hash(b"abc") == hashlib.sha256(b"abc").digest()
    assert client.hash(b"abc", "sha3-512") == hashlib.sha3_512(b"abc").digest()
    with pytest.raises(KeystreamAPIError) as too_many:
        client.random_bytes(65537)
    assert too_many.value.status == 422
    with pytest.raises(ValueError, match="sha3-256"):
        client.hash(b"abc", "md5")


def test_async_client(server: RunningServer, key_name: str) -> None:
    async def run() -> None:
        async with AsyncKeystreamClient(server.url, server.token) as client:
            await client.create_key(key_name, segment_size=4096)
            tag = await client.hmac(key_name, b"async", algorithm="sha2-512")
            assert await client.verify_hmac(key_name, b"async", tag, algorithm="sha2-512")
            assert not await client.verify_hmac(key_name, b"other", tag, algorithm="sha2-512")
            assert len(await client.random_bytes(16)) == 16
            assert await client.hash(b"async", "sha2-384") == hashlib.sha384(b"async").digest()

    asyncio.run(run())
